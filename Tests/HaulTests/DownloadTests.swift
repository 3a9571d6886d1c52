import Foundation
import Haul
import HaulTestSupport
import Testing

@Suite("Downloads through the delegate API")
struct DownloadTests {
    @Test("A plain download arrives whole, with progress, finish and completion in that order")
    func plainDownload() async throws {
        let env = try await TestEnvironment.make()
        let size: Int64 = 3 << 20
        let task = env.session.downloadTask(with: env.server.url("/file/plain?size=\(size)&seed=7"))
        #expect(task.state == .suspended)
        task.resume()
        let error = await env.delegate.completion(of: task)
        #expect(error == nil)
        #expect(task.state == .completed)
        #expect(env.delegate.finishedDigests == [TestContent.sha256Hex(size: size, seed: 7)])
        let events = env.delegate.events
        guard case .completed(nil)? = events.last else {
            Issue.record("last event is not a successful completion: \(events.suffix(3))")
            return
        }
        let finishIndex = try #require(events.firstIndex { if case .finished = $0 { true } else { false } })
        #expect(finishIndex == events.count - 2, "didFinishDownloadingTo must come right before didComplete")
        let totals = events.compactMap { if case .wrote(let total, let expected) = $0 { (total, expected) } else { nil } }
        #expect(!totals.isEmpty)
        #expect(totals.map(\.0) == totals.map(\.0).sorted(), "progress totals must only grow")
        #expect(totals.last?.0 == size)
        #expect(totals.allSatisfy { $0.1 == size })
        #expect(task.countOfBytesReceived == size)
        #expect(task.countOfBytesExpectedToReceive == size)
        #expect((task.response as? HTTPURLResponse)?.statusCode == 200)
        #expect(env.leftoverPartialFiles.isEmpty, "Haul deletes the temporary file after didFinishDownloadingTo")
        try await env.finish()
    }

    @Test("A chunked body without Content-Length downloads completely")
    func chunkedDownload() async throws {
        let env = try await TestEnvironment.make()
        let size: Int64 = 700_001
        let task = env.session.downloadTask(with: env.server.url("/file/chunked?size=\(size)&seed=3&chunked=1"))
        task.resume()
        #expect(await env.delegate.completion(of: task) == nil)
        #expect(env.delegate.finishedDigests == [TestContent.sha256Hex(size: size, seed: 3)])
        #expect(task.countOfBytesExpectedToReceive == TransferSessionTransferSizeUnknown)
        try await env.finish()
    }

    @Test("A server that closes early never yields a finished file; the error carries resume data")
    func truncatedBodyFailsWithResumeData() async throws {
        let env = try await TestEnvironment.make()
        let task = env.session.downloadTask(with: env.server.url("/file/cut?size=2000000&cutAfter=500000&cutMode=close"))
        task.resume()
        let error = try #require(await env.delegate.completion(of: task) as? URLError)
        #expect(error.code == .networkConnectionLost)
        #expect(env.delegate.finishedDigests.isEmpty)
        let resumeData = try #require(error.userInfo[TransferSessionDownloadTaskResumeData] as? Data)
        #expect(resumeData.count < 4096, "resume data must be small, never the body")
        try await env.finish()
    }

    @Test("A connection reset mid-body, then a resume, gives the server's exact bytes")
    func resetThenResume() async throws {
        let env = try await TestEnvironment.make()
        let size: Int64 = 4_000_000
        let task = env.session.downloadTask(with: env.server.url("/file/reset?size=\(size)&seed=11&cutAfter=1500000"))
        task.resume()
        let error = try #require(await env.delegate.completion(of: task) as? URLError)
        #expect(error.code == .networkConnectionLost)
        let resumeData = try #require(error.userInfo[TransferSessionDownloadTaskResumeData] as? Data)
        let resumed = env.session.downloadTask(withResumeData: resumeData)
        resumed.resume()
        #expect(await env.delegate.completion(of: resumed) == nil)
        #expect(env.delegate.finishedDigests == [TestContent.sha256Hex(size: size, seed: 11)])
        let offsets = env.delegate.resumeOffsets
        #expect(offsets.count == 1)
        #expect((offsets.first ?? 0) > 0 && (offsets.first ?? 0) <= 1_500_000)
        let rangeRequest = try #require(env.server.requests.last)
        #expect(rangeRequest.header("Range") == "bytes=\(offsets.first ?? -1)-")
        #expect(rangeRequest.header("If-Range") != nil)
        // Only the missing bytes were fetched again.
        #expect(env.server.bodyBytesSent(forKey: "reset") == 1_500_000 + size - (offsets.first ?? 0))
        try await env.finish()
    }
}
