/// What happens after a transfer attempt failed: the one rule set behind hauld's background
/// tasks, queue downloads and `haul get`.
///
/// It combines the retry policy (backoff with jitter, `Retry-After`), mirror fallback, the
/// resource deadline and the decision to keep or drop the bytes on disk. Pure: the caller
/// passes the clock's reading and the jitter.
public struct TransferOutcomePolicy: Sendable, Hashable {
    public var retryPolicy: RetryPolicy

    public init(retryPolicy: RetryPolicy) {
        self.retryPolicy = retryPolicy
    }

    /// One failed attempt, as the policy needs to know it.
    public struct Failure: Sendable, Hashable {
        /// The number of the attempt that failed (1-based) on the current source.
        public var attempt: Int
        public var kind: TransferFailureKind
        /// The server's `Retry-After`, in seconds, when it sent one.
        public var retryAfter: Double?
        /// Whether a later attempt can continue from the bytes on disk (validators on record).
        public var hasResumePoint: Bool
        /// Seconds left before the resource deadline (`timeoutIntervalForResource`), if any.
        public var secondsUntilDeadline: Double?
        /// Other sources (mirrors) not tried yet for this round.
        public var mirrorsLeft: Int

        public init(
            attempt: Int,
            kind: TransferFailureKind,
            retryAfter: Double? = nil,
            hasResumePoint: Bool,
            secondsUntilDeadline: Double? = nil,
            mirrorsLeft: Int = 0
        ) {
            self.attempt = attempt
            self.kind = kind
            self.retryAfter = retryAfter
            self.hasResumePoint = hasResumePoint
            self.secondsUntilDeadline = secondsUntilDeadline
            self.mirrorsLeft = mirrorsLeft
        }
    }

    public enum Decision: Sendable, Hashable {
        /// Try the same source again after `afterSeconds`; `keepBytes` says whether the partial
        /// file is worth keeping (it is resumable).
        case retry(afterSeconds: Double, keepBytes: Bool)
        /// Give this source up and try the next mirror now, keeping the bytes (`If-Range`
        /// decides whether they fit the mirror's entity).
        case nextMirror(keepBytes: Bool)
        /// The transfer failed for good. `keepBytes`: a resumable partial file stays (resume
        /// data, `haul resume`); otherwise it is deleted.
        case fail(keepBytes: Bool)
    }

    /// Decides what follows `failure`. `randomUnit` (in `0..<1`) is the jitter.
    public func decide(_ failure: Failure, randomUnit: Double) -> Decision {
        var kind = failure.kind
        // A timeout after the resource deadline is the deadline's, and final.
        if let left = failure.secondsUntilDeadline, left <= 0 { kind = .permanent }
        let keep = failure.hasResumePoint
        let retry = self.retryPolicy.decision(
            afterAttempt: failure.attempt,
            failure: kind,
            retryAfter: failure.retryAfter,
            randomUnit: randomUnit
        )
        if case .retry(let delay) = retry {
            if let left = failure.secondsUntilDeadline, delay >= left { return .fail(keepBytes: keep) }
            return .retry(afterSeconds: delay, keepBytes: keep)
        }
        // Every status and network failure speaks of this source only: another may work.
        if failure.mirrorsLeft > 0, kind != .permanent { return .nextMirror(keepBytes: keep) }
        return .fail(keepBytes: keep)
    }
}
