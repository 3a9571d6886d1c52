import Foundation
import Haul
import HaulCore
import HaulTestSupport
import Testing

/// The library's opt-in segmented downloads (`haulMaximumConnectionsPerDownload`).
@Suite("Segmented downloads through the library")
struct SegmentedDownloadTests {
    @Test("Off by default: a download task is one request, as with URLSession")
    func offByDefault() async throws {
        let env = try await TestEnvironment.make()
        let task = env.session.downloadTask(with: env.server.url("/file/one?size=\(8 << 20)&seed=71"))
        task.resume()
        #expect(await env.delegate.completion(of: task) == nil)
        #expect(env.server.requestCount(forKey: "one") == 1)
        try await env.finish()
    }

    @Test("Four connections; cancel(byProducingResumeData:) carries the map; the resumed task fetches only what is missing")
    func segmentedAndResumed() async throws {
        let env = try await TestEnvironment.make { $0.haulMaximumConnectionsPerDownload = 4 }
        let size: Int64 = 16 << 20
        // Every response holds after 2 MB until the gate opens: the download cannot end before
        // the test has looked, however loaded the machine.
        let task = env.session.downloadTask(with: env.server.url("/file/seg?size=\(size)&seed=72&rate=2000000&gate=seg&holdAfter=2000000"))
        task.resume()
        // Several connections at work, mid-download (polled: a loaded test run can make one
        // look take long, and the check must not land after the last lane ended).
        #expect(await waitUntil { task.haulConnectionCount > 1 && task.countOfBytesReceived > 3 << 20 }, "several connections at work")
        let data = try #require(await task.cancelByProducingResumeData())
        _ = await env.delegate.completion(of: task)
        let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let point = try #require(object["resumePoint"] as? [String: Any])
        #expect(point["mapped"] as? Bool == true, "\(point)")
        let sentBefore = env.server.bodyBytesSent(forKey: "seg")
        let requestsBefore = env.server.requests.count
        env.server.openGate("seg")
        let resumePoint = try ResumeData.decode(data).resumePoint
        let done = resumePoint.done
        let resumed = env.session.downloadTask(withResumeData: data)
        resumed.resume()
        #expect(await env.delegate.completion(of: resumed) == nil)
        #expect(env.delegate.finishedDigests == [TestContent.sha256Hex(size: size, seed: 72)])
        // The resumed task asks only for what the map lacks: its first request continues at the
        // map's prefix, every segment request lies outside the map.
        for request in env.server.requests[requestsBefore...] {
            let range = try #require(request.header("Range"), "every resumed request is a range request")
            let bounds = range.dropFirst(6).split(separator: "-", omittingEmptySubsequences: false).map { Int64($0) }
            if let end = bounds[1] {
                #expect(done.nextCovered(from: bounds[0]!).map { $0 > end } ?? true, "\(range) asks again for bytes on disk")
            } else {
                #expect(bounds[0] == done.prefixLength, "\(range)")
            }
        }
        // What was sent twice: the bytes that had left the server but were not on disk when the
        // task was cancelled (in the kernel's socket buffers: how much depends on the machine's
        // settings and its load), fetched again, and the end game's copies, at most half the
        // file. A loaded 2-core run had 15 MB sent twice, over a fixed 14 MiB bound.
        let total = env.server.bodyBytesSent(forKey: "seg")
        let lost = max(0, sentBefore - done.byteCount)
        #expect(total - size <= lost + size / 2, "sent twice: \(total - size) bytes (\(sentBefore) before the cancel, \(done.byteCount) of them kept)")
        try await env.finish()
    }

    /// A session that allows four connections per download and finds its first connection
    /// sufficient alone at `speed` bytes per second.
    private func environment(sufficientSpeed speed: Double) async throws -> TestEnvironment {
        try await TestEnvironment.make {
            $0.haulMaximumConnectionsPerDownload = 4
            $0.haulSufficientConnectionSpeed = speed
        }
    }

    @Test("A first connection fast enough alone keeps the download to itself (haulSufficientConnectionSpeed)")
    func sufficientConnectionIsNotSplit() async throws {
        // 0 bytes per second: any connection is fast enough, so four allowed connections stay one.
        let env = try await self.environment(sufficientSpeed: 0)
        let size: Int64 = 8 << 20
        let task = env.session.downloadTask(with: env.server.url("/file/alone?size=\(size)&seed=73&rate=16000000"))
        task.resume()
        #expect(await env.delegate.completion(of: task) == nil)
        #expect(env.delegate.finishedDigests == [TestContent.sha256Hex(size: size, seed: 73)])
        #expect(env.server.requestCount(forKey: "alone") == 1, "one request: the download was never split")
        try await env.finish()
    }

    @Test("A first connection that stalls gets help: segments start, and the file is exact")
    func stallOpensTheGate() async throws {
        // 1 byte per second is enough while bytes flow at all; the server then holds the
        // response after 3 MB (every response does, until the gate opens): a window without a
        // byte opens the gate, whatever the machine's load.
        let env = try await self.environment(sufficientSpeed: 1)
        let size: Int64 = 16 << 20
        let task = env.session.downloadTask(with: env.server.url("/file/stall?size=\(size)&seed=74&rate=20000000&gate=stall&holdAfter=3000000"))
        task.resume()
        #expect(await waitUntil { task.haulConnectionCount > 1 }, "the stall made the download open more connections")
        env.server.openGate("stall")
        #expect(await env.delegate.completion(of: task) == nil)
        #expect(env.delegate.finishedDigests == [TestContent.sha256Hex(size: size, seed: 74)])
        #expect(env.server.requestCount(forKey: "stall") > 1)
        try await env.finish()
    }
}

