import Foundation
import HaulCore
@testable import HaulDaemon
import HaulTestSupport
import Testing

/// The queue's look-ahead: downloads started ahead of a free slot wait for one in their runs,
/// listed as waiting, and take it where it frees (``TransferCore/Limits/lookAhead``).
@Suite("Download queue: downloads started ahead", .serialized)
struct LookAheadTests {
    /// Queues `/file/NAME` (`size` bytes served at `rate` a second) from `server`; its id.
    static func add(
        _ name: String,
        seed: Int = 7,
        size: Int = 200_000,
        rate: Int = 800_000,
        priority: Int = 0,
        on server: FaultInjectingHTTPServer,
        to harness: QueueHarness
    ) async throws -> Int64 {
        try await harness.queue.add(urls: [server.url("/file/\(name)?size=\(size)&seed=\(seed)&rate=\(rate)")], priority: priority).id
    }

    /// Waits (at most 5 s) until `count` runs wait at the core's gate.
    static func waitForStandby(_ count: Int, in harness: QueueHarness) async throws {
        let deadline = ContinuousClock.now + .seconds(5)
        while harness.queue.standbyCount < count, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        #expect(harness.queue.standbyCount == count, "started ahead")
    }

    /// A queue with one slot: download `first` running in it, `ahead` (named so) started ahead
    /// and waiting at the gate. Close the harness and shut the server down when done.
    static func oneRunningOneAhead(named ahead: String) async throws -> (server: FaultInjectingHTTPServer, harness: QueueHarness, first: Int64, ahead: Int64) {
        let server = try await FaultInjectingHTTPServer.start()
        let harness = try QueueHarness()
        _ = try await harness.queue.set("max-concurrent", to: "1")
        let first = try await Self.add("first", on: server, to: harness)
        _ = try await harness.wait(for: first, .active)
        let started = try await Self.add(ahead, on: server, to: harness)
        try await Self.waitForStandby(1, in: harness)
        return (server, harness, first, started)
    }

    /// The names of the `/file/` requests `server` got, in order.
    static func fetched(by server: FaultInjectingHTTPServer) -> [String] {
        server.requests.map(\.uri).filter { $0.hasPrefix("/file/") }.map { String($0.dropFirst("/file/".count).prefix { $0 != "?" }) }
    }

