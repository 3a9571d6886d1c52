import Foundation
import HaulCore
import HaulEngine
import HaulStore
import Logging
import NIOCore
import Synchronization

/// The run of a list download (``StoredDownload/isList``): its files, each from its own URL,
/// fetched a few at a time over the core's engines (a loop per core), each placed in the
/// download's directory as it finishes.
///
/// To the queue it is one download in one slot: claimed, paused, resumed, retried and removed
/// as any other. Its files cost no queue bookkeeping of their own: each is a ``TransferRun``
/// whose end is handled right here, on the loop that received its last byte, and the next file
/// starts there too (as `haul get` runs a list). What a restart needs is written to the
/// download's file rows in batches, off the loops, on a queue of the run's own
/// (``TransferStore/recordFiles(of:_:)``): where a finished file goes is saved before it is
/// placed there, so that a restart finds it there (or, not finding it, fetches it again); a
/// file that failed is saved with its error.
///
/// The run ends once every file is done or has failed, or when it is stopped:
/// - every file done: `.completed`, with the bytes of all files;
/// - some failed: `.failed`, its error naming how many and the first, of the kind of the most
///   retryable failure (a lost connection before a 404), so the queue's retry policy decides as
///   for one file; the next run fetches only what is not done;
/// - stopped: `.stopped`; files in flight are dropped (started again by the next run).
final class ListRun: Sendable {
    /// What the run needs from the queue.
    struct Setup: Sendable {
        var download: Int64
        var directory: String
        var headers: HTTPHeaderFields
        /// The engines files are spread over (a loop each).
        var engines: [TransferEngine]
        var bandwidthLimiters: [BandwidthLimiter]
        /// Files fetched at once.
        var filesAtOnce: Int
        var store: TransferStore
    }

    private struct State {
        /// Which file starts next, what an end means, when the run is over.
        var plan: ListRunPlan
        var running: [Int: TransferRun] = [:]
        /// Finished files saved or waiting to be, then placed (``flush()``).
        var unsaved: [Finished] = []
        /// Files that failed for this run, their rows waiting to be saved with the next batch.
        var unsavedFailures: [StoredListFile.End] = []
        /// When what waits is saved.
        var batching = ListRunBatching()
        /// Paths given to the run's files: no two files of the list take one name. A path stays
        /// in it once its file is placed (the file holds the name then anyway), so that only the
        /// loop that names a file touches the set, never the thread that places it.
        var reserved: Set<String> = []
        /// The task waiting for the run's slot at the core's gate (stopped with the run).
        var waiting: Task<Void, Never>?
        /// Whether the run has its slot (given back when it ends).
        var admitted = false
        var completion: (@Sendable (TransferOutcome) -> Void)?

        /// The files to start now (``ListRunPlan/next()`` until it gives none): in flight from now on.
        mutating func takeStarts() -> [(position: Int, engine: Int)] {
            var starts: [(position: Int, engine: Int)] = []
            while let next = self.plan.next() { starts.append(next) }
            return starts
        }

        /// Whether (and when) the caller asks the writer queue for a save, after a file's end.
        mutating func startFlush() -> ListRunBatching.Start {
            let nothingLeftToStart = self.plan.pending.isEmpty || self.plan.stopReason != nil
            return self.batching.filesWait(self.unsaved.count + self.unsavedFailures.count, nothingLeftToStart: nothingLeftToStart)
        }
    }

    /// A file fetched whole, to save (its row) and then place. No URL and no partial path (made
    /// again where needed, from the position): it is handed from the loop to the writer queue.
    private struct Finished {
        var end: StoredListFile.End
        /// The name the server gave it (its path's last part, unless that was taken).
        var name: String
        /// The file, unnamed; `nil`: it was created by name, at ``partialPath(_:)``.
        var unnamed: PartialFile?
    }

    let setup: Setup
    let files: [StoredListFile]
    private let transfer: TrackedTransfer
    private let admission: (any RunAdmission)?
    private let state: Mutex<State>
    private let writer: DispatchQueue
    private let logger: Logger
    /// The partial files' path up to the file's position (``partialPath(_:)``).
    private let partialPrefix: String

    /// `files`: the download's file rows as stored; those done whose file is still where it was
    /// placed count as done, the rest are fetched.
    init(setup: Setup, files: [StoredListFile], transfer: TrackedTransfer, admission: (any RunAdmission)?, logger: Logger) {
        self.setup = setup
        self.files = files
        self.transfer = transfer
        self.admission = admission
        self.logger = logger
        self.writer = DispatchQueue(label: "haul.list-run.\(setup.download)")
        self.partialPrefix = FileNaming.path(of: ".\(setup.download)-", in: setup.directory)
        let plan = ListRunPlan(files: files, engines: setup.engines.count, filesAtOnce: setup.filesAtOnce) { path, bytes in
            PartialFile.size(at: path) == bytes
        }
        let state = State(plan: plan)
        self.state = Mutex(state)
    }

