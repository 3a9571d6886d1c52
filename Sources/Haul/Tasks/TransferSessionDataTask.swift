import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HaulCore
import HaulEngine

/// A task that delivers a response body in memory, as `URLSessionDataTask`.
///
/// With a completion handler, the whole body is collected and handed over at the end; otherwise
/// the delegate gets `didReceive response` (and must allow it) and then the body in pieces.
public class TransferSessionDataTask: TransferSessionTask, @unchecked Sendable {
    typealias CompletionHandler = @Sendable (Data?, URLResponse?, (any Error)?) -> Void

    private let completionHandler: CompletionHandler?
    /// Set for `bytes(for:)`: the body streams to it as it arrives, no delegate calls.
    let sink: DataTaskSink?

    init(session: TransferSession, identifier: Int, request: URLRequest?, completionHandler: CompletionHandler?, sink: DataTaskSink? = nil) {
        self.completionHandler = completionHandler
        self.sink = sink
        super.init(session: session, identifier: identifier, kind: .data, request: request)
    }

    override var hasDelegateCallbacks: Bool { self.completionHandler == nil && self.sink == nil }

    /// Body bytes handed to the delegate queue or to `bytes(for:)` and not consumed yet: at
    /// 4 MiB the transfer stops reading until the consumer is down to 2 MiB.
    let deliveryWindow = DeliveryWindow(limit: 4 << 20)

    /// Tasks with a completion handler collect the whole body anyway: no window.
    override var bodyWindow: DeliveryWindow? { self.completionHandler == nil ? self.deliveryWindow : nil }

    override func responseReceived(_ response: URLResponse, resumedAtOffset: Int64?, expectedTotal: Int64?) {
        if let sink = self.sink {
            sink.response(response)
            return
        }
        guard self.completionHandler == nil else { return }
        let session = self.session
        let delivered = UncheckedSendable(response)
        self.inner.withLock { inner in
            inner.dataGate = .awaitingDisposition(buffered: [])
            session.enqueueDelegateCall { delegate in
                guard let dataDelegate = delegate as? any TransferSessionDataDelegate else {
                    self.dispositionDecided(.allow)
                    return
                }
                let once = OnceFlag()
                dataDelegate.urlSession(session, dataTask: self, didReceive: delivered.value) { disposition in
                    if once.claim() { self.dispositionDecided(disposition) }
                }
            }
        }
    }

    private func dispositionDecided(_ disposition: URLSession.ResponseDisposition) {
        let session = self.session
        // `.becomeDownload` (raw value 2), compared by value: swift-corelibs-foundation marks the
        // case deprecated because its own URLSession cannot do it; Haul can.
        if disposition.rawValue == 2 {
            self.becomeDownload()
            return
        }
        guard disposition == .allow else {
            self.deliveryWindow.close()
            let completion = self.inner.withLock { inner in
                inner.dataGate = .refused
                defer { inner.pendingCompletion = nil }
                return inner.pendingCompletion
            }
            self.cancel()
            completion?()
            return
        }
        self.inner.withLock { inner in
            if case .awaitingDisposition(let buffered) = inner.dataGate, !buffered.isEmpty {
                let chunks = buffered
                let window = self.deliveryWindow
                session.enqueueDelegateCall { delegate in
                    for chunk in chunks {
                        (delegate as? any TransferSessionDataDelegate)?.urlSession(session, dataTask: self, didReceive: chunk)
                        window.consumed(chunk.count)
                    }
                }
            }
            inner.dataGate = .open
            if let completion = inner.pendingCompletion {
                inner.pendingCompletion = nil
                session.enqueueDelegateCall { _ in completion() }
            }
        }
    }

    override func willStore(_ response: StoredResponse) async -> StoredResponse? {
        guard self.hasDelegateCallbacks, let request = self.currentRequest ?? self.originalRequest else { return response }
        let proposed = TransferURLCache.cachedURLResponse(response)
        let chosen = await self.session.askDelegate(fallback: Optional(proposed.value)) { delegate, answer in
            guard let dataDelegate = delegate as? any TransferSessionDataDelegate else { return false }
            dataDelegate.urlSession(self.session, dataTask: self, willCacheResponse: proposed.value, completionHandler: answer)
            return true
        }
        guard let chosen else { return nil }
        if chosen === proposed.value { return response }
        return TransferURLCache.storedResponse(chosen, request: request).map {
            var stored = $0
            stored.requestTime = response.requestTime
            stored.responseTime = response.responseTime
            stored.varyingRequestHeaders = response.varyingRequestHeaders
            return stored
        }
    }

    override func bodyReceived(_ data: Data) {
        if let sink = self.sink {
            self.inner.withLock { $0.countOfBytesReceived += Int64(data.count) }
            self.deliveryWindow.handedOver(data.count)  // consumed as the iteration pulls it
            sink.data(data)
            return
        }
        let window = self.deliveryWindow
        let session = self.session
        var failed = false
        self.inner.withLock { inner in
            inner.countOfBytesReceived += Int64(data.count)
            if self.completionHandler != nil {
                inner.receivedData.append(data)
                return
            }
            switch inner.dataGate {
            case .open:
                // Enqueued under the lock so that pieces keep their order.
                window.handedOver(data.count)
                session.enqueueDelegateCall { delegate in
                    (delegate as? any TransferSessionDataDelegate)?.urlSession(session, dataTask: self, didReceive: data)
                    window.consumed(data.count)
                }
            case .awaitingDisposition(var buffered):
                window.handedOver(data.count)
                buffered.append(data)
                inner.dataGate = .awaitingDisposition(buffered: buffered)
            case .refused:
                break
            case .becameDownload(let download, let file, let written):
                if self.write(data, to: file, at: written, for: download) {
                    inner.dataGate = .becameDownload(download, file, written: written + Int64(data.count))
                } else {
                    failed = true
                }
            }
        }
        if failed { self.cancel() }
    }

