import Foundation
import HaulCore
@testable import HaulDaemon
import HaulTestSupport
import NIOCore
import Testing

/// Which loop a queued download's run goes to (``LoopSpread``): the pure choice, then the
/// queue's downloads on a real server.
@Suite("LoopSpread: large bodies on a loop per core, small ones on the transfer loop")
struct LoopSpreadTests {
    static let large = LoopSpread.largeBodyBytes
    static let small: Int64 = 16 << 10

    @Test("A host nothing is known of, or whose bodies are small, is not spread: its runs stay on the first loop, uncounted")
    func smallStaysOnFirstLoop() {
        var spread = LoopSpread()
        #expect((0..<4).map { _ in spread.loop(forHost: "a:80", knownBytes: nil, loops: 2) } == [nil, nil, nil, nil])
        for _ in 0..<3 { spread.noteBody(host: "a:80", bytes: Self.small) }
        #expect((0..<4).map { _ in spread.loop(forHost: "a:80", knownBytes: nil, loops: 2) } == [nil, nil, nil, nil])
        #expect(spread.loop(forHost: "a:80", knownBytes: Self.large - 1, loops: 2) == nil)
        #expect(spread.runs(of: "a:80") == [])
    }

    @Test("A host whose bodies are large has each run sent to the loop with the fewest of its runs; an ended run frees its loop's place")
    func largeGoesToTheFewest() {
        var spread = LoopSpread()
        spread.noteBody(host: "a:80", bytes: 256 << 10)
        #expect((0..<6).map { _ in spread.loop(forHost: "a:80", knownBytes: nil, loops: 3) } == [0, 1, 2, 0, 1, 2])
        #expect(spread.runs(of: "a:80") == [2, 2, 2])
        spread.ended(host: "a:80", loop: 1)
        spread.ended(host: "a:80", loop: 1)
        #expect((0..<3).map { _ in spread.loop(forHost: "a:80", knownBytes: nil, loops: 3) } == [1, 1, 0])
        // An end not counted (another loop, or one too many) changes nothing.
        spread.ended(host: "a:80", loop: 7)
        spread.ended(host: "b:80", loop: 0)
        #expect(spread.runs(of: "a:80") == [3, 2, 2])
        #expect((0..<3).map { _ in spread.loop(forHost: "a:80", knownBytes: nil, loops: 1) } == [nil, nil, nil])
        // A length known beforehand decides on its own, either way.
        var fresh = LoopSpread()
        #expect((0..<4).map { _ in fresh.loop(forHost: "b:80", knownBytes: Self.large, loops: 2) } == [0, 1, 0, 1])
        #expect(spread.loop(forHost: "a:80", knownBytes: Self.small, loops: 3) == nil)
        for loop in [0, 0, 0, 1, 1, 2, 2] { spread.ended(host: "a:80", loop: loop) }
        #expect(spread.runs(of: "a:80") == [], "no runs left: the host's counts go")
    }

    @Test("The typical body follows what completes: a quarter for each new one")
    func movingAverage() throws {
        var spread = LoopSpread()
        spread.noteBody(host: "a:80", bytes: 400_000)
        #expect(spread.typicalBody(of: "a:80") == 400_000)
        spread.noteBody(host: "a:80", bytes: 0)
        #expect(spread.typicalBody(of: "a:80") == 300_000)
        // Small bodies from now on: below the mark after a few, and the runs come back.
        var notes = 0
        while spread.isLarge(host: "a:80", knownBytes: nil) {
            spread.noteBody(host: "a:80", bytes: Self.small)
            notes += 1
        }
        #expect(notes == 4, "300,000 → 229,096 → 175,918 → 136,034 → 106,121")
        #expect(spread.loop(forHost: "a:80", knownBytes: nil, loops: 2) == nil)
        spread.noteBody(host: "a:80", bytes: -5)
        #expect(try #require(spread.typicalBody(of: "a:80")) < 106_121, "a negative count is taken as none")
    }

    @Test("Each host keeps its own typical body while others are noted in between, up to the hosts remembered")
    func hostsApart() {
        var spread = LoopSpread()
        spread.noteBody(host: "big:80", bytes: 1 << 20)
        spread.noteBody(host: "tiny:80", bytes: 100)
        spread.noteBody(host: "mid:80", bytes: 64 << 10)
        #expect(spread.typicalBody(of: "big:80") == Double(1 << 20))
        #expect(spread.typicalBody(of: "tiny:80") == 100)
        #expect(spread.typicalBody(of: "mid:80") == Double(64 << 10))
        #expect(spread.typicalBody(of: "other:80") == nil)
        spread.noteBody(host: "big:80", bytes: 0)
        #expect(spread.typicalBody(of: "big:80") == Double(3 << 18))
        #expect(spread.isLarge(host: "big:80", knownBytes: nil) && !spread.isLarge(host: "mid:80", knownBytes: nil))
        // Past the hosts remembered, the memory starts again: what was learnt is learnt again
        // from the next completed download; the host noted last is kept.
        for index in 0..<LoopSpread.hostsRemembered { spread.noteBody(host: "h\(index):80", bytes: 1) }
        #expect(spread.typicalBody(of: "big:80") == nil)
        #expect(spread.typicalBody(of: "h\(LoopSpread.hostsRemembered - 1):80") == 1)
        #expect(spread.typicalBody(of: "h\(LoopSpread.hostsRemembered - 2):80") == 1)
    }