    /// Whether this run placed any file: a run that failed after doing so counts as progress,
    /// not as one more failed attempt (``DownloadQueue``'s retry of the list).
    var madeProgress: Bool { self.state.withLock { $0.plan.placedThisRun > 0 } }

    /// Starts the run (once its slot at the core's gate is free, with a look-ahead); `completion`
    /// is called once, on no particular thread, when it has ended.
    func start(completion: @escaping @Sendable (TransferOutcome) -> Void) {
        self.state.withLock { $0.completion = completion }
        guard let admission = self.admission else {
            self.launch()
            return self.finishIfDone()
        }
        let task = Task {
            do {
                try await admission.enter()
            } catch {
                // Stopped while it waited: nothing fetched.
                self.state.withLock { _ = $0.plan.stop(.cancel) }
                return self.finishIfDone()
            }
            self.state.withLock { $0.admitted = true }
            self.launch()
            self.finishIfDone()
        }
        self.state.withLock { $0.waiting = task }
    }

    /// Stops every file in flight; the run ends `.stopped` once they have.
    func stop(_ reason: TransferRun.StopReason) {
        let (runs, waiting) = self.state.withLock { state -> ([TransferRun], Task<Void, Never>?) in
            guard state.plan.stop(reason) else { return ([], nil) }
            return (Array(state.running.values), state.admitted ? nil : state.waiting)
        }
        waiting?.cancel()
        for run in runs { run.stop(reason) }
        self.finishIfDone()
    }

    /// Stops the run only while it still waits for its slot (see ``TransferRun/stopUnlessAdmitted(_:)``).
    func stopUnlessAdmitted(_ reason: TransferRun.StopReason) -> Bool {
        guard let admission = self.admission else { return false }
        return admission.withdraw {
            self.state.withLock { _ = $0.plan.stop(reason) }
        }
    }

    // MARK: - Files

    /// Starts files until `filesAtOnce` are in flight or none is left.
    private func launch() {
        self.launch(self.state.withLock { $0.takeStarts() })
    }

    /// Starts the files the plan gave (``State/takeStarts()``, counted in flight already): their
    /// runs made outside the lock, then held in `running` under one lock for all. A run whose
    /// list was stopped meanwhile is started and stopped at once, so that it ends (and the
    /// plan hears of it) as the others do.
    private func launch(_ starts: [(position: Int, engine: Int)]) {
        guard !starts.isEmpty else { return }
        let runs = starts.map { start in
            TransferRun(
                engine: self.setup.engines[start.engine],
                request: TransferRequest(url: self.files[start.position].url, method: "GET", headers: self.setup.headers),
                destination: .file(path: self.partialPath(start.position), resume: nil),
                resourceTimeout: nil,
                bandwidthLimiters: self.setup.bandwidthLimiters,
                // One connection a file: the list's files are its connections.
                maximumConnections: 1,
                opensUnnamedFile: true,
                observer: FileObserver(list: self, position: start.position)
            )
        }
        let stopped = self.state.withLock { state -> TransferRun.StopReason? in
            for (start, run) in zip(starts, runs) { state.running[start.position] = run }
            return state.plan.stopReason
        }
        for (start, run) in zip(starts, runs) {
            let position = start.position
            run.start { outcome in self.ended(position, run, outcome) }
            if let stopped { run.stop(stopped) }
        }
    }

    /// Where file `position` is kept under a name while it has one (a file system without
    /// unnamed files, or a run stopped with bytes on disk).
    private func partialPath(_ position: Int) -> String {
        // Joined once per list, not per file (a path joined from parts was ~4 K instructions).
        self.partialPrefix + String(position) + ".haul-part"
    }

    fileprivate func wrote(_ position: Int, totalOnDisk: Int64) {
        let bytes = self.state.withLock { $0.plan.wrote(position, bytes: totalOnDisk) }
        self.transfer.listProgressed(bytesDone: bytes)
    }

