import Dispatch
import Foundation
import HaulCore
import HaulEngine
import NIOCore

/// One attempt at one download of `haul get`: the observer of its ``TransferRun``.
///
/// Every callback comes on the engine's event loop, in order, never two at once for one attempt
/// (``TransferRunObserver``): the counters below need no lock. They do only bookkeeping there;
/// the crash checkpoint, which writes a file (and syncs the partial file first when the
/// download is segmented), goes to `checkpoints`, a serial queue of the coordinator's.
final class GetAttempt: TransferRunObserver, @unchecked Sendable {
    // @unchecked Sendable: mutable state is touched only by the run's observer callbacks (one
    // event loop, sequential) and, after the run ended, by the coordinator's task.

    /// Identifies the attempt in the progress display.
    let id: Int
    let job: DownloadJob
    let requestHeaders: HTTPHeaderFields
    private let reporter: ProgressReporter
    private let checkpoints: DispatchQueue
    /// Whether progress is drawn (not with `-q`: then nothing is recorded per chunk).
    private let showsProgress: Bool
    /// When the crash checkpoint is due (``CheckpointCadence``, as hauld's).
    private var cadence: CheckpointCadence
    /// Whether this attempt wrote its crash checkpoint already (one is enough for a download
    /// written in order: the file's size says the rest).
    private var checkpointed = false
    /// Whether the download keeps a map of finished ranges (segmented now or in an earlier
    /// attempt): then every due point is recorded, since its file's size says nothing.
    private var mapped: Bool
    /// Whether any checkpoint of this job was written, by this attempt or an earlier one: only
    /// then is there one to remove.
    private(set) var wroteCheckpoint = false
    /// The response the body comes with.
    private(set) var response: ResponseInfo?

    init(id: Int, job: DownloadJob, requestHeaders: HTTPHeaderFields, resumesMap: Bool, reporter: ProgressReporter, checkpoints: DispatchQueue) {
        self.id = id
        self.mapped = resumesMap
        self.job = job
        self.requestHeaders = requestHeaders
        self.reporter = reporter
        self.checkpoints = checkpoints
        self.showsProgress = reporter.mode != .quiet
        self.cadence = CheckpointCadence(
            bytes: resumesMap ? GetCoordinator.segmentedCheckpointBytes : GetCoordinator.crashCheckpointBytes,
            interval: GetCoordinator.crashCheckpointInterval,
            now: GetCoordinator.monotonicNow()
        )
    }

    // MARK: - TransferRunObserver

    func transferRun(_ run: TransferRun, didReceive response: ResponseInfo, resumedAtOffset: Int64?, expectedTotal: Int64?) {
        self.response = response
        // A new entity (offset 0) or a continuation: the next progress records its checkpoint.
        self.checkpointed = false
        guard let offset = resumedAtOffset else { return }
        if offset > 0 {
            self.reporter.note("\(self.job.displayName): continuing at \(ByteCountFormatting.bytes(offset))")
        } else {
            self.reporter.note("\(self.job.displayName): the server sent the whole file again; starting over")
        }
        if self.showsProgress {
            self.reporter.progress(task: self.id, name: self.job.displayName, bytesWritten: 0, total: offset, expected: expectedTotal ?? -1)
        }
    }

    func transferRun(_ run: TransferRun, didWrite byteCount: Int, totalOnDisk: Int64, expectedTotal: Int64?) {
        // A segmented download records its map at every due point (its file's size says
        // nothing); one written in order needs one checkpoint.
        // Only the connection count is read per write; the resume point is built when due.
        let connections = run.connectionCount
        if connections > 1, !self.mapped {
            self.mapped = true
            self.cadence.bytes = GetCoordinator.segmentedCheckpointBytes
        }
        if !self.checkpointed || self.mapped {
            if self.cadence.isDue(total: totalOnDisk, now: GetCoordinator.monotonicNow()) {
                self.checkpointed = true
                self.writeCheckpoint(run, bytes: totalOnDisk, expected: expectedTotal)
            }
        }
        if self.showsProgress {
            self.reporter.progress(
                task: self.id,
                name: self.job.displayName,
                bytesWritten: Int64(byteCount),
                total: totalOnDisk,
                expected: expectedTotal ?? -1,
                connections: max(1, connections)
            )
        }
    }

    func transferRun(_ run: TransferRun, didReceive body: ByteBuffer) {}

    func transferRun(_ run: TransferRun, willRedirect response: ResponseInfo, to request: TransferRequest) async -> TransferRequest? {
        request
    }

    func transferRun(_ run: TransferRun, droppedMirror url: URL, reason: String) {
        self.reporter.note("mirror \(url.absoluteString) dropped: \(reason)")
    }

    // MARK: - Crash checkpoint

    /// Records where the download could continue, so that a crash of `haul` loses at most what
    /// came after it. The next run continues from the partial file's size (its bytes are a
    /// prefix of the entity: they are written in order), after `If-Range` confirms the entity.
    private func writeCheckpoint(_ run: TransferRun, bytes: Int64, expected: Int64?) {
        guard let response = self.response else { return }
        let point: ResumePoint
        if let current = run.currentResumePoint, current.mapped == true {
            point = current
        } else {
            guard RangeResumeRules.notResumableReason(method: "GET", status: response.statusCode, headers: response.headers) == nil
                || response.statusCode == 206
            else { return }
            let validators = EntityValidators(headers: response.headers)
            guard validators.ifRangeValue != nil else { return }
            point = ResumePoint(offset: bytes, validators: validators, entityLength: expected)
        }
        self.wroteCheckpoint = true
        let resume = ResumeData(
            url: response.url,
            originalURL: self.job.url,
            requestHeaders: self.requestHeaders,
            partialFilePath: self.job.partialPath,
            resumePoint: point
        )
        let job = self.job
        // The partial file may have no name yet (created unnamed): it gets it first, or the
        // checkpoint would name nothing.
        self.checkpoints.async {
            if run.nameFile() { job.saveCheckpoint(resume) }
        }
    }

    /// Waits until the checkpoints queued by this attempt are written (before the coordinator
    /// removes or replaces them).
    func checkpointsWritten() async {
        guard self.wroteCheckpoint else { return }
        await withCheckedContinuation { continuation in
            self.checkpoints.async { continuation.resume() }
        }
    }
}
