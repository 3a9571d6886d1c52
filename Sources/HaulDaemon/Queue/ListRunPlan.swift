import Foundation
import HaulCore
import HaulEngine
import HaulStore

/// What the run of a list download decides, with no I/O: which file starts next and on which
/// engine, what a file's end means, and when the run is over with which outcome. ``ListRun``
/// holds one under its lock and does what it says (starts runs, saves rows, places files).
struct ListRunPlan {
    /// How a file's run ended, as the plan needs to know it.
    enum FileEnd {
        /// Fetched whole: to be saved and placed (``placed(bytes:)`` once it is).
        case finished
        case failed(TransferFailure)
        /// Stopped with the run: it goes back to the files to fetch.
        case stopped
    }

    /// What to do about a file's end (``ended(_:_:)``).
    enum Decision: Equatable {
        /// Save it and place it.
        case place
        /// It failed in a way worth another try: it is to fetch again, at once.
        case retry
        /// It failed for this run: save its failure.
        case failed
        /// It waits for the next run.
        case requeued
    }

    /// How the run ended (``outcome(hasPendingWrites:url:)``).
    enum Outcome {
        case completed(bytes: Int64)
        case failed(TransferFailure)
        case stopped(TransferRun.StopReason)
    }

    let fileCount: Int
    let engines: Int
    let filesAtOnce: Int
    /// Positions of the files still to fetch this run, next last.
    private(set) var pending: [Int]
    /// The engine of each file in flight.
    private(set) var inFlight: [Int: Int] = [:]
    private var perEngine: [Int]
    private var inFlightBytes: [Int: Int64] = [:]
    /// The sum of `inFlightBytes`, kept as they change (asked for at every write of a body).
    private var inFlightTotal: Int64 = 0
    private(set) var doneBytes: Int64 = 0
    private(set) var doneCount = 0
    /// Files placed by this run (the queue counts a run that placed some as progress).
    private(set) var placedThisRun = 0
    private(set) var failures: [(position: Int, failure: TransferFailure)] = []
    /// Files tried again at once already this run.
    private var retried: Set<Int> = []
    private(set) var stopReason: TransferRun.StopReason?
    /// Files started this run.
    private(set) var started = 0

    /// `files` as stored: one `done` whose file `isPlaced` (its path, its length) counts as done;
    /// every other file is to fetch, in the list's order.
    init(files: [StoredListFile], engines: Int, filesAtOnce: Int, isPlaced: (String, Int64) -> Bool) {
        self.fileCount = files.count
        self.engines = max(1, engines)
        self.filesAtOnce = max(1, filesAtOnce)
        self.perEngine = Array(repeating: 0, count: self.engines)
        var pending: [Int] = []
        for file in files.reversed() {
            if file.state == .done, let path = file.path, let bytes = file.bytes, isPlaced(path, bytes) {
                self.doneBytes += bytes
                self.doneCount += 1
            } else {
                pending.append(file.position)
            }
        }
        self.pending = pending
    }

    /// How many files engine `index` runs at once at most: `filesAtOnce` shared out, the first
    /// engines taking one more when it does not divide. A file that ends makes room on its own
    /// engine, where the next one reuses its connection (spread by fewest in flight instead, a
    /// loop now and then held one file more than it had connections and opened one while another
    /// loop's sat idle: 101 connections for 1,000 files, against 16 with the shares).
    func share(of index: Int) -> Int {
        self.filesAtOnce / self.engines + (index < self.filesAtOnce % self.engines ? 1 : 0)
    }

    /// The next file to start and its engine, counted in flight from now on; `nil` when the run
    /// is stopped, nothing is left, or every engine has its share in flight.
    mutating func next() -> (position: Int, engine: Int)? {
        guard self.stopReason == nil, !self.pending.isEmpty,
            let engine = (0..<self.engines).first(where: { self.perEngine[$0] < self.share(of: $0) })
        else { return nil }
        let position = self.pending.removeLast()
        self.perEngine[engine] += 1
        self.inFlight[position] = engine
        self.started += 1
        return (position, engine)
    }