    /// File `position`'s run ended (on its loop): saved and placed when whole, else its
    /// failure kept; the next file starts.
    private func ended(_ position: Int, _ run: TransferRun, _ outcome: TransferOutcome) {
        var finished: Finished?
        var failure: TransferFailure?
        switch outcome {
        case .completed(let response, let total) where (200..<300).contains(response.statusCode):
            let name = FileNaming.suggestedFilename(contentDisposition: response.headers["Content-Disposition"], url: response.url)
            let unnamed = run.takeUnnamedFile()
            finished = Finished(end: StoredListFile.End(position: position, state: .done, path: name, bytes: total), name: name, unnamed: unnamed)
        case .completed(let response, _):
            failure = TransferFailure(
                URLError(.badServerResponse, userInfo: [NSLocalizedDescriptionKey: "the server answered \(response.statusCode)"]),
                serverStatus: response.statusCode
            )
            unlink(self.partialPath(position))
        case .failed(let error, _, _):
            failure = error
            unlink(self.partialPath(position))
        case .stopped:
            unlink(self.partialPath(position))
        }
        // The file's free name looked up before the lock (`lstat`s), not under it: the two loops
        // and the writer take that lock for every file, and one holding it through system calls
        // kept the others waiting (`_lockSlow` was 2.7 % of hauld's samples, 1,000 × 16 KiB).
        // Under the lock it is only checked against the names other files of the list took.
        let freePath = finished.flatMap { NoOverwriteMove.freePath(directory: self.setup.directory, name: $0.name) }
        // One lock for the end, the files that start in its place, and (when none does) the
        // run's own end: each lock the two loops share is a cache line they pass between them.
        let (flush, starts, ending) = self.state.withLock { state -> (ListRunBatching.Start, [(position: Int, engine: Int)], Ending?) in
            state.running[position] = nil
            let end: ListRunPlan.FileEnd
            if let failure { end = .failed(failure) } else if finished != nil { end = .finished } else { end = .stopped }
            switch state.plan.ended(position, end) {
            case .requeued, .retry:
                break
            case .failed:
                // Saved with the next batch.
                state.unsavedFailures.append(StoredListFile.End(position: position, state: .failed, error: failure?.error.localizedDescription))
            case .place:
                guard var finished else { break }
                // Named now, on this loop: no other file of the list takes the name meanwhile.
                // The name found free before the lock, unless another file of the list took it
                // since (then it is looked for again, past what they took).
                let chosen = freePath.flatMap { state.reserved.contains($0) ? nil : $0 }
                guard let path = chosen ?? NoOverwriteMove.freePath(directory: self.setup.directory, name: finished.name, reserved: state.reserved) else {
                    finished.unnamed?.close()
                    unlink(self.partialPath(position))
                    let error = URLError(.cannotCreateFile, userInfo: [NSLocalizedDescriptionKey: "no free name for \(finished.name) in \(self.setup.directory)"])
                    state.plan.failed(position, TransferFailure(error))
                    break
                }
                state.reserved.insert(path)
                finished.end.path = path
                state.unsaved.append(finished)
            }
            // After every end, also a requeued one: once nothing is left to start, what waits is saved at once.
            let flush = state.startFlush()
            let starts = state.takeStarts()
            return (flush, starts, starts.isEmpty ? self.ending(&state) : nil)
        }
        switch flush {
        case .none: break
        case .now: self.writer.async { self.flush() }
        case .afterInterval: self.writer.asyncAfter(deadline: .now() + ListRunBatching.gatheringInterval) { self.flush() }
        }
        self.launch(starts)
        if let ending { self.finish(ending) }
    }

