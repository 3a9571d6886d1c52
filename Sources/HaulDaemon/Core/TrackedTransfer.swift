import Foundation
import HaulCore
import HaulEngine
import NIOCore
import Synchronization

/// Watches one running transfer of the core for its owner: keeps the live numbers (bytes, total,
/// speed, the entity's validators, the URL that answered, the server's name for the file),
/// decides with ``CheckpointCadence`` when a checkpoint and a progress report are due, and
/// collects an upload's response body.
///
/// Background-session tasks and queue downloads both use it: there is one checkpoint rule.
final class TrackedTransfer: TransferRunObserver, Sendable {
    struct Live {
        var bytesDone: Int64
        var totalBytes: Int64?
        var validators: EntityValidators
        var currentURL: URL
        /// Whether the server answered, and the answer's `Content-Disposition`: the name it
        /// suggests is made from these and `currentURL` when asked (``suggestedName``), not as
        /// each answer comes in on the event loop (~3 K instructions a small file, asked for by
        /// nobody unless a checkpoint or a list wants it).
        var answered = false
        var contentDisposition: String?
        var meter = TransferRateMeter()
        var checkpoints: CheckpointCadence
        var progress: CheckpointCadence
        var checkpointPending = false
        /// An upload's response body, kept up to ``maximumResponseBody`` bytes.
        var responseBody = Data()
    }

    /// What a checkpoint records.
    struct Checkpoint: Sendable {
        var point: ResumePoint?
        var currentURL: URL
        var totalBytes: Int64?
        var suggestedName: String?
    }

    static let maximumResponseBody = 1 << 20

    let id: TransferID
    unowned let owner: any TransferOwner
    /// Uploads collect the response body; downloads write theirs to the partial file.
    let collectsResponseBody: Bool
    /// This transfer's own speed limit (0: none); changeable while it runs.
    let speedLimiter: BandwidthLimiter
    private let live: Mutex<Live>
    /// The run, once it answered (for a segmented download's map); weak: the run holds this
    /// observer.
    private let run = Mutex(WeakRun())

    private struct WeakRun {
        weak var run: TransferRun?
    }

    init(
        id: TransferID,
        owner: any TransferOwner,
        url: URL,
        startingPoint: ResumePoint?,
        totalBytes: Int64?,
        speedLimit: Int64 = 0,
        collectsResponseBody: Bool = false,
        cadence: TransferCore.Cadence
    ) {
        self.id = id
        self.owner = owner
        self.collectsResponseBody = collectsResponseBody
        self.speedLimiter = BandwidthLimiter(bytesPerSecond: speedLimit)
        let now = TransferCore.monotonicNow()
        let offset = startingPoint?.offset ?? 0
        self.live = Mutex(
            Live(
                bytesDone: offset,
                totalBytes: startingPoint?.entityLength ?? totalBytes,
                validators: startingPoint?.validators ?? EntityValidators(),
                currentURL: url,
                checkpoints: CheckpointCadence(bytes: cadence.checkpointBytes, interval: cadence.checkpointInterval, startingAt: offset, now: now),
                progress: CheckpointCadence(bytes: .max, interval: cadence.progressInterval, startingAt: offset, now: now - cadence.progressInterval)
            )
        )
    }

    // MARK: - Reading

    var bytesDone: Int64 { self.live.withLock { $0.bytesDone } }
    /// Whether the whole body of a small download (at most ``smallBodyBytes``) is on disk: its
    /// end follows at once and tells the same, so a report of its progress says nothing new.
    var smallBodyIsComplete: Bool {
        self.live.withLock { live in live.totalBytes.map { $0 <= Self.smallBodyBytes && live.bytesDone >= $0 } ?? false }
    }
    /// A body this small is placed as soon as it is written (a larger one may be verified
    /// against a checksum first, and its last progress is shown meanwhile).
    static let smallBodyBytes: Int64 = 1 << 20
    var totalBytes: Int64? { self.live.withLock { $0.totalBytes } }
    var currentURL: URL { self.live.withLock { $0.currentURL } }
    /// The server's name for the file (its `Content-Disposition`, else its URL's last
    /// component), once it answered.
    var suggestedName: String? {
        let (answered, disposition, url) = self.live.withLock { ($0.answered, $0.contentDisposition, $0.currentURL) }
        return answered ? FileNaming.suggestedFilename(contentDisposition: disposition, url: url) : nil
    }
    var responseBody: Data { self.live.withLock { $0.responseBody } }

    /// Speed and time left right now.
    var rate: (speed: Double?, secondsRemaining: Double?) {
        self.live.withLock { live in
            let remaining = live.totalBytes.flatMap { live.meter.secondsRemaining(total: live.bytesDone, expected: $0) }
            return (live.meter.bytesPerSecond, remaining)
        }
    }

    /// Connections fetching the body now (0 before the run answered).
    var connectionCount: Int { self.run.withLock { $0.run }?.connectionCount ?? 0 }

    /// The primary and mirrors of a segmented transfer (bytes, connections, why dropped).
    var sourceReports: [SegmentSourceReport] { self.run.withLock { $0.run }?.sourceReports ?? [] }

    /// A segmented download's map of bytes written so far (read it before syncing the file).
    func segmentMap() -> ResumePoint? {
        guard let point = self.run.withLock({ $0.run })?.currentResumePoint, point.mapped == true else { return nil }
        return point
    }

