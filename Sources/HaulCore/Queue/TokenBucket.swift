/// A token bucket for speed limits: `rate` bytes per second with a burst of `burst` bytes.
///
/// Bytes are taken after they arrived (a receiver cannot refuse bytes already read), so the
/// bucket may go into debt; the answer is how long to wait before reading more so that the
/// average stays at `rate`. A rate of 0 means unlimited.
public struct TokenBucket: Sendable, Hashable {
    public private(set) var rate: Double
    public private(set) var burst: Double
    private var tokens: Double
    private var updatedAt: Double?

    public init(bytesPerSecond: Int64, burst: Double? = nil) {
        self.rate = Double(max(0, bytesPerSecond))
        // A quarter second of traffic (at least 16 KiB) smooths reads without long stalls.
        self.burst = burst ?? max(16 * 1024, self.rate / 4)
        self.tokens = self.burst
    }

    public var isUnlimited: Bool { self.rate == 0 }

    /// Changes the rate, keeping the bucket's fill within the new burst.
    public mutating func setRate(bytesPerSecond: Int64) {
        self.rate = Double(max(0, bytesPerSecond))
        self.burst = max(16 * 1024, self.rate / 4)
        self.tokens = min(self.tokens, self.burst)
    }

    /// Takes `byteCount` bytes received at time `now` (seconds, any fixed origin).
    ///
    /// - Returns: seconds to wait before reading more; 0 when within the rate.
    public mutating func take(_ byteCount: Int, now: Double) -> Double {
        guard self.rate > 0 else { return 0 }
        if let updatedAt = self.updatedAt {
            self.tokens = min(self.burst, self.tokens + max(0, now - updatedAt) * self.rate)
        }
        self.updatedAt = now
        self.tokens -= Double(byteCount)
        return self.tokens >= 0 ? 0 : -self.tokens / self.rate
    }
}
