import HaulCore
import NIOCore
import Synchronization

/// A speed limit shared by the transfers that pass it (one per download, one for the whole
/// queue). Thread-safe; the rate can change at any time.
///
/// A transfer reports each body chunk after writing it; the answer is how long to pause
/// reading, which AsyncHTTPClient turns into TCP back-pressure (the server slows down rather
/// than bytes piling up in memory).
///
/// Without a limit (the usual case: the queue's and every download's limiter exist whether or
/// not a rate is set) a chunk costs one relaxed atomic load and no lock: every read of every
/// transfer on every event loop passes the queue's one limiter, and a lock there was a cache
/// line the loops took from each other for each network read.
package final class BandwidthLimiter: Sendable {
    private let bucket: Mutex<TokenBucket>
    /// Whether a rate is set (the bucket is consulted only then; while unlimited it is left as
    /// it is, as ``TokenBucket/take(_:now:)`` leaves it).
    private let isLimited: Atomic<Bool>
    private static let origin = ContinuousClock.now

    package init(bytesPerSecond: Int64) {
        self.bucket = Mutex(TokenBucket(bytesPerSecond: bytesPerSecond))
        self.isLimited = Atomic(bytesPerSecond > 0)
    }

    /// 0 removes the limit.
    package func setRate(bytesPerSecond: Int64) {
        self.bucket.withLock { bucket in
            bucket.setRate(bytesPerSecond: bytesPerSecond)
            self.isLimited.store(!bucket.isUnlimited, ordering: .relaxed)
        }
    }

    package var bytesPerSecond: Int64 { self.bucket.withLock { Int64($0.rate) } }

    /// Takes `byteCount` received bytes; returns the pause before reading more.
    package func take(_ byteCount: Int) -> TimeAmount {
        guard self.isLimited.load(ordering: .relaxed) else { return .zero }
        let now = Self.origin.duration(to: .now)
        let seconds = Double(now.components.seconds) + Double(now.components.attoseconds) * 1e-18
        let wait = self.bucket.withLock { $0.take(byteCount, now: seconds) }
        return wait > 0 ? .nanoseconds(Int64(wait * 1e9)) : .zero
    }
}
