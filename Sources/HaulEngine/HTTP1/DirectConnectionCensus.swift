import AsyncHTTPClient
import NIOCore
import Synchronization

/// The open direct connections (``HTTP1ConnectionPool``) per host of every engine that shares
/// one ``HostConnectionLimiter``, so that together they never hold more connections to a host
/// than its limit.
///
/// The limiter bounds the exchanges under way per host; each engine's pool keeps its finished
/// connections for the next exchange. With one engine that bounds the connections too: a pool
/// opens one only when none of its own is idle. Engines on different loops (hauld's, for large
/// bodies) each keep their own: the connections one keeps idle, or is just done with, would come
/// on top of those another opens. So a pool reserves each connection here before it opens it
/// (``reserve(_:limit:for:)``). With the host's count at its limit, the reservation waits: the
/// pools close an idle connection to the host for it (one is asked at once), and one that
/// finishes its exchange meanwhile is closed instead of kept (``hasWaiters(for:)``); each close
/// hands its place to the first waiting reservation (``closed(_:limit:)``).
///
/// Called on the pools' loops; the counts are under a lock. A reservation is given back when its
/// connection closes, fails to connect, or is not needed any more.
package final class DirectConnectionCensus: Sendable {
    private struct Waiter {
        var promise: EventLoopPromise<Void>
        var pool: ObjectIdentifier
    }

    private struct State {
        var open: [HTTP1ConnectionPool.Key: Int] = [:]
        /// The most counted open at once, per host.
        var peak: [HTTP1ConnectionPool.Key: Int] = [:]
        var waiting: [HTTP1ConnectionPool.Key: [Waiter]] = [:]
        var pools: [WeakPool] = []
    }

    private struct WeakPool {
        weak var pool: HTTP1ConnectionPool?
    }

    private let state = Mutex(State())

    package init() {}

    /// `pool` keeps its connections counted here from now on.
    func register(_ pool: HTTP1ConnectionPool) {
        self.state.withLock { state in
            state.pools.removeAll { $0.pool == nil }
            state.pools.append(WeakPool(pool: pool))
        }
    }

    /// A place for one more connection to `key` within `limit`, for `pool`: succeeds on the
    /// pool's loop at once while fewer are open (and no reservation waits before it), else once
    /// one closes, or after `wait` regardless (a count that never comes down — a connection
    /// whose close was not seen — costs a wait, never a download). Fails with
    /// `HTTPClientError.alreadyShutdown` when the pool shuts down first.
    func reserve(_ key: HTTP1ConnectionPool.Key, limit: Int, for pool: HTTP1ConnectionPool, waitingAtMost wait: TimeAmount) -> EventLoopFuture<Void> {
        let waiter = self.state.withLock { state -> Waiter? in
            let count = state.open[key, default: 0]
            if count < limit, state.waiting[key] == nil {
                state.open[key] = count + 1
                state.peak[key] = max(state.peak[key, default: 0], count + 1)
                return nil
            }
            let waiter = Waiter(promise: pool.eventLoop.makePromise(), pool: ObjectIdentifier(pool))
            state.waiting[key, default: []].append(waiter)
            return waiter
        }
        guard let waiter else { return pool.eventLoop.makeSucceededVoidFuture() }
        let pools = self.state.withLock { state in state.pools.compactMap(\.pool) }
        _ = Self.closeIdle(key, in: pools[...], on: pool.eventLoop)
        let promise = waiter.promise
        let late = pool.eventLoop.scheduleTask(in: wait) { self.giveUpWaiting(promise, key: key) }
        promise.futureResult.whenComplete { _ in late.cancel() }
        return promise.futureResult
    }

    /// `promise` waited its time: it takes a place over the limit, if it still waits.
    private func giveUpWaiting(_ promise: EventLoopPromise<Void>, key: HTTP1ConnectionPool.Key) {
        let found = self.state.withLock { state -> Bool in
            guard var waiters = state.waiting[key], let index = waiters.firstIndex(where: { $0.promise.futureResult === promise.futureResult }) else { return false }
            waiters.remove(at: index)
            state.waiting[key] = waiters.isEmpty ? nil : waiters
            state.open[key, default: 0] += 1
            return true
        }
        if found { promise.succeed() }
    }

    /// A connection to `key` reserved here closed, did not connect, or was not needed: its place
    /// goes to the first reservation waiting, if the count is below `limit` without it.
    func closed(_ key: HTTP1ConnectionPool.Key, limit: Int) {
        let woken = self.state.withLock { state -> Waiter? in
            var count = max(0, state.open[key, default: 0] - 1)
            var woken: Waiter?
            if count < limit, var waiters = state.waiting[key], !waiters.isEmpty {
                woken = waiters.removeFirst()
                state.waiting[key] = waiters.isEmpty ? nil : waiters
                count += 1
                state.peak[key] = max(state.peak[key, default: 0], count)
            }
            state.open[key] = count > 0 ? count : nil
            return woken
        }
        woken?.promise.succeed()
    }

    /// Whether a reservation for `key` waits: a pool done with a connection to it closes it
    /// instead of keeping it idle.
    func hasWaiters(for key: HTTP1ConnectionPool.Key) -> Bool {
        self.state.withLock { $0.waiting[key] != nil }
    }

    /// `pool` shuts down: its waiting reservations fail.
    func cancelWaiters(of pool: HTTP1ConnectionPool) {
        let id = ObjectIdentifier(pool)
        let cancelled = self.state.withLock { state -> [Waiter] in
            var cancelled: [Waiter] = []
            for (key, waiters) in state.waiting {
                cancelled += waiters.filter { $0.pool == id }
                let kept = waiters.filter { $0.pool != id }
                state.waiting[key] = kept.isEmpty ? nil : kept
            }
            return cancelled
        }
        for waiter in cancelled { waiter.promise.fail(HTTPClientError.alreadyShutdown) }
    }

    /// Connections to a host counted open now, and the most at once so far (for tests and
    /// diagnostics).
    package func openCount(host: String, port: Int) -> (now: Int, peak: Int) {
        let key = HTTP1ConnectionPool.Key(host: host, port: port)
        return self.state.withLock { ($0.open[key] ?? 0, $0.peak[key] ?? 0) }
    }

    /// Asks `pools`, one after another, to close one idle connection to `key`: `true` once one
    /// has closed, `false` when none had one.
    private static func closeIdle(_ key: HTTP1ConnectionPool.Key, in pools: ArraySlice<HTTP1ConnectionPool>, on loop: any EventLoop) -> EventLoopFuture<Bool> {
        guard let pool = pools.first else { return loop.makeSucceededFuture(false) }
        return pool.eventLoop.flatSubmit { pool.closeOneIdle(key) }
            .hop(to: loop)
            .flatMap { closed in closed ? loop.makeSucceededFuture(true) : Self.closeIdle(key, in: pools.dropFirst(), on: loop) }
    }
}
