/// Whether a segmented download opens its extra connections yet: not while its first
/// connection alone moves faster than ``fastEnough``, a value type with no I/O.
///
/// Splitting a download that one connection already carries at disk speed adds no speed, only
/// CPU: every extra connection is more wake-ups, smaller reads and smaller writes (measured on
/// 1 GiB from loopback nginx: 16 connections spent 0.89 s of CPU where one spent 0.67 s). So the
/// first connection is watched in windows of ``window`` seconds, starting when the file is
/// ready; the gate opens — for good — at the first window in which it received less than
/// ``fastEnough`` per second (a slow server, a throttled connection, a long path, a stall), and
/// never closes again. A connection that stays fast keeps the download to itself.
///
/// A window in which the first connection was held back by the disk (its bytes waited for the
/// file, so it stopped reading) says nothing about the network: it counts as fast enough, since
/// more connections would only wait for the same disk (measured: a 1 GiB download to ext4 under
/// dirty-page throttling opened sixteen connections and took 0.84x curl's CPU instead of 0.43x).
///
/// The engine calls ``observe(received:now:heldBackByDisk:)`` whenever it is about to start
/// lanes (after every batch written, and on its recheck timer while it waits), with the first
/// connection's bytes received so far.
public struct SplitGate: Sendable, Hashable {
    /// The length of one measuring window, in seconds.
    public let window: Double
    /// Bytes per second at or above which one connection is left alone.
    public let fastEnough: Double
    private var windowStart: Double?
    private var windowStartBytes: Int64 = 0
    /// Whether lanes may start (final once true).
    public private(set) var isOpen = false

    /// 512 MiB/s is more than a SATA SSD writes or a 4 Gbit/s link carries: below it splitting
    /// can pay (a throttled or long path), above it the bottleneck is not the connection.
    public static let defaultFastEnough: Double = 512 * 1024 * 1024
    public static let defaultWindow = 0.05

    public init(window: Double = SplitGate.defaultWindow, fastEnough: Double = SplitGate.defaultFastEnough) {
        self.window = window
        self.fastEnough = fastEnough
    }

    /// A gate that is open from the start (splitting asked for regardless of speed).
    public static var open: SplitGate {
        var gate = SplitGate()
        gate.open()
        return gate
    }

    /// Opens the gate for good (the first connection ended: its rest needs others).
    public mutating func open() {
        self.isOpen = true
    }

    /// The first connection has received `received` bytes in all at `now` (seconds, the
    /// caller's clock); returns whether lanes may start. A window closes once ``window``
    /// seconds passed since it started, or early, once it holds a whole window's worth of bytes
    /// at ``fastEnough``; until one closes slow, the answer is `false` (look again within a
    /// window).
    ///
    /// `heldBackByDisk`: the connection waited for the disk since the last observation; the
    /// window ends as one that was fast enough.
    public mutating func observe(received: Int64, now: Double, heldBackByDisk: Bool = false) -> Bool {
        guard !self.isOpen else { return true }
        guard let start = self.windowStart else {
            self.windowStart = now
            self.windowStartBytes = received
            return false
        }
        let bytes = Double(received - self.windowStartBytes)
        let elapsed = now - start
        if heldBackByDisk || bytes >= self.fastEnough * max(elapsed, self.window) {
            // Fast enough for a whole window (even if sooner), or as fast as the disk lets it:
            // the next window starts here.
            self.windowStart = now
            self.windowStartBytes = received
            return false
        }
        guard elapsed >= self.window else { return false }
        self.isOpen = true
        return true
    }
}