    /// File `position` has `bytes` on disk; the list's bytes on disk now.
    mutating func wrote(_ position: Int, bytes: Int64) -> Int64 {
        self.inFlightTotal += bytes - (self.inFlightBytes.updateValue(bytes, forKey: position) ?? 0)
        return self.bytesOnDisk
    }

    /// The bytes of the files placed and of those in flight.
    var bytesOnDisk: Int64 { self.doneBytes + self.inFlightTotal }

    /// File `position`'s run ended so: what to do about it. A lost connection or a timeout is
    /// tried again at once, once a run; a server's answer worth retrying (5xx, 408, 429) is not:
    /// the list then ends failed and the queue's retry policy waits its backoff.
    mutating func ended(_ position: Int, _ end: FileEnd) -> Decision {
        if let engine = self.inFlight.removeValue(forKey: position) { self.perEngine[engine] -= 1 }
        self.inFlightTotal -= self.inFlightBytes.removeValue(forKey: position) ?? 0
        switch end {
        case .finished:
            return .place
        case .stopped:
            self.pending.append(position)
            return .requeued
        case .failed(let failure):
            if Self.isRetriedAtOnce(failure), self.stopReason == nil, self.retried.insert(position).inserted {
                self.pending.append(position)
                return .retry
            }
            self.failures.append((position, failure))
            return .failed
        }
    }

    /// A finished file is placed: done.
    mutating func placed(bytes: Int64) {
        self.doneBytes += bytes
        self.doneCount += 1
        self.placedThisRun += 1
    }

    /// A finished file could not be saved or placed: failed for this run.
    mutating func failed(_ position: Int, _ failure: TransferFailure) {
        self.failures.append((position, failure))
    }

    /// Stops the run (the first reason stays); whether this was the first stop.
    mutating func stop(_ reason: TransferRun.StopReason) -> Bool {
        guard self.stopReason == nil else { return false }
        self.stopReason = reason
        return true
    }

    /// How the run ended, once nothing is in flight, `hasPendingWrites` is false, and nothing is
    /// left to start (or it is stopped); `nil` before. A run not started yet (waiting for its
    /// slot) with files to fetch has not ended. Failed: its message names how many files failed
    /// and the first (`url` gives a file's URL); its kind is the most retryable failure's (a
    /// lost connection before a 404), so the queue's retry policy decides as for one file.
    func outcome(hasPendingWrites: Bool, url: (Int) -> URL) -> Outcome? {
        guard self.inFlight.isEmpty, !hasPendingWrites, self.pending.isEmpty || self.stopReason != nil else { return nil }
        guard self.started > 0 || self.stopReason != nil || self.pending.isEmpty else { return nil }
        if let reason = self.stopReason { return .stopped(reason) }
        guard !self.failures.isEmpty else { return .completed(bytes: self.doneBytes) }
        let failures = self.failures.sorted { $0.position < $1.position }
        let decisive = failures.first { Self.isTransient($0.failure) } ?? failures[0]
        let first = failures[0]
        let message = "\(failures.count) of \(self.fileCount) files failed (first: \(url(first.position).absoluteString): \(first.failure.error.localizedDescription))"
        return .failed(TransferFailure(URLError(decisive.failure.error.code, userInfo: [NSLocalizedDescriptionKey: message]), serverStatus: decisive.failure.serverStatus))
    }

    /// Whether a file that failed so is fetched again at once: a lost connection or a timeout.
    static func isRetriedAtOnce(_ failure: TransferFailure) -> Bool {
        switch failure.kind {
        case .connectionLost, .timedOut: true
        case .cannotConnect, .serverStatus, .permanent: false
        }
    }

    /// Whether `failure` is worth another try (a lost connection, a timeout, a refused
    /// connection, a 5xx, 408 or 429), as the retry policy counts them.
    static func isTransient(_ failure: TransferFailure) -> Bool {
        switch failure.kind {
        case .connectionLost, .timedOut, .cannotConnect: true
        case .serverStatus(let status): RetryPolicy.isTransient(status: status)
        case .permanent: false
        }
    }
}
