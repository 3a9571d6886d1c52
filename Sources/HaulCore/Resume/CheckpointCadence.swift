/// When a running transfer's progress is worth recording: after `bytes` more bytes or
/// `interval` seconds, whichever comes first. A crash then loses at most about that much.
///
/// hauld's checkpoints, `haul get`'s crash checkpoint and live progress throttling all use it.
/// Pure: the caller passes the clock's reading (seconds on any monotonic clock).
public struct CheckpointCadence: Sendable, Hashable {
    public var bytes: Int64
    public var interval: Double
    private var recordedBytes: Int64
    private var recordedAt: Double

    /// Starts counting at `offset` bytes, recorded at `now`.
    public init(bytes: Int64, interval: Double, startingAt offset: Int64 = 0, now: Double) {
        self.bytes = bytes
        self.interval = interval
        self.recordedBytes = offset
        self.recordedAt = now
    }

    /// Whether `total` bytes at `now` are due to be recorded; when they are, they count as
    /// recorded from here on.
    public mutating func isDue(total: Int64, now: Double) -> Bool {
        guard total - self.recordedBytes >= self.bytes || now - self.recordedAt >= self.interval else { return false }
        self.recordedBytes = total
        self.recordedAt = now
        return true
    }

    /// A new starting point (a request continued at `offset`, or started over).
    public mutating func restart(at offset: Int64, now: Double) {
        self.recordedBytes = offset
        self.recordedAt = now
    }
}
