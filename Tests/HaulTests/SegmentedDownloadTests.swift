import Foundation
import Haul
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
        let task = env.session.downloadTask(with: env.server.url("/file/seg?size=\(size)&seed=72&rate=4000000"))
        task.resume()
        #expect(await waitUntil { task.countOfBytesReceived > 4 << 20 })
        #expect(task.haulConnectionCount > 1, "several connections at work")
        let data = try #require(await task.cancelByProducingResumeData())
        _ = await env.delegate.completion(of: task)
        let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let point = try #require(object["resumePoint"] as? [String: Any])
        #expect(point["mapped"] as? Bool == true, "\(point)")
        let sentBefore = env.server.bodyBytesSent(forKey: "seg")
        let resumed = env.session.downloadTask(withResumeData: data)
        resumed.resume()
        #expect(await env.delegate.completion(of: resumed) == nil)
        #expect(env.delegate.finishedDigests == [TestContent.sha256Hex(size: size, seed: 72)])
        let total = env.server.bodyBytesSent(forKey: "seg")
        // What was on the wire (socket buffers, ≤ 512 KiB per connection) when the task was
        // cancelled is all that may be fetched twice.
        #expect(total - size <= 2 << 20, "fetched twice: \(total - size) bytes (\(sentBefore) before the cancel)")
        try await env.finish()
    }
}