    /// The checkpoint for the bytes done now (or for `map`, a segmented download's map read
    /// before the sync); a later due checkpoint can be asked for again. Call after the file's
    /// bytes were synced to disk.
    func takeCheckpoint(map: ResumePoint? = nil) -> Checkpoint {
        let (unnamed, answered, disposition) = self.live.withLock { live in
            live.checkpointPending = false
            let checkpoint = Checkpoint(
                point: map ?? Self.resumePoint(bytes: live.bytesDone, live: live),
                currentURL: live.currentURL,
                totalBytes: live.totalBytes,
                suggestedName: nil
            )
            return (checkpoint, live.answered, live.contentDisposition)
        }
        var checkpoint = unnamed
        if answered { checkpoint.suggestedName = FileNaming.suggestedFilename(contentDisposition: disposition, url: checkpoint.currentURL) }
        return checkpoint
    }

    /// The resume point for `bytes` on disk, when the server gave validators.
    func resumePoint(bytes: Int64) -> ResumePoint? {
        self.live.withLock { Self.resumePoint(bytes: bytes, live: $0) }
    }

    private static func resumePoint(bytes: Int64, live: Live) -> ResumePoint? {
        guard bytes > 0, live.validators.ifRangeValue != nil else { return nil }
        return ResumePoint(offset: bytes, validators: live.validators, entityLength: live.totalBytes)
    }

    // MARK: - TransferRunObserver

    func transferRun(_ run: TransferRun, didReceive response: ResponseInfo, resumedAtOffset: Int64?, expectedTotal: Int64?) {
        self.run.withLock { $0.run = run }
        if self.collectsResponseBody {
            self.live.withLock { $0.responseBody = Data() }
            self.owner.transferResponded(self, resumedAtOffset: nil, expectedTotal: expectedTotal)
            return
        }
        let offset = resumedAtOffset ?? 0
        let validators = EntityValidators(headers: response.headers)
        let resumable = RangeResumeRules.notResumableReason(
            method: "GET", status: response.statusCode, headers: response.headers, validators: validators
        ) == nil
        let disposition = response.headers["Content-Disposition"]
        let now = TransferCore.monotonicNow()
        let worthRecording = self.live.withLock { live -> Bool in
            if response.statusCode == 206 {
                // A 206 without validators continues the entity whose validators are on record.
                if validators.ifRangeValue != nil { live.validators = validators }
            } else {
                live.validators = resumable ? validators : EntityValidators()
            }
            live.totalBytes = expectedTotal
            live.currentURL = response.url
            live.answered = true
            live.contentDisposition = disposition
            live.bytesDone = offset
            live.checkpoints.restart(at: offset, now: now)
            live.meter = TransferRateMeter()
            live.meter.record(total: offset, at: now)
            // What is left is less than a checkpoint's worth: the end records it (a crash
            // before then loses no more than the cadence allows anyway).
            return expectedTotal.map { $0 - offset >= live.checkpoints.bytes } ?? true
        }
        self.owner.transferResponded(self, resumedAtOffset: resumedAtOffset, expectedTotal: expectedTotal)
        if worthRecording { self.requestCheckpoint() }
    }

    func transferRun(_ run: TransferRun, didWrite byteCount: Int, totalOnDisk: Int64, expectedTotal: Int64?) {
        let now = TransferCore.monotonicNow()
        let (checkpoint, progress) = self.live.withLock { live -> (Bool, Bool) in
            live.bytesDone = totalOnDisk
            let checkpoint = live.checkpoints.isDue(total: totalOnDisk, now: now) && !live.checkpointPending
            if checkpoint { live.checkpointPending = true }
            let progress = live.progress.isDue(total: totalOnDisk, now: now)
            if progress { live.meter.record(total: totalOnDisk, at: now) }
            return (checkpoint, progress)
        }
        if checkpoint { self.owner.transferCheckpointDue(self) }
        if progress { self.owner.transferProgressed(self) }
    }

    /// A list download's run (``ListRun``) has `bytesDone` bytes of its files on disk: the
    /// owner hears of it at the progress cadence. No checkpoints: the list saves its files
    /// itself. On any thread.
    func listProgressed(bytesDone: Int64) {
        let now = TransferCore.monotonicNow()
        let progress = self.live.withLock { live -> Bool in
            live.bytesDone = bytesDone
            let progress = live.progress.isDue(total: bytesDone, now: now)
            if progress { live.meter.record(total: bytesDone, at: now) }
            return progress
        }
        if progress { self.owner.transferProgressed(self) }
    }

    func transferRun(_ run: TransferRun, droppedMirror url: URL, reason: String) {
        self.owner.transfer(self, droppedMirror: url, reason: reason)
    }

    func transferRun(_ run: TransferRun, didReceive body: ByteBuffer) {
        guard self.collectsResponseBody else { return }
        self.live.withLock { live in
            guard live.responseBody.count + body.readableBytes <= Self.maximumResponseBody else { return }
            live.responseBody.append(contentsOf: body.readableBytesView)
        }
    }

    func transferRun(_ run: TransferRun, willRedirect response: ResponseInfo, to request: TransferRequest) async -> TransferRequest? {
        request  // daemon transfers always follow redirects, as background sessions do on Apple's platforms
    }

    private func requestCheckpoint() {
        let due = self.live.withLock { live -> Bool in
            guard !live.checkpointPending else { return false }
            live.checkpointPending = true
            return true
        }
        if due { self.owner.transferCheckpointDue(self) }
    }
}
