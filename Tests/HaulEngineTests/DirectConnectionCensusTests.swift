import AsyncHTTPClient
import NIOCore
import NIOPosix
import Synchronization
import Testing

@testable import HaulEngine

/// The census of the direct connections that engines sharing a limiter keep per host
/// (``DirectConnectionCensus``): places given at once within the limit, in order once one is
/// given back, after the time given regardless, and refused when the pool shuts down.
@Suite("DirectConnectionCensus: engines sharing a limiter keep a host's connections within it together")
struct DirectConnectionCensusTests {
    static let key = HTTP1ConnectionPool.Key(host: "127.0.0.1", port: 8080)

    /// Two pools on two loops, sharing a limiter of `limit`.
    static func pools(limit: Int) -> (HostConnectionLimiter, HTTP1ConnectionPool, HTTP1ConnectionPool, MultiThreadedEventLoopGroup) {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let limiter = HostConnectionLimiter(limit: limit)
        let loops = Array(group.makeIterator())
        let first = HTTP1ConnectionPool(eventLoop: loops[0], connectTimeout: .seconds(5), idleTimeout: .seconds(5), limiter: limiter)
        let second = HTTP1ConnectionPool(eventLoop: loops[1], connectTimeout: .seconds(5), idleTimeout: .seconds(5), limiter: limiter)
        return (limiter, first, second, group)
    }

    @Test("Places within the limit are given at once; past it a reservation waits, first come first served, for one given back")
    func waitsForAPlace() async throws {
        let (limiter, first, second, group) = Self.pools(limit: 2)
        let census = limiter.directConnections
        try await census.reserve(Self.key, limit: 2, for: first, waitingAtMost: .seconds(30)).get()
        try await census.reserve(Self.key, limit: 2, for: second, waitingAtMost: .seconds(30)).get()
        #expect(census.openCount(host: "127.0.0.1", port: 8080) == (2, 2))
        let order = Mutex<[String]>([])
        let third = census.reserve(Self.key, limit: 2, for: first, waitingAtMost: .seconds(30))
        third.whenSuccess { order.withLock { $0.append("third") } }
        let fourth = census.reserve(Self.key, limit: 2, for: second, waitingAtMost: .seconds(30))
        fourth.whenSuccess { order.withLock { $0.append("fourth") } }
        #expect(census.hasWaiters(for: Self.key), "a pool done with a connection closes it for them")
        // Another host is counted apart.
        let other = HTTP1ConnectionPool.Key(host: "127.0.0.1", port: 9090)
        try await census.reserve(other, limit: 2, for: first, waitingAtMost: .seconds(30)).get()
        try await Task.sleep(for: .milliseconds(50))
        #expect(order.withLock { $0 } == [], "nobody gave a place back")
        let given = ContinuousClock.now
        census.closed(Self.key, limit: 2)
        try await third.get()
        #expect(ContinuousClock.now - given < .seconds(5), "the place given back went to the first waiting, not its time running out")
        #expect(order.withLock { $0 } == ["third"])
        census.closed(Self.key, limit: 2)
        try await fourth.get()
        #expect(order.withLock { $0 } == ["third", "fourth"])
        #expect(!census.hasWaiters(for: Self.key))
        #expect(census.openCount(host: "127.0.0.1", port: 8080) == (2, 2), "never more than two at once")
        try await group.shutdownGracefully()
    }

    @Test("A reservation that waited its time takes a place over the limit rather than hold its download up")
    func waitsAtMostTheTimeGiven() async throws {
        let (limiter, first, second, group) = Self.pools(limit: 1)
        let census = limiter.directConnections
        try await census.reserve(Self.key, limit: 1, for: first, waitingAtMost: .seconds(30)).get()
        let started = ContinuousClock.now
        try await census.reserve(Self.key, limit: 1, for: second, waitingAtMost: .milliseconds(100)).get()
        #expect(ContinuousClock.now - started >= .milliseconds(100))
        #expect(census.openCount(host: "127.0.0.1", port: 8080).now == 2)
        #expect(!census.hasWaiters(for: Self.key))
        // A place given back later goes to nobody waiting: the count comes down.
        census.closed(Self.key, limit: 1)
        census.closed(Self.key, limit: 1)
        census.closed(Self.key, limit: 1)
        #expect(census.openCount(host: "127.0.0.1", port: 8080).now == 0, "never below none")
        try await group.shutdownGracefully()
    }

    @Test("A pool that shuts down has its waiting reservations refused; the other pool's keep waiting")
    func shutdownRefusesWaiters() async throws {
        let (limiter, first, second, group) = Self.pools(limit: 1)
        let census = limiter.directConnections
        try await census.reserve(Self.key, limit: 1, for: first, waitingAtMost: .seconds(30)).get()
        let refused = census.reserve(Self.key, limit: 1, for: first, waitingAtMost: .seconds(30))
        let kept = census.reserve(Self.key, limit: 1, for: second, waitingAtMost: .seconds(30))
        await first.shutdown()
        await #expect(throws: HTTPClientError.alreadyShutdown) { try await refused.get() }
        #expect(census.hasWaiters(for: Self.key))
        census.closed(Self.key, limit: 1)
        try await kept.get()
        try await group.shutdownGracefully()
    }
}
