import Foundation
import Haul
import HaulTestSupport
import Synchronization

/// A delegate that records every call in order and lets a test await completion.
final class RecordingDelegate: TransferSessionDownloadDelegate, TransferSessionDataDelegate, @unchecked Sendable {
    enum Event: Equatable {
        case redirect(from: Int, to: String)
        case resumed(offset: Int64, expected: Int64)
        case wrote(total: Int64, expected: Int64)
        case sent(total: Int64, expected: Int64)
        case finished(sha256: String, size: Int64)
        case response(status: Int)
        case data(Int)
        case completed(errorCode: Int?)
        case invalidated
    }

    private let lock = NSLock()
    private var storedEvents: [Event] = []
    private var storedErrors: [Int: any Error] = [:]
    private var waiters: [Int: CheckedContinuation<(any Error)?, Never>] = [:]
    private var completions: [Int: (any Error)?] = [:]
    private var invalidationWaiter: CheckedContinuation<Void, Never>?
    private var isInvalidated = false
    private var storedData = Data()
    /// What `willPerformHTTPRedirection` answers: the proposed request when `nil`.
    var redirectDecision: (@Sendable (URLRequest) -> URLRequest?)?
    /// Whether data responses are allowed.
    var disposition: URLSession.ResponseDisposition = .allow
    /// Where finished downloads are moved.
    let keepDirectory: URL
    private var keptFiles: [Int: URL] = [:]
    var isOnDelegateQueueCheck: (@Sendable () -> Bool)?
    private(set) var concurrentCalls = 0
    private var inCall = false

    init(keepDirectory: URL) {
        self.keepDirectory = keepDirectory
    }

    var events: [Event] { self.lock.withLock { self.storedEvents } }
    var receivedData: Data { self.lock.withLock { self.storedData } }
    func keptFile(for task: TransferSessionTask) -> URL? { self.lock.withLock { self.keptFiles[task.taskIdentifier] } }

    func urlSession(
        _ session: TransferSession,
        task: TransferSessionTask,
        didSendBodyData bytesSent: Int64,
        totalBytesSent: Int64,
        totalBytesExpectedToSend: Int64
    ) {
        self.record(.sent(total: totalBytesSent, expected: totalBytesExpectedToSend))
    }

    private func record(_ event: Event) {
        self.lock.withLock {
            if self.inCall { self.concurrentCalls += 1 }
            self.storedEvents.append(event)
        }
    }

    /// Waits until `task` completes; returns its error.
    func completion(of task: TransferSessionTask) async -> (any Error)? {
        await withCheckedContinuation { continuation in
            let done: (any Error)?? = self.lock.withLock {
                if let result = self.completions[task.taskIdentifier] { return .some(result) }
                self.waiters[task.taskIdentifier] = continuation
                return nil
            }
            if let done {
                continuation.resume(returning: done)
                return
            }
            // A test must fail, not hang, when a completion never comes.
            DispatchQueue.global().asyncAfter(deadline: .now() + 60) {
                let waiter = self.lock.withLock { self.waiters.removeValue(forKey: task.taskIdentifier) }
                waiter?.resume(returning: URLError(.unknown, userInfo: [NSLocalizedDescriptionKey: "test: no completion within 60 s"]))
            }
        }
    }

    func invalidation() async {
        await withCheckedContinuation { continuation in
            let already = self.lock.withLock {
                if self.isInvalidated { return true }
                self.invalidationWaiter = continuation
                return false
            }
            if already { continuation.resume() }
        }
    }

    func urlSession(_ session: TransferSession, didBecomeInvalidWithError error: (any Error)?) {
        self.record(.invalidated)
        let waiter = self.lock.withLock {
            self.isInvalidated = true
            return self.invalidationWaiter
        }
        waiter?.resume()
    }

    func urlSession(
        _ session: TransferSession,
        task: TransferSessionTask,
        willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest,
        completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        self.record(.redirect(from: response.statusCode, to: request.url?.path ?? ""))
        completionHandler(self.redirectDecision.map { $0(request) } ?? request)
    }

    func urlSession(_ session: TransferSession, task: TransferSessionTask, didCompleteWithError error: (any Error)?) {
        self.record(.completed(errorCode: (error as? URLError)?.code.rawValue))
        let waiter = self.lock.withLock {
            self.completions[task.taskIdentifier] = error
            return self.waiters.removeValue(forKey: task.taskIdentifier)
        }
        waiter?.resume(returning: error)
    }

    func urlSession(_ session: TransferSession, downloadTask: TransferSessionDownloadTask, didFinishDownloadingTo location: URL) {
        let digest = (try? TestContent.sha256Hex(ofFileAt: location.path)) ?? "missing"
        let size = fileSize(location.path) ?? -1
        let kept = self.keepDirectory.appendingPathComponent("task-\(downloadTask.taskIdentifier)-\(UUID().uuidString)")
        try? FileManager.default.moveItem(at: location, to: kept)
        self.lock.withLock { self.keptFiles[downloadTask.taskIdentifier] = kept }
        self.record(.finished(sha256: digest, size: size))
    }

    func urlSession(
        _ session: TransferSession,
        downloadTask: TransferSessionDownloadTask,
        didWriteData bytesWritten: Int64,
        totalBytesWritten: Int64,
        totalBytesExpectedToWrite: Int64
    ) {
        self.record(.wrote(total: totalBytesWritten, expected: totalBytesExpectedToWrite))
    }

    func urlSession(
        _ session: TransferSession,
        downloadTask: TransferSessionDownloadTask,
        didResumeAtOffset fileOffset: Int64,
        expectedTotalBytes: Int64
    ) {
        self.record(.resumed(offset: fileOffset, expected: expectedTotalBytes))
    }

    func urlSession(
        _ session: TransferSession,
        dataTask: TransferSessionDataTask,
        didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        self.record(.response(status: (response as? HTTPURLResponse)?.statusCode ?? 0))
        completionHandler(self.disposition)
    }

    func urlSession(_ session: TransferSession, dataTask: TransferSessionDataTask, didReceive data: Data) {
        self.lock.withLock { self.storedData.append(data) }
        self.record(.data(data.count))
    }
}

/// A fresh temporary directory for one test.
func makeTemporaryDirectory() throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("haul-test-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}
