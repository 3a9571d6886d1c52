import Foundation
import HaulCore
@testable import HaulDaemon
import HaulTestSupport
import Testing

/// Plain downloads of small files run in their host's run (``HostRun``): each is still a
/// download of its own to the queue, with the limits, listings and controls of any.
@Suite("Download queue: host runs", .serialized)
struct HostRunTests {
    /// Queues `/file/NAME` (`size` bytes of `seed`, served at `rate` a second when given); its id.
    static func add(_ name: String, size: Int, seed: Int, rate: Int? = nil, on server: FaultInjectingHTTPServer, to harness: QueueHarness) async throws -> Int64 {
        let query = "size=\(size)&seed=\(seed)" + (rate.map { "&rate=\($0)" } ?? "")
        return try await harness.queue.add(urls: [server.url("/file/\(name)?\(query)")], fileName: "\(name).bin").id
    }

    /// Waits (at most 5 s) until `condition` holds; records an issue if it does not.
    static func waitUntil(_ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(5)
        while !condition(), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        #expect(condition())
    }

    @Test("Many small downloads go through their host's run: each complete with the server's bytes, fetched once, never more listed active than max-concurrent")
    func manySmallFiles() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let harness = try QueueHarness()
        _ = try await harness.queue.set("max-concurrent", to: "4")
        let count = 300
        let requests = (0..<count).map { index in
            NewDownload(urls: [server.url("/file/h\(index)?size=\(3000 + index * 7)&seed=\(index)")], fileName: "h\(index).bin")
        }
        let added = try await harness.queue.add(requests)
        for (index, download) in added.enumerated() {
            let done = try await harness.wait(for: download.id, .complete)
            #expect(done.path == harness.downloads.path + "/h\(index).bin")
            #expect(try TestContent.sha256Hex(ofFileAt: done.path!) == TestContent.sha256Hex(size: Int64(3000 + index * 7), seed: UInt64(index)), "h\(index)")
        }
        #expect(harness.queue.hostRunStarts == count, "every one ran in the host's run")
        #expect(server.requests.filter { $0.uri.hasPrefix("/file/h") }.count == count, "each fetched once")
        #expect(harness.peakActive.withLock { $0 } <= 4)
        #expect(harness.core.gate.counts == (admitted: 0, waiting: 0), "every slot given back")
        #expect(harness.queue.standbyCount == 0)
        await harness.close()
    }

    @Test("With host runs off (hauld --no-host-runs) the same downloads run each on its own")
    func hostRunsOff() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let harness = try QueueHarness(configure: { $0.usesHostRuns = false })
        _ = try await harness.queue.set("max-concurrent", to: "2")
        var ids: [Int64] = []
        for index in 0..<20 { ids.append(try await Self.add("o\(index)", size: 5000, seed: index, on: server, to: harness)) }
        for (index, id) in ids.enumerated() {
            let done = try await harness.wait(for: id, .complete)
            #expect(try TestContent.sha256Hex(ofFileAt: done.path!) == TestContent.sha256Hex(size: 5000, seed: UInt64(index)))
        }
        #expect(harness.queue.hostRunStarts == 0)
        #expect(harness.peakActive.withLock { $0 } <= 2)
        await harness.close()
    }

    @Test("A download waiting in its host run's line is listed as waiting, sends nothing, and is paused, resumed or removed there; one in flight pauses and continues")
    func controlsInTheLine() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let harness = try QueueHarness()
        _ = try await harness.queue.set("max-concurrent", to: "1")
        // 400,000 bytes at 250,000 a second: the one slot is taken for 1.6 s.
        let slow = try await Self.add("slow", size: 400_000, seed: 1, rate: 250_000, on: server, to: harness)
        _ = try await harness.wait(for: slow, .active)
        // With one slot, one download is started ahead (the look-ahead is the limit): it waits
        // in the host run's line.
        func waitForStandby() async throws {
            let deadline = ContinuousClock.now + .seconds(5)
            while harness.queue.standbyCount < 1, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
            #expect(harness.queue.standbyCount == 1, "it waits in the host run's line")
        }
        let paused = try await Self.add("paused", size: 9000, seed: 2, on: server, to: harness)
        try await waitForStandby()
        #expect(try await harness.queue.download(id: paused).state == .waiting)
        try await harness.queue.pause(id: paused)
        #expect(try await harness.queue.download(id: paused).state == .paused)
        // Its run ends stopped through the inbox, as a run's stopped at the gate does.
        try await Self.waitUntil { harness.queue.standbyCount == 0 }

        let removed = try await Self.add("removed", size: 9000, seed: 3, on: server, to: harness)
        try await waitForStandby()
        #expect(try await harness.queue.download(id: removed).state == .waiting)
        try await harness.queue.cancel(id: removed, deleteFromList: true)
        try await Self.waitUntil { harness.queue.standbyCount == 0 }
        await #expect(throws: DaemonError.self, "removed from the list once its run ended") { try await harness.queue.download(id: removed) }
        #expect(try await harness.queue.download(id: slow).state == .active, "the slow one still runs: all of that happened in its 1.6 s")

        // The slow one in flight pauses with its bytes and continues from them.
        let before = try await harness.wait(for: slow) { $0.bytesDone > 100_000 }
        #expect(before.state == .active)
        try await harness.queue.pause(id: slow)
        let stopped = try await harness.queue.download(id: slow)
        #expect(stopped.state == .paused && stopped.bytesDone > 0)
        try await harness.queue.resume(id: slow)
        try await harness.queue.resume(id: paused)
        let slowDone = try await harness.wait(for: slow, .complete)
        #expect(try TestContent.sha256Hex(ofFileAt: slowDone.path!) == TestContent.sha256Hex(size: 400_000, seed: 1))
        #expect(server.requests.contains { $0.uri.hasPrefix("/file/slow") && $0.header("Range") != nil }, "continued, not fetched again")
        let pausedDone = try await harness.wait(for: paused, .complete)
        #expect(try TestContent.sha256Hex(ofFileAt: pausedDone.path!) == TestContent.sha256Hex(size: 9000, seed: 2))
        #expect(!server.requests.contains { $0.uri.hasPrefix("/file/removed") }, "the removed one sent nothing")
        #expect(server.requests.filter { $0.uri.hasPrefix("/file/paused") }.count == 1, "the paused one sent nothing before it was resumed")
        #expect(!FileManager.default.fileExists(atPath: harness.downloads.path + "/removed.bin"))
        #expect(harness.peakActive.withLock { $0 } == 1)
        await harness.close()
    }

    @Test("A member the server refuses ends with the server's status, as any download; the others go on")
    func memberFails() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let harness = try QueueHarness()
        let missing = try await harness.queue.add(urls: [server.url("/status/404")]).id
        let fine = try await Self.add("fine", size: 7000, seed: 4, on: server, to: harness)
        let failed = try await harness.wait(for: missing, .error)
        #expect(failed.errorMessage?.contains("404") == true, "\(failed.errorMessage ?? "")")
        let done = try await harness.wait(for: fine, .complete)
        #expect(try TestContent.sha256Hex(ofFileAt: done.path!) == TestContent.sha256Hex(size: 7000, seed: 4))
        #expect(harness.queue.hostRunStarts >= 2)
        await harness.close()
    }

    @Test("Downloads with a checksum, mirrors or a speed limit of their own run each on its own")
    func notPlain() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let harness = try QueueHarness()
        let checked = try await harness.queue.add(
            urls: [server.url("/file/c?size=6000&seed=5")], checksum: "sha256=" + TestContent.sha256Hex(size: 6000, seed: 5)
        ).id
        let mirrored = try await harness.queue.add(urls: [server.url("/file/m?size=6000&seed=6"), server.url("/file/m?size=6000&seed=6&mirror=1")]).id
        let limited = try await harness.queue.add(urls: [server.url("/file/l?size=6000&seed=7")], speedLimit: 1_000_000).id
        for id in [checked, mirrored, limited] { _ = try await harness.wait(for: id, .complete) }
        #expect(harness.queue.hostRunStarts == 0)
        await harness.close()
    }
}
