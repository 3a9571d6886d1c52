/// A moving-window transfer rate: the bytes added over the last few seconds divided by the time
/// they took. Time is passed in, so tests drive it.
public struct TransferRateMeter: Sendable {
    private var samples: [(time: Double, total: Int64)] = []
    private let window: Double

    /// - Parameter window: how many seconds of history the rate averages over.
    public init(window: Double = 5) {
        self.window = window
    }

    /// Records that `total` bytes had been transferred at `time` (seconds, any monotonic origin).
    public mutating func record(total: Int64, at time: Double) {
        if let last = self.samples.last, time - last.time < 0.05 {
            self.samples[self.samples.count - 1] = (last.time, total)
        } else {
            self.samples.append((time, total))
        }
        while let first = self.samples.first, time - first.time > self.window, self.samples.count > 2 {
            self.samples.removeFirst()
        }
    }

    /// Bytes per second over the window, or `nil` before two samples exist.
    public var bytesPerSecond: Double? {
        guard let first = self.samples.first, let last = self.samples.last, last.time > first.time else { return nil }
        return Double(last.total - first.total) / (last.time - first.time)
    }

    /// Seconds until `expected` bytes, at the current rate.
    public func secondsRemaining(total: Int64, expected: Int64) -> Double? {
        guard let rate = self.bytesPerSecond, rate > 0, expected >= total else { return nil }
        return Double(expected - total) / rate
    }
}
