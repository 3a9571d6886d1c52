import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HaulCore
import HaulEngine

/// A task that streams a response body to a file, as `URLSessionDownloadTask`.
///
/// The body goes to a temporary file in the configuration's ``TransferSessionConfiguration/temporaryDirectory``.
/// On success the delegate's `didFinishDownloadingTo` (or the completion handler) gets its URL
/// and must move it before returning. A paused, cancelled or failed download keeps its bytes
/// whenever the server allows resuming (GET, a strong ETag or Last-Modified, byte ranges).
public final class TransferSessionDownloadTask: TransferSessionTask, @unchecked Sendable {
    typealias CompletionHandler = @Sendable (URL?, URLResponse?, (any Error)?) -> Void

    private let completionHandler: CompletionHandler?
    private let filePath: String
    /// The async API hands the file over instead of deleting it after the callback.
    let handsOverFile: Bool

    init(
        session: TransferSession,
        identifier: Int,
        request: URLRequest?,
        partialFilePath: String,
        handsOverFile: Bool,
        completionHandler: CompletionHandler?
    ) {
        self.completionHandler = completionHandler
        self.filePath = partialFilePath
        self.handsOverFile = handsOverFile
        super.init(session: session, identifier: identifier, kind: .download, request: request)
    }

    override var partialFilePath: String { self.filePath }

    /// A download made by `.becomeDownload` runs its data task's transfer: cancelling stops
    /// that transfer; pausing is not supported (the call is ignored).
    override func perform(_ action: TaskLifecycleStateMachine.Action) {
        guard let source = self.inner.withLock({ $0.convertedFrom }) else {
            super.perform(action)
            return
        }
        switch action {
        case .cancelTransfer, .completeAsCancelled:
            source.cancel()
        default:
            break
        }
    }

    public override func suspend() {
        if self.inner.withLock({ $0.convertedFrom != nil }) { return }
        super.suspend()
    }

    override var hasDelegateCallbacks: Bool { self.completionHandler == nil }

    /// Cancels the download and hands resume data to `completionHandler` when the download can
    /// be continued later with ``TransferSession/downloadTask(withResumeData:)``, else `nil`.
    /// The partial file is kept only when resume data is produced. `completionHandler` is called
    /// once, before the task's completion.
    public func cancel(byProducingResumeData completionHandler: @escaping @Sendable (Data?) -> Void) {
        let action = self.inner.withLock { inner -> TaskLifecycleStateMachine.Action in
            inner.wantsResumeData = true
            inner.resumeDataCallbacks.append(completionHandler)
            return inner.lifecycle.cancelCalled()
        }
        if action == .none {
            // Already canceling or completed: nothing more will produce data for this call.
            let stillWaiting = self.inner.withLock { inner -> Bool in
                inner.lifecycle.publicState == .canceling
            }
            if !stillWaiting { self.deliverResumeData(nil) }
            return
        }
        self.perform(action)
    }

    /// Cancels the download and returns its resume data, or `nil` when it cannot be resumed.
    public func cancelByProducingResumeData() async -> Data? {
        await withCheckedContinuation { continuation in
            self.cancel(byProducingResumeData: { continuation.resume(returning: $0) })
        }
    }

    // MARK: - Behaviour of the download kind

    override func makeResumeData(_ point: ResumePoint?) -> Data? {
        guard let point, let request = self.inner.withLock({ $0.engineRequest }), request.method == "GET" else {
            return nil
        }
        let onDisk = PartialFile.size(at: self.filePath) ?? 0
        guard onDisk >= point.offset else { return nil }
        let current = self.currentRequest?.url ?? request.url
        return ResumeData(
            url: current,
            originalURL: self.originalRequest?.url ?? request.url,
            requestHeaders: request.headers,
            partialFilePath: self.filePath,
            resumePoint: point
        ).encoded()
    }

    override func discardPartialFile() {
        try? FileManager.default.removeItem(atPath: self.filePath)
    }

    override func responseReceived(_ response: URLResponse, resumedAtOffset: Int64?, expectedTotal: Int64?) {
        guard let offset = resumedAtOffset, self.hasDelegateCallbacks else { return }
        let session = self.session
        session.enqueueDelegateCall { delegate in
            (delegate as? any TransferSessionDownloadDelegate)?.urlSession(
                session,
                downloadTask: self,
                didResumeAtOffset: offset,
                expectedTotalBytes: expectedTotal ?? TransferSessionTransferSizeUnknown
            )
        }
    }

    override func scheduleProgressDelivery() {
        let session = self.session
        session.enqueueDelegateCall { delegate in
            let (written, total, expected) = self.inner.withLock { inner in
                defer {
                    inner.pendingBytesWritten = 0
                    inner.isProgressDeliveryScheduled = false
                    inner.lastProgressDelivery = ContinuousClock.now
                }
                return (inner.pendingBytesWritten, inner.countOfBytesReceived, inner.countOfBytesExpectedToReceive)
            }
            self.progress.totalUnitCount = expected
            self.progress.completedUnitCount = total
            guard written > 0, self.hasDelegateCallbacks else { return }
            (delegate as? any TransferSessionDownloadDelegate)?.urlSession(
                session,
                downloadTask: self,
                didWriteData: written,
                totalBytesWritten: total,
                totalBytesExpectedToWrite: expected
            )
        }
    }

    /// The data task this download was converted from (`.becomeDownload`) ended.
    func completeConversion(error: (any Error)?, transactions: [TransactionRecord]) {
        self.inner.withLock { inner in
            inner.transactions = transactions
            inner.convertedFrom = nil
            _ = inner.lifecycle.transferFinished()
        }
        if let error {
            // No resume data for a converted download (its transfer was a data task's): the
            // bytes so far are of no further use.
            self.discardPartialFile()
            self.finish(error: error)
        } else {
            let response = ResponseInfo(url: self.currentRequest?.url ?? URL(fileURLWithPath: "/"), statusCode: 200, headers: HTTPHeaderFields(), httpVersion: "HTTP/1.1")
            self.deliverSuccess(response: response, bytesOnDisk: self.countOfBytesReceived)
        }
    }

    override func deliverSuccess(response: ResponseInfo, bytesOnDisk: Int64) {
        self.flushPendingProgress()
        let session = self.session
        let location = URL(fileURLWithPath: self.filePath)
        let path = self.filePath
        let handsOver = self.handsOverFile
        let urlResponse = UncheckedSendable(self.response ?? response.urlResponse)
        self.inner.withLock { $0.error = nil }
        let metrics = self.finalMetrics()
        session.complete(self) {
            if let handler = self.completionHandler {
                session.enqueueDelegateCall { delegate in
                    self.report(metrics, to: delegate)
                    handler(location, urlResponse.value, nil)
                    if !handsOver { unlink(path) }
                }
            } else {
                session.enqueueDelegateCall { delegate in
                    (delegate as? any TransferSessionDownloadDelegate)?.urlSession(
                        session,
                        downloadTask: self,
                        didFinishDownloadingTo: location
                    )
                    if !handsOver { unlink(path) }
                    self.report(metrics, to: delegate)
                    (delegate as? any TransferSessionTaskDelegate)?.urlSession(session, task: self, didCompleteWithError: nil)
                }
            }
        }
    }

    override func deliverCompletion(error: (any Error)?) {
        if let handler = self.completionHandler {
            let response = UncheckedSendable(self.response)
            let metrics = self.finalMetrics()
            self.session.enqueueDelegateCall { delegate in
                self.report(metrics, to: delegate)
                handler(nil, response.value, error)
            }
        } else {
            super.deliverCompletion(error: error)
        }
    }
}
