/// Where a download of the queue is in its life.
///
/// ```
///  add ──▶ waiting ──▶ active ──▶ complete
///            ▲  │        │  └───▶ error ──(resume)──▶ waiting
///            │  ▼        ▼
///            └─ paused ◀─┘          any ──(cancel / rm)──▶ removed
/// ```
/// `complete`, `error` and `removed` are history: they stay listed (across restarts) until purged.
public enum QueuedDownloadState: String, Codable, Sendable, Hashable, CaseIterable {
    /// Queued; starts when a slot is free (or after a retry delay).
    case waiting
    /// Transferring now.
    case active
    /// Stopped by the user, bytes kept.
    case paused
    /// Finished and verified; the file is at its final path.
    case complete
    /// Gave up (after retries) or failed verification; `errorMessage` says why. Bytes kept
    /// where they can still be used.
    case error
    /// Cancelled by the user; partial bytes deleted.
    case removed

    /// Whether the download belongs in the "Downloading" view (else "Finished").
    public var isInProgress: Bool {
        switch self {
        case .waiting, .active, .paused: true
        case .complete, .error, .removed: false
        }
    }

    /// Whether `resume` can move it back to `waiting`.
    public var canResume: Bool { self == .paused || self == .error }

    /// Whether `pause` applies.
    public var canPause: Bool { self == .waiting || self == .active }

    /// Hashes the case, not its raw value: the standard library's hashing of a `String`-backed
    /// enum hashes the string (~130 instructions more a lookup), and the index's counts and
    /// lists' filters look a state up for every saved change.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(self.ordinal)
    }

    /// The position among all cases, for hashing and for tables indexed by state.
    var ordinal: Int {
        switch self {
        case .waiting: 0
        case .active: 1
        case .paused: 2
        case .complete: 3
        case .error: 4
        case .removed: 5
        }
    }
}