    @Test("Started ahead, a download is listed as waiting and fetches nothing until a slot frees; the limit holds")
    func standbyIsWaiting() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let harness = try QueueHarness()
        _ = try await harness.queue.set("max-concurrent", to: "2")
        var ids: [Int64] = []
        for index in 0..<6 {
            // 1.5 s each: time enough for the picture below to settle on a loaded machine.
            ids.append(try await Self.add("la\(index)", seed: index, size: 300_000, rate: 200_000, on: server, to: harness))
        }
        // Two run, two more are started ahead (the look-ahead is the limit) and wait for a slot in
        // their runs, two wait in the queue. (Each step reaches the loop, then the queue's
        // thread: wait for the picture to settle.)
        let deadline = ContinuousClock.now + .seconds(5)
        var listed: [QueuedDownloadInfo] = []
        while ContinuousClock.now < deadline {
            listed = try await harness.queue.list()
            // (A host run's members started ahead wait in its line, not each at the gate.)
            let settled = harness.core.gate.counts.admitted == 2 && harness.queue.standbyCount == 2 && listed.filter { $0.state == .active }.count == 2
            if settled, server.requests.filter({ $0.uri.hasPrefix("/file/la") }).count == 2 { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(harness.core.counts.running == 4)
        #expect(harness.core.gate.counts.admitted == 2)
        #expect(harness.queue.standbyCount == 2)
        #expect(listed.filter { $0.state == .active }.map(\.id) == Array(ids[0..<2]), "\(listed.map { ($0.id, $0.state) })")
        #expect(listed.filter { $0.state == .waiting }.map(\.id) == Array(ids[2...]))
        try await Task.sleep(for: .milliseconds(100))
        #expect(server.requests.filter { $0.uri.hasPrefix("/file/la") }.count == 2, "the ones started ahead sent nothing")
        for id in ids { _ = try await harness.wait(for: id, .complete) }
        #expect(harness.peakActive.withLock { $0 } == 2, "never more than two listed active")
        // They were fetched in the queue's order, two by two as the two slots freed (the two of
        // a pair start together, so either may reach the server first).
        let order = server.requests.compactMap { request -> Int? in
            guard request.uri.hasPrefix("/file/la") else { return nil }
            return Int(request.uri.dropFirst("/file/la".count).prefix { $0.isNumber })
        }
        #expect(order.map { $0 / 2 } == [0, 0, 1, 1, 2, 2], "\(order)")
        for (index, id) in ids.enumerated() {
            let info = try await harness.queue.download(id: id)
            #expect(try TestContent.sha256Hex(ofFileAt: info.path!) == TestContent.sha256Hex(size: 300_000, seed: UInt64(index)))
        }
        #expect(harness.core.gate.counts == (admitted: 0, waiting: 0))
        await harness.close()
        try await server.shutdown()
    }

    @Test("A download ranked higher than one started ahead goes first: the one ahead yields, having fetched nothing")
    func higherRankOvertakesStandby() async throws {
        let (server, harness, first, ahead) = try await Self.oneRunningOneAhead(named: "ahead")
        let urgent = try await Self.add("urgent", priority: 10, on: server, to: harness)
        for id in [first, ahead, urgent] { _ = try await harness.wait(for: id, .complete) }
        #expect(Self.fetched(by: server) == ["first", "urgent", "ahead"])
        #expect(harness.peakActive.withLock { $0 } == 1)
        await harness.close()
        try await server.shutdown()
    }

    @Test("A download started ahead is changed as the waiting one it is listed as: a new URL")
    func standbyChangesAsWaiting() async throws {
        let (server, harness, _, ahead) = try await Self.oneRunningOneAhead(named: "old")
        #expect(try await harness.queue.download(id: ahead).state == .waiting)
        let changed = try await harness.queue.setURL(id: ahead, url: server.url("/file/new?size=200000&seed=8&rate=800000"))
        #expect(changed.state == .waiting)
        let done = try await harness.wait(for: ahead, .complete)
        #expect(try TestContent.sha256Hex(ofFileAt: done.path!) == TestContent.sha256Hex(size: 200_000, seed: 8))
        #expect(Self.fetched(by: server) == ["first", "new"], "the old URL was never asked for")
        await harness.close()
        try await server.shutdown()
    }

    @Test("A download started ahead and moved to the end of the waiting queue waits for its new turn")
    func standbyMovedBack() async throws {
        let (server, harness, first, ahead) = try await Self.oneRunningOneAhead(named: "ahead")
        let later = try await Self.add("later", on: server, to: harness)
        #expect(try await harness.queue.waitingQueue().map(\.id) == [ahead, later])
        #expect(try await harness.queue.changePosition(id: ahead, offset: 0, how: "POS_END") == 1)
        for id in [first, ahead, later] { _ = try await harness.wait(for: id, .complete) }
        #expect(Self.fetched(by: server) == ["first", "later", "ahead"])
        await harness.close()
        try await server.shutdown()
    }

    @Test("One host's downloads waiting ahead never keep another host's from running")
    func standbyLeavesOtherHostsRunning() async throws {
        let servers = [try await FaultInjectingHTTPServer.start(), try await FaultInjectingHTTPServer.start(), try await FaultInjectingHTTPServer.start()]
        let harness = try QueueHarness()
        _ = try await harness.queue.set("max-per-host", to: "1")
        _ = try await harness.queue.set("max-concurrent", to: "3")
        var ids: [Int64] = []
        for (index, server) in servers.enumerated() {
            for n in 0..<(index == 2 ? 2 : 5) {
                ids.append(try await Self.add("h\(index)-\(n)", seed: n, size: 300_000, rate: 400_000, on: server, to: harness))
            }
        }
        // Three hosts, one at a time each, three at once in all: the third host's first download
        // runs beside the other two's first ones, whatever waits ahead for those two hosts (each
        // takes ~0.75 s; the first to end stops the look).
        let deadline = ContinuousClock.now + .seconds(5)
        var active: [QueuedDownloadInfo] = []
        var listed: [QueuedDownloadInfo] = []
        while ContinuousClock.now < deadline {
            listed = try await harness.queue.list()
            active = listed.filter { $0.state == .active }
            if active.count == 3 || listed.contains(where: { $0.state == .complete }) { break }
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(active.count == 3, "\(listed.map { ($0.id, $0.state) })")
        #expect(Set(active.map { $0.urls[0].port }).count == 3, "one per host")
        for id in ids { _ = try await harness.wait(for: id, .complete) }
        #expect(harness.peakActive.withLock { $0 } == 3)
        await harness.close()
        for server in servers { try await server.shutdown() }
    }
}
