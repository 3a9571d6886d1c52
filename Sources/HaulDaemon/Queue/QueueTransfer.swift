import Foundation
import HaulCore
import HaulEngine
import HaulStore
import NIOCore
import Synchronization

/// Observes the transfer of one queued download: keeps its live numbers (bytes, speed, the
/// server's name for the file), checkpoints progress in the store, and tells the queue when
/// subscribers should hear about it.
final class QueueTransfer: TransferRunObserver, Sendable {
    struct Live {
        var bytesDone: Int64
        var totalBytes: Int64?
        var validators = EntityValidators()
        var currentURL: URL
        var suggestedName: String?
        var meter = TransferRateMeter()
        var checkpointedBytes: Int64
        var lastCheckpoint = ContinuousClock.now
        var lastBroadcast = ContinuousClock.now - .seconds(1)
    }

    unowned let queue: DownloadQueue
    let downloadID: Int64
    let live: Mutex<Live>

    init(queue: DownloadQueue, download: StoredDownload, startingAt offset: Int64) {
        self.queue = queue
        self.downloadID = download.id!
        var live = Live(bytesDone: offset, totalBytes: download.totalBytes, currentURL: download.url, checkpointedBytes: offset)
        live.validators = EntityValidators(entityTag: download.entityTag, lastModified: download.lastModified)
        self.live = Mutex(live)
    }

    private static func now() -> Double {
        let elapsed = ContinuousClock.now - DownloadQueue.clockOrigin
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
    }

    func transferRun(_ run: TransferRun, didReceive response: ResponseInfo, resumedAtOffset: Int64?, expectedTotal: Int64?) {
        let offset = resumedAtOffset ?? 0
        let validators = EntityValidators(headers: response.headers)
        let name = FileNaming.suggestedFilename(contentDisposition: response.headers["Content-Disposition"], url: response.url)
        self.live.withLock { live in
            // A 206 without validators continues the entity whose validators are on record.
            if validators.ifRangeValue != nil || response.statusCode != 206 { live.validators = validators }
            live.totalBytes = expectedTotal
            live.currentURL = response.url
            live.suggestedName = name
            live.bytesDone = offset
            live.checkpointedBytes = offset
            live.lastCheckpoint = .now
            live.meter = TransferRateMeter()
            live.meter.record(total: offset, at: Self.now())
        }
        self.queue.transferCheckpoint(self, bytes: offset, broadcast: true)
    }

    func transferRun(_ run: TransferRun, didWrite byteCount: Int, totalOnDisk: Int64, expectedTotal: Int64?) {
        let now = ContinuousClock.now
        let configuration = self.queue.configuration
        let (checkpoint, broadcast) = self.live.withLock { live -> (Bool, Bool) in
            live.bytesDone = totalOnDisk
            let checkpoint = totalOnDisk - live.checkpointedBytes >= configuration.checkpointBytes
                || now - live.lastCheckpoint >= configuration.checkpointInterval
            if checkpoint {
                live.checkpointedBytes = totalOnDisk
                live.lastCheckpoint = now
            }
            let broadcast = now - live.lastBroadcast >= configuration.progressInterval
            if broadcast {
                live.lastBroadcast = now
                live.meter.record(total: totalOnDisk, at: Self.now())
            }
            return (checkpoint, broadcast)
        }
        if checkpoint || broadcast { self.queue.transferCheckpoint(self, bytes: totalOnDisk, broadcast: broadcast, store: checkpoint) }
    }

    func transferRun(_ run: TransferRun, didReceive body: ByteBuffer) {}

    func transferRun(_ run: TransferRun, willRedirect response: ResponseInfo, to request: TransferRequest) async -> TransferRequest? {
        request
    }

    /// The resume point for `bytes` on disk, when the server gave validators.
    func resumePoint(bytes: Int64) -> ResumePoint? {
        self.live.withLock { live in
            guard bytes > 0, live.validators.ifRangeValue != nil else { return nil }
            return ResumePoint(offset: bytes, validators: live.validators, entityLength: live.totalBytes)
        }
    }

    /// Speed and time left right now.
    var rate: (speed: Double?, secondsRemaining: Double?) {
        self.live.withLock { live in
            let speed = live.meter.bytesPerSecond
            let remaining = live.totalBytes.flatMap { live.meter.secondsRemaining(total: live.bytesDone, expected: $0) }
            return (speed, remaining)
        }
    }
}