    /// Saves the finished files that wait (one transaction), then places them; again while
    /// more finished meanwhile. On the run's writer queue, when ``ListRunBatching`` says.
    private func flush() {
        while true {
            let (batch, failures) = self.state.withLock { state -> ([Finished], [StoredListFile.End]) in
                defer {
                    state.unsaved.removeAll(keepingCapacity: true)
                    state.unsavedFailures.removeAll()
                }
                if state.unsaved.isEmpty, state.unsavedFailures.isEmpty { state.batching.drained() } else { state.batching.takes() }
                return (state.unsaved, state.unsavedFailures)
            }
            guard !batch.isEmpty || !failures.isEmpty else { break }
            do {
                try self.setup.store.recordFiles(of: self.setup.download, failures + batch.map(\.end))
            } catch {
                // Not saved: not placed either (a restart would not find them); fetched again.
                self.logger.error("download \(self.setup.download): cannot save \(batch.count) finished files: \(error)")
                self.state.withLock { state in
                    for finished in batch {
                        finished.unnamed?.close()
                        if finished.unnamed == nil { unlink(self.partialPath(finished.end.position)) }
                        state.reserved.remove(finished.end.path!)
                        let failure = URLError(.cannotWriteToFile, userInfo: [NSLocalizedDescriptionKey: "cannot save the list's progress: \(error)"])
                        state.plan.failed(finished.end.position, TransferFailure(failure))
                    }
                }
                continue
            }
            var placedBytes: [Int64] = []
            var misplaced: [StoredListFile.End] = []
            var renamed: [StoredListFile.End] = []
            for finished in batch {
                let path = finished.end.path!
                do {
                    defer { finished.unnamed?.close() }
                    // At the saved path; when that was taken since it was chosen (another list,
                    // or another program, in the directory), at the next free name, saved again
                    // (a crash before that save fetches the file again rather than leave it
                    // unaccounted for).
                    let directory = self.setup.directory
                    let placedAt: String
                    if let unnamed = finished.unnamed {
                        placedAt = try DownloadQueue.place(at: path, { try unnamed.link(to: $0) }) {
                            try NoOverwriteMove.linkChoosingFreeName(unnamed, directory: directory, name: finished.name)
                        }
                    } else {
                        let partialPath = self.partialPath(finished.end.position)
                        placedAt = try DownloadQueue.place(at: path, { try NoOverwriteMove.move(partialPath, to: $0) }) {
                            try NoOverwriteMove.moveChoosingFreeName(partialPath, directory: directory, name: finished.name)
                        }
                    }
                    if placedAt != path {
                        var moved = finished.end
                        moved.path = placedAt
                        renamed.append(moved)
                    }
                    placedBytes.append(finished.end.bytes ?? 0)
                } catch {
                    var file = finished.end
                    file.state = .failed
                    file.path = nil
                    file.error = "cannot place the file at \(path): \(error)"
                    misplaced.append(file)
                    if finished.unnamed == nil { unlink(self.partialPath(finished.end.position)) }
                }
            }
            if !misplaced.isEmpty || !renamed.isEmpty { try? self.setup.store.recordFiles(of: self.setup.download, misplaced + renamed) }
            let bytes = self.state.withLock { state -> Int64 in
                for file in misplaced {
                    state.plan.failed(file.position, TransferFailure(URLError(.cannotMoveFile, userInfo: [NSLocalizedDescriptionKey: file.error ?? "cannot place the file"])))
                }
                for bytes in placedBytes { state.plan.placed(bytes: bytes) }
                return state.plan.bytesOnDisk
            }
            self.transfer.listProgressed(bytesDone: bytes)
        }
        self.finishIfDone()
    }

    /// The run's end, to tell outside the lock (``finish(_:)``).
    private typealias Ending = (completion: @Sendable (TransferOutcome) -> Void, outcome: TransferOutcome, slot: (any RunAdmission)?)

    /// Calls the completion once nothing is in flight, waits to be saved, or is left to start
    /// (or the run is stopped): see the type's description for the outcome.
    private func finishIfDone() {
        guard let ending = self.state.withLock({ self.ending(&$0) }) else { return }
        self.finish(ending)
    }

    /// The run's end when it has ended and was not told yet (taken: told once), under the lock.
    private func ending(_ state: inout State) -> Ending? {
        guard let completion = state.completion,
            let outcome = state.plan.outcome(hasPendingWrites: state.batching.isSaving || !state.unsaved.isEmpty || !state.unsavedFailures.isEmpty, url: { self.files[$0].url })
        else { return nil }
        state.completion = nil
        let slot = state.admitted ? self.admission : nil
        switch outcome {
        case .stopped(let reason):
            return (completion, .stopped(reason, response: nil, resumePoint: nil), slot)
        case .completed(let bytes):
            let response = ResponseInfo(url: self.files[0].url, statusCode: 200, headers: HTTPHeaderFields(), httpVersion: "HTTP/1.1")
            return (completion, .completed(response: response, bytesOnDisk: bytes), slot)
        case .failed(let failure):
            return (completion, .failed(failure, response: nil, resumePoint: nil), slot)
        }
    }

    private func finish(_ ending: Ending) {
        ending.completion(ending.outcome)
        // The slot goes back after the end was told, as a file's run gives it back.
        ending.slot?.leave()
    }
}

/// Reports one file's bytes to its list.
private final class FileObserver: TransferRunObserver, Sendable {
    let list: ListRun
    let position: Int

    init(list: ListRun, position: Int) {
        self.list = list
        self.position = position
    }

    func transferRun(_ run: TransferRun, didReceive response: ResponseInfo, resumedAtOffset: Int64?, expectedTotal: Int64?) {}

    func transferRun(_ run: TransferRun, didWrite byteCount: Int, totalOnDisk: Int64, expectedTotal: Int64?) {
        self.list.wrote(self.position, totalOnDisk: totalOnDisk)
    }

    func transferRun(_ run: TransferRun, didReceive body: ByteBuffer) {}

    func transferRun(_ run: TransferRun, willRedirect response: ResponseInfo, to request: TransferRequest) async -> TransferRequest? {
        request
    }
}
