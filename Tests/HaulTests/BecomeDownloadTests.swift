import Foundation
import Haul
import HaulTestSupport
import Testing

/// Answers `didReceive response` with `.becomeDownload` and records what follows.
final class ConvertingDelegate: TransferSessionDataDelegate, TransferSessionDownloadDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private(set) var events: [String] = []
    private(set) var download: TransferSessionDownloadTask?
    private(set) var digest: String?
    private(set) var written: Int64 = 0
    private let latch = CompletionLatch()
    /// Called with the new download task (on the delegate queue).
    var onBecome: (@Sendable (TransferSessionDownloadTask) -> Void)?
    /// How long the disposition waits (a delegate that decides after the body has arrived).
    var dispositionDelay: Duration = .zero

    private func log(_ event: String) { self.lock.withLock { self.events.append(event) } }

    // Spelled as ported code spells it after renaming URLSession (the nested name must be the
    // same type, or this would not satisfy the protocol and the default would answer).
    func urlSession(_ session: TransferSession, dataTask: TransferSessionDataTask, didReceive response: URLResponse, completionHandler: @escaping @Sendable (TransferSession.ResponseDisposition) -> Void) {
        self.log("response \(dataTask.taskIdentifier)")
        guard self.dispositionDelay > .zero else { return completionHandler(.becomeDownload) }
        let delay = self.dispositionDelay
        Task {
            try? await Task.sleep(for: delay)
            completionHandler(.becomeDownload)
        }
    }

    func urlSession(_ session: TransferSession, dataTask: TransferSessionDataTask, didReceive data: Data) {
        self.log("data \(dataTask.taskIdentifier)")
    }

    func urlSession(_ session: TransferSession, dataTask: TransferSessionDataTask, didBecome downloadTask: TransferSessionDownloadTask) {
        self.lock.withLock { self.download = downloadTask }
        self.log("become \(dataTask.taskIdentifier)->\(downloadTask.taskIdentifier)")
        self.onBecome?(downloadTask)
    }

    func urlSession(_ session: TransferSession, downloadTask: TransferSessionDownloadTask, didWriteData bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        self.lock.withLock { self.written = totalBytesWritten }
    }

    func urlSession(_ session: TransferSession, downloadTask: TransferSessionDownloadTask, didFinishDownloadingTo location: URL) {
        let digest = try? TestContent.sha256Hex(ofFileAt: location.path)
        self.lock.withLock { self.digest = digest }
        self.log("finished \(downloadTask.taskIdentifier)")
    }

    func urlSession(_ session: TransferSession, task: TransferSessionTask, didCompleteWithError error: (any Error)?) {
        self.log("complete \(task.taskIdentifier) \((error as? URLError)?.code.rawValue ?? 0)")
        self.latch.complete(error)
    }

    func completion() async -> (any Error)? {
        await self.latch.wait()
    }
}

@Suite("Data tasks that become downloads (.becomeDownload)")
struct BecomeDownloadTests {
    @Test("The body goes to the new download task's file, which completes like any download")
    func becomesDownload() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let delegate = ConvertingDelegate()
        let session = TransferSession(configuration: .ephemeral, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let dataTask = session.dataTask(with: server.url("/file/convert?size=3000000&seed=5"))
        dataTask.resume()
        #expect(await delegate.completion() == nil)
        let download = try #require(delegate.download)
        #expect(delegate.digest == TestContent.sha256Hex(size: 3_000_000, seed: 5))
        #expect(delegate.written == 3_000_000)
        let id = download.taskIdentifier
        #expect(delegate.events == ["response 1", "become 1->\(id)", "finished \(id)", "complete \(id) 0"], "no data and no completion for the data task")
        #expect(download.state == TransferSessionTask.State.completed && download.response != nil)
        #expect(download.originalRequest?.url == dataTask.originalRequest?.url)
        #expect(server.requestCount(forKey: "convert") == 1, "the same transfer went on, no second request")
        try await server.shutdown()
    }

    @Test("A disposition decided after the whole body arrived still hands the transfer's end to the download")
    func lateDisposition() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let delegate = ConvertingDelegate()
        delegate.dispositionDelay = .milliseconds(300)
        let session = TransferSession(configuration: .ephemeral, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        session.dataTask(with: server.url("/file/late?size=20000&seed=6")).resume()
        #expect(await delegate.completion() == nil)
        let id = try #require(delegate.download?.taskIdentifier)
        #expect(delegate.events == ["response 1", "become 1->\(id)", "finished \(id)", "complete \(id) 0"])
        #expect(delegate.digest == TestContent.sha256Hex(size: 20_000, seed: 6))
        try await server.shutdown()
    }

    @Test("Cancelling the download task stops the transfer and completes the download as cancelled")
    func cancelConverted() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let delegate = ConvertingDelegate()
        delegate.onBecome = { $0.cancel() }
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("become-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: scratch) }
        let configuration = TransferSessionConfiguration.default
        configuration.urlCache = nil
        configuration.temporaryDirectory = scratch
        let session = TransferSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        session.dataTask(with: server.url("/file/stall?size=3000000&stallAfter=100000")).resume()
        let error = await delegate.completion() as? URLError
        #expect(error?.code == .cancelled)
        let id = try #require(delegate.download?.taskIdentifier)
        #expect(delegate.events.last == "complete \(id) \(URLError.Code.cancelled.rawValue)")
        #expect(delegate.events.filter { $0.hasPrefix("complete") }.count == 1)
        let left = (try? FileManager.default.contentsOfDirectory(atPath: scratch.path)) ?? []
        #expect(left.isEmpty, "the cancelled download's bytes are not left behind: \(left)")
        try await server.shutdown()
    }
}
