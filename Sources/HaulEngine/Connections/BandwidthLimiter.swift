import HaulCore
import NIOCore
import Synchronization

/// A speed limit shared by the transfers that pass it (one per download, one for the whole
/// queue). Thread-safe; the rate can change at any time.
///
/// A transfer reports each body chunk after writing it; the answer is how long to pause
/// reading, which AsyncHTTPClient turns into TCP back-pressure (the server slows down rather
/// than bytes piling up in memory).
package final class BandwidthLimiter: Sendable {
    private let bucket: Mutex<TokenBucket>
    private static let origin = ContinuousClock.now

    package init(bytesPerSecond: Int64) {
        self.bucket = Mutex(TokenBucket(bytesPerSecond: bytesPerSecond))
    }

    /// 0 removes the limit.
    package func setRate(bytesPerSecond: Int64) {
        self.bucket.withLock { $0.setRate(bytesPerSecond: bytesPerSecond) }
    }

    package var bytesPerSecond: Int64 { self.bucket.withLock { Int64($0.rate) } }

    /// Takes `byteCount` received bytes; returns the pause before reading more.
    package func take(_ byteCount: Int) -> TimeAmount {
        let now = Self.origin.duration(to: .now)
        let seconds = Double(now.components.seconds) + Double(now.components.attoseconds) * 1e-18
        let wait = self.bucket.withLock { $0.take(byteCount, now: seconds) }
        return wait > 0 ? .nanoseconds(Int64(wait * 1e9)) : .zero
    }
}