    // MARK: - .becomeDownload

    /// Turns this task into a download task: the delegate gets `didBecome downloadTask`, the
    /// body so far and the rest go to the download's file, and the download then completes
    /// like any other (`didFinishDownloadingTo`, `didCompleteWithError`); this data task gets
    /// no further calls. Cancelling the download task stops the transfer.
    private func becomeDownload() {
        let session = self.session
        let download = session.makeConvertedDownloadTask(from: self)
        let file: PartialFile
        do {
            file = try PartialFile.open(path: download.partialFilePath)
            try file.truncate(to: 0)
        } catch {
            self.inner.withLock { $0.dataGate = .refused }
            self.cancel()
            return
        }
        download.inner.withLock { $0.convertedFrom = self }
        // The delegate hears of the download before any of its progress.
        session.enqueueDelegateCall { delegate in
            (delegate as? any TransferSessionDataDelegate)?.urlSession(session, dataTask: self, didBecome: download)
        }
        var failed = false
        let completion = self.inner.withLock { inner -> (@Sendable () -> Void)? in
            var written: Int64 = 0
            if case .awaitingDisposition(let buffered) = inner.dataGate {
                for chunk in buffered where !failed {
                    failed = !self.write(chunk, to: file, at: written, for: download)
                    written += Int64(chunk.count)
                }
                self.deliveryWindow.consumed(buffered.reduce(0) { $0 + $1.count })
            }
            inner.dataGate = .becameDownload(download, file, written: written)
            defer { inner.pendingCompletion = nil }
            return inner.pendingCompletion
        }
        if failed { self.cancel() }
        completion?()
    }

    /// Writes a chunk of the converted download and reports it (`didWriteData`).
    /// Returns `false` when the file could not be written (the error is kept on the download;
    /// the caller cancels the transfer once it holds no lock).
    private func write(_ data: Data, to file: PartialFile, at offset: Int64, for download: TransferSessionDownloadTask) -> Bool {
        do {
            try file.write(data, at: offset)
        } catch {
            download.inner.withLock { $0.creationError = error }
            return false
        }
        let total = offset + Int64(data.count)
        let expected = download.inner.withLock { inner in
            inner.countOfBytesReceived = total
            return inner.countOfBytesExpectedToReceive
        }
        let session = self.session
        session.enqueueDelegateCall { delegate in
            (delegate as? any TransferSessionDownloadDelegate)?.urlSession(
                session,
                downloadTask: download,
                didWriteData: Int64(data.count),
                totalBytesWritten: total,
                totalBytesExpectedToWrite: expected
            )
        }
        return true
    }

    override func deliverCompletion(error: (any Error)?) {
        self.deliveryWindow.close()
        let session = self.session
        let metrics = self.finalMetrics()
        if let sink = self.sink {
            session.enqueueDelegateCall { self.report(metrics, to: $0) }
            sink.completion(error)
            return
        }
        if let handler = self.completionHandler {
            let (data, response) = self.inner.withLock { ($0.receivedData, UncheckedSendable($0.response)) }
            session.enqueueDelegateCall { delegate in
                self.report(metrics, to: delegate)
                handler(error == nil ? data : nil, response.value, error)
            }
            return
        }
        // One look at the gate, under one lock: the delegate may decide the disposition (on its
        // queue) at any moment, and a decision between two looks lost the completion or gave it
        // to the wrong task.
        enum Next {
            case converted(TransferSessionDownloadTask, PartialFile, [TransactionRecord])
            case deferred
            case now
        }
        let next = self.inner.withLock { inner -> Next in
            switch inner.dataGate {
            case .becameDownload(let download, let file, _):
                return .converted(download, file, inner.transactions)
            case .awaitingDisposition:
                // Decided later: completing then goes the way the disposition chose (the data
                // task's delegate, or the download it became).
                // A `.cancel` decided after the body ended still completes the task as cancelled.
                inner.pendingCompletion = {
                    let refused = self.inner.withLock { inner -> Bool in
                        if case .refused = inner.dataGate { return true }
                        return false
                    }
                    self.deliverCompletion(error: refused ? URLError(.cancelled) : error)
                }
                return .deferred
            case .open, .refused:
                return .now
            }
        }
        switch next {
        case .converted(let download, let file, let transactions):
            file.close()
            // A write failure recorded on the download is its error.
            let failure = download.inner.withLock { $0.creationError }
            download.completeConversion(error: failure ?? error, transactions: transactions)
        case .deferred:
            break
        case .now:
            session.enqueueDelegateCall { _ in
                self.report(metrics, to: session.delegateBox.value)
                (session.delegateBox.value as? any TransferSessionTaskDelegate)?.urlSession(
                    session,
                    task: self,
                    didCompleteWithError: error
                )
            }
        }
    }
}

/// Where a streaming data task (`bytes(for:)`) sends what it receives. Called on the task's
/// event loop, in order: `response` once, `data` per chunk, `completion` once, last.
struct DataTaskSink: Sendable {
    var response: @Sendable (URLResponse) -> Void
    var data: @Sendable (Data) -> Void
    var completion: @Sendable ((any Error)?) -> Void
}

/// A data task whose request carries a body, as `URLSessionUploadTask`.
public final class TransferSessionUploadTask: TransferSessionDataTask, @unchecked Sendable {}
