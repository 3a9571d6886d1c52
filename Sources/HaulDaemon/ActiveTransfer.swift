import Foundation
import HaulCore
import HaulEngine
import HaulStore
import NIOCore
import Synchronization

/// Observes one running transfer of the daemon: checkpoints its progress in the store and
/// forwards live progress to the attached client.
final class ActiveTransfer: TransferRunObserver, Sendable {
    struct Progress {
        var validators = EntityValidators()
        var entityLength: Int64?
        var checkpointedBytes: Int64 = 0
        var lastCheckpoint = ContinuousClock.now
        var lastProgressEvent = ContinuousClock.now - .seconds(1)
        var currentURL: URL
        var lastPoint: ResumePoint?
        /// An upload's response body, kept up to ``maximumResponseBody`` bytes.
        var responseBody = Data()
    }

    static let maximumResponseBody = 1 << 20

    unowned let daemon: TransferDaemon
    let task: StoredTask
    let progress: Mutex<Progress>

    init(daemon: TransferDaemon, task: StoredTask, startingPoint: ResumePoint?) {
        self.daemon = daemon
        self.task = task
        var progress = Progress(currentURL: task.currentURL)
        progress.checkpointedBytes = startingPoint?.offset ?? 0
        self.progress = Mutex(progress)
    }

    var taskID: Int64 { self.task.id! }

    func transferRun(_ run: TransferRun, didReceive response: ResponseInfo, resumedAtOffset: Int64?, expectedTotal: Int64?) {
        if self.task.isUpload {
            self.progress.withLock { $0.responseBody = Data() }
            return
        }
        let validators = EntityValidators(headers: response.headers)
        let resumable = RangeResumeRules.notResumableReason(method: "GET", status: response.statusCode, headers: response.headers) == nil
        let offset = resumedAtOffset ?? 0
        self.progress.withLock { progress in
            if resumable || response.statusCode == 206 {
                progress.validators = validators.ifRangeValue != nil ? validators : progress.validators
            } else {
                progress.validators = EntityValidators()
            }
            progress.entityLength = expectedTotal
            progress.currentURL = response.url
            progress.checkpointedBytes = offset
            progress.lastCheckpoint = ContinuousClock.now
        }
        self.checkpoint(bytes: offset)
        if let resumedAtOffset {
            var event = DaemonEvent(kind: .resumed, taskID: self.taskID)
            event.offset = resumedAtOffset
            event.expectedTotal = expectedTotal
            self.daemon.sendLive(event, session: self.task.sessionIdentifier)
        }
    }

    func transferRun(_ run: TransferRun, didWrite byteCount: Int, totalOnDisk: Int64, expectedTotal: Int64?) {
        let now = ContinuousClock.now
        let configuration = self.daemon.configuration
        let (checkpointDue, progressDue) = self.progress.withLock { progress -> (Bool, Bool) in
            let checkpointDue = totalOnDisk - progress.checkpointedBytes >= configuration.checkpointBytes
                || now - progress.lastCheckpoint >= configuration.checkpointInterval
            if checkpointDue {
                progress.checkpointedBytes = totalOnDisk
                progress.lastCheckpoint = now
            }
            let progressDue = now - progress.lastProgressEvent >= configuration.progressInterval
            if progressDue { progress.lastProgressEvent = now }
            return (checkpointDue, progressDue)
        }
        if checkpointDue { self.checkpoint(bytes: totalOnDisk) }
        if progressDue {
            var event = DaemonEvent(kind: .progress, taskID: self.taskID)
            event.bytesOnDisk = totalOnDisk
            event.expectedTotal = expectedTotal
            self.daemon.sendLive(event, session: self.task.sessionIdentifier)
        }
    }

    func transferRun(_ run: TransferRun, didReceive body: ByteBuffer) {
        self.progress.withLock { progress in
            guard progress.responseBody.count + body.readableBytes <= Self.maximumResponseBody else { return }
            progress.responseBody.append(contentsOf: body.readableBytesView)
        }
    }

    var responseBody: Data { self.progress.withLock { $0.responseBody } }

    func transferRun(_ run: TransferRun, willRedirect response: ResponseInfo, to request: TransferRequest) async -> TransferRequest? {
        request  // background sessions always follow redirects, as on Apple's platforms
    }

    /// Records `bytes` as safely on disk (written in order on the daemon's serial queue, so a
    /// later checkpoint never lands before an earlier one).
    func checkpoint(bytes: Int64) {
        let (point, url) = self.progress.withLock { progress -> (ResumePoint?, URL) in
            let point: ResumePoint? = bytes > 0 && progress.validators.ifRangeValue != nil
                ? ResumePoint(offset: bytes, validators: progress.validators, entityLength: progress.entityLength)
                : nil
            progress.lastPoint = point
            return (point, progress.currentURL)
        }
        let store = self.daemon.store
        let taskID = self.taskID
        let logger = self.daemon.logger
        self.daemon.deliveryQueue.async {
            do { try store.checkpoint(taskID: taskID, point: point, currentURL: url) } catch {
                logger.error("checkpoint of task \(taskID) failed: \(error)")
            }
        }
    }

    var currentURL: URL { self.progress.withLock { $0.currentURL } }
}