    @Test("Queued downloads of large bodies run on more than one loop and arrive whole; small ones stay on the transfer loop")
    func queueSpreadsLargeBodies() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let harness = try QueueHarness()
        defer { try? FileManager.default.removeItem(at: harness.root) }
        let size = 256 << 10
        let loops = harness.core.engines.count
        #expect(loops == max(1, System.coreCount))
        var ids: [(id: Int64, seed: UInt64)] = []
        // One first, so that the host's bodies are known to be large when the rest start.
        ids.append((try await harness.queue.add(urls: [server.url("/file/big0.bin?size=\(size)&seed=100")]).id, 100))
        _ = try await harness.wait(for: ids[0].id, .complete)
        #expect(harness.core.runsOnOtherLoops == 0, "nothing was known of the host's bodies")
        // Added at once and paced (a quarter of a second each), so that they run side by side:
        // each goes to the loop with the fewest of the host's runs.
        let added = try await harness.queue.add((1..<12).map { index in
            NewDownload(urls: [server.url("/file/big\(index).bin?size=\(size)&seed=\(100 + index)&rate=1000000")])
        })
        for (offset, info) in added.enumerated() { ids.append((info.id, UInt64(101 + offset))) }
        for (id, seed) in ids {
            let info = try await harness.wait(for: id, .complete)
            let path = try #require(info.path)
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data(TestContent.bytes(0..<Int64(size), seed: seed)), "\(path)")
        }
        let spread = harness.core.runsOnOtherLoops
        if loops > 1 {
            // Four at once (the host's limit), two a loop: about half of the 11.
            #expect(spread >= 4, "11 runs over \(loops) loops, each to the one with the fewest: \(spread) went to the others")
        } else {
            #expect(spread == 0)
        }
        // Small bodies from now on (the host's typical body falls below the mark): they stay.
        for index in 0..<12 {
            let id = try await harness.queue.add(urls: [server.url("/file/small\(index).bin?size=2000&seed=\(index)")]).id
            _ = try await harness.wait(for: id, .complete)
        }
        let afterSmall = harness.core.runsOnOtherLoops
        for index in 12..<20 {
            let id = try await harness.queue.add(urls: [server.url("/file/small\(index).bin?size=2000&seed=\(index)")]).id
            _ = try await harness.wait(for: id, .complete)
        }
        #expect(harness.core.runsOnOtherLoops == afterSmall, "runs of small bodies went to another loop")
        #expect(harness.files().count == 32)
        await harness.close()
    }

    @Test("Spread over loops, a host's downloads keep no more connections open than its limit: a loop opening one has another close one it keeps idle first")
    func connectionsWithinTheHostLimit() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let harness = try QueueHarness()
        defer { try? FileManager.default.removeItem(at: harness.root) }
        _ = try await harness.queue.set("max-per-host", to: "3")
        let size = 200_000
        let first = try await harness.queue.add(urls: [server.url("/file/w0.bin?size=\(size)&seed=1")]).id
        _ = try await harness.wait(for: first, .complete)
        // Paced, so that runs overlap and both loops hold connections at once; then more, so
        // that each loop's share of the host's runs changes while the other keeps idle ones.
        var ids: [(Int64, UInt64)] = []
        for index in 1..<25 {
            let rate = index % 3 == 0 ? "&rate=2000000" : ""
            ids.append((try await harness.queue.add(urls: [server.url("/file/w\(index).bin?size=\(size)&seed=\(index)\(rate)")]).id, UInt64(index)))
        }
        for (id, seed) in ids {
            let info = try await harness.wait(for: id, .complete)
            #expect(try TestContent.sha256Hex(ofFileAt: info.path!) == TestContent.sha256Hex(size: Int64(size), seed: seed))
        }
        if harness.core.engines.count > 1 {
            #expect(harness.core.runsOnOtherLoops > 0)
        }
        let census = harness.core.engine.limiter.directConnections.openCount(host: "127.0.0.1", port: server.port)
        #expect(census.peak <= 3 && census.now <= 3, "counted open at once: \(census)")
        #expect(server.peakOpenConnections <= 3, "connections open to the host at once: \(server.peakOpenConnections)")
        await harness.close()
    }
}
