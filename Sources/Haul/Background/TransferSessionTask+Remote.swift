import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HaulCore

/// The tasks of a background session: their transfers run in `hauld`; these methods turn
/// lifecycle actions into requests and the daemon's events into delegate calls.
extension TransferSessionTask {
    func performRemote(_ action: TaskLifecycleStateMachine.Action, taskID: Int64) {
        guard let link = self.session.backgroundLink else { return }
        do {
            switch action {
            case .none, .deliverResult:
                break
            case .startTransfer:
                _ = try link.call { .resume(.init(session: $0, taskID: taskID)) }
            case .pauseTransfer:
                _ = try link.call { .suspend(.init(session: $0, taskID: taskID)) }
                let next = self.inner.withLock { $0.lifecycle.transferStopped() }
                if next != .none { self.performRemote(next, taskID: taskID) }
            case .cancelTransfer, .completeAsCancelled:
                let wantsResumeData = self.inner.withLock { $0.wantsResumeData }
                let response = try link.call { .cancel(.init(session: $0, taskID: taskID, produceResumeData: wantsResumeData)) }
                // The daemon queues the completion; it arrives as an event.
                self.deliverResumeData(response.resumeData)
            }
        } catch {
            self.deliverResumeData(nil)
            _ = self.inner.withLock { $0.lifecycle.transferFinished() }
            self.finish(
                error: URLError(
                    .cannotConnectToHost,
                    userInfo: [NSLocalizedDescriptionKey: "hauld: \(error)"]
                )
            )
        }
    }

    func adoptSnapshot(_ snapshot: DaemonTaskSnapshot) {
        self.inner.withLock { inner in
            inner.countOfBytesReceived = snapshot.bytesOnDisk
            inner.countOfBytesExpectedToReceive = snapshot.entityLength ?? TransferSessionTransferSizeUnknown
            if snapshot.state != "suspended", !inner.lifecycle.hasStarted { _ = inner.lifecycle.resumeCalled() }
            if snapshot.currentURL != snapshot.originalURL { inner.currentRequest = URLRequest(url: snapshot.currentURL) }
        }
        self.taskDescription = snapshot.taskDescription
    }

    func remoteProgress(total: Int64, expected: Int64?) {
        let (written, expectedTotal) = self.inner.withLock { inner -> (Int64, Int64) in
            let written = max(0, total - inner.countOfBytesReceived)
            inner.countOfBytesReceived = total
            inner.countOfBytesExpectedToReceive = expected ?? TransferSessionTransferSizeUnknown
            return (written, inner.countOfBytesExpectedToReceive)
        }
        guard let downloadTask = self as? TransferSessionDownloadTask else { return }
        let session = self.session
        session.enqueueDelegateCall { delegate in
            self.progress.totalUnitCount = expectedTotal
            self.progress.completedUnitCount = total
            (delegate as? any TransferSessionDownloadDelegate)?.urlSession(
                session,
                downloadTask: downloadTask,
                didWriteData: written,
                totalBytesWritten: total,
                totalBytesExpectedToWrite: expectedTotal
            )
        }
    }

    func remoteResumed(offset: Int64, expected: Int64?) {
        self.inner.withLock { $0.countOfBytesReceived = offset }
        guard let downloadTask = self as? TransferSessionDownloadTask else { return }
        let session = self.session
        session.enqueueDelegateCall { delegate in
            (delegate as? any TransferSessionDownloadDelegate)?.urlSession(
                session,
                downloadTask: downloadTask,
                didResumeAtOffset: offset,
                expectedTotalBytes: expected ?? TransferSessionTransferSizeUnknown
            )
        }
    }

    func setRemoteResponse(status: Int, headers: HTTPHeaderFields, url: URL) {
        var fields: [String: String] = [:]
        for field in headers.fields { fields[field.name] = field.value }
        let response = HTTPURLResponse(url: url, statusCode: status, httpVersion: "HTTP/1.1", headerFields: fields)
        self.inner.withLock { $0.response = response }
    }

    /// The daemon holds the finished file at `heldFile`: hand it to the delegate, delete what
    /// the delegate left, then acknowledge so the daemon forgets the event.
    func remoteFinished(heldFile: URL, acknowledge: @escaping @Sendable () -> Void) {
        guard let downloadTask = self as? TransferSessionDownloadTask else { return }
        let session = self.session
        session.enqueueDelegateCall { delegate in
            (delegate as? any TransferSessionDownloadDelegate)?.urlSession(
                session,
                downloadTask: downloadTask,
                didFinishDownloadingTo: heldFile
            )
            unlink(heldFile.path)
            acknowledge()
        }
    }

    func remoteCompleted(error: URLError?, responseBody: Data?, acknowledge: @escaping @Sendable () -> Void) {
        self.inner.withLock { inner in
            _ = inner.lifecycle.transferFinished()
            if inner.lifecycle.publicState != .completed { _ = inner.lifecycle.cancelCalled() }
            inner.error = error
        }
        let session = self.session
        let dataTask = self as? TransferSessionDataTask
        session.complete(self) {
            session.enqueueDelegateCall { delegate in
                if let dataTask, let responseBody, !responseBody.isEmpty {
                    (delegate as? any TransferSessionDataDelegate)?.urlSession(session, dataTask: dataTask, didReceive: responseBody)
                }
                (delegate as? any TransferSessionTaskDelegate)?.urlSession(session, task: self, didCompleteWithError: error)
                acknowledge()
            }
        }
    }
}
