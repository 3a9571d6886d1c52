import Foundation

/// How a failed transfer attempt was classified, for the retry decision.
public enum TransferFailureKind: Sendable, Hashable {
    /// The connection was reset or closed before the body ended.
    case connectionLost
    /// No byte arrived within the idle timeout.
    case timedOut
    /// The server could not be reached at all (refused, DNS).
    case cannotConnect
    /// The server answered with `status`, e.g. 503.
    case serverStatus(Int)
    /// Anything retrying cannot fix (bad URL, disk full, cancelled, 404, …).
    case permanent
}

/// Exponential backoff with jitter, honouring `Retry-After`, as wget and aria2 retry.
public struct RetryPolicy: Sendable, Hashable {
    /// Attempts in all, the first included. `1` disables retries.
    public var maximumAttempts: Int
    /// The delay before the first retry.
    public var initialDelay: Double
    /// No computed delay exceeds this.
    public var maximumDelay: Double
    /// A server's `Retry-After` longer than this ends the retries instead of waiting.
    public var maximumRetryAfter: Double
    /// Whether a refused connection is worth retrying (off by default, like wget's `--retry-connrefused`).
    public var retriesRefusedConnections: Bool

    public init(
        maximumAttempts: Int = 5,
        initialDelay: Double = 1,
        maximumDelay: Double = 30,
        maximumRetryAfter: Double = 300,
        retriesRefusedConnections: Bool = false
    ) {
        self.maximumAttempts = maximumAttempts
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
        self.maximumRetryAfter = maximumRetryAfter
        self.retriesRefusedConnections = retriesRefusedConnections
    }

    /// The decision after an attempt failed.
    public enum Decision: Sendable, Hashable {
        case retry(afterSeconds: Double)
        case giveUp
    }

    /// Whether statuses of this kind are transient: 408, 429, 500, 502, 503, 504.
    public static func isTransient(status: Int) -> Bool {
        [408, 429, 500, 502, 503, 504].contains(status)
    }

    /// Decides whether to try again after the attempt numbered `attempt` (1-based) failed.
    ///
    /// - Parameters:
    ///   - attempt: the number of the attempt that just failed.
    ///   - failure: how it failed.
    ///   - retryAfter: the server's `Retry-After`, in seconds, if it sent one.
    ///   - randomUnit: a number in `0..<1` for jitter (injected so tests are deterministic).
    public func decision(
        afterAttempt attempt: Int,
        failure: TransferFailureKind,
        retryAfter: Double? = nil,
        randomUnit: Double
    ) -> Decision {
        guard attempt < self.maximumAttempts else { return .giveUp }
        switch failure {
        case .permanent:
            return .giveUp
        case .cannotConnect where !self.retriesRefusedConnections:
            return .giveUp
        case .serverStatus(let status) where !Self.isTransient(status: status):
            return .giveUp
        case .connectionLost, .timedOut, .cannotConnect, .serverStatus:
            break
        }
        if let retryAfter {
            guard retryAfter <= self.maximumRetryAfter else { return .giveUp }
            return .retry(afterSeconds: max(0, retryAfter))
        }
        let exponential = self.initialDelay * pow(2, Double(attempt - 1))
        let capped = min(self.maximumDelay, exponential)
        // Full jitter in the upper half keeps clients apart without making the wait tiny.
        return .retry(afterSeconds: capped * (0.5 + 0.5 * randomUnit))
    }

    /// Parses a `Retry-After` value (delay-seconds or an HTTP date) into seconds from `now`.
    public static func retryAfterSeconds(_ value: String, now: Date = Date()) -> Double? {
        let trimmed = value.trimmingASCIIWhitespace()
        if let seconds = Int64(strictDecimal: trimmed) { return Double(seconds) }
        guard let date = HTTPDate.parse(trimmed) else { return nil }
        return max(0, date.timeIntervalSince(now))
    }
}
