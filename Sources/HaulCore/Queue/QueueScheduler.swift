/// Decides which waiting downloads start: the pure part of the download manager's scheduling.
///
/// Higher priority first, then the oldest; at most `maximumConcurrentDownloads` active in all
/// and `maximumConnectionsPerHost` active per host. A download whose retry delay has not run
/// out is not a candidate.
public enum QueueScheduler {
    /// What the scheduler needs to know of one download.
    public struct Entry: Sendable, Hashable {
        public var id: Int64
        public var host: String
        public var priority: Int
        /// Seconds since some fixed instant; the earliest the download may start.
        public var notBefore: Double?

        public init(id: Int64, host: String, priority: Int, notBefore: Double? = nil) {
            self.id = id
            self.host = host
            self.priority = priority
            self.notBefore = notBefore
        }
    }

    /// The ids of `waiting` downloads to start now, in start order.
    ///
    /// - Parameters:
    ///   - waiting: downloads in the `waiting` state.
    ///   - active: downloads transferring now.
    ///   - now: the current time on the clock of `notBefore`.
    public static func downloadsToStart(
        waiting: [Entry],
        active: [Entry],
        settings: QueueSettings,
        now: Double
    ) -> [Int64] {
        var free = settings.maximumConcurrentDownloads - active.count
        guard free > 0 else { return [] }
        var perHost: [String: Int] = [:]
        for entry in active { perHost[entry.host, default: 0] += 1 }
        let ordered = waiting
            .filter { ($0.notBefore ?? -Double.infinity) <= now }
            .sorted { ($0.priority, -$0.id) > ($1.priority, -$1.id) }
        var chosen: [Int64] = []
        for entry in ordered where free > 0 {
            guard perHost[entry.host, default: 0] < settings.maximumConnectionsPerHost else { continue }
            perHost[entry.host, default: 0] += 1
            free -= 1
            chosen.append(entry.id)
        }
        return chosen
    }

    /// The earliest future `notBefore` among `waiting`, when the scheduler should look again.
    public static func nextWakeUp(waiting: [Entry], now: Double) -> Double? {
        waiting.compactMap(\.notBefore).filter { $0 > now }.min()
    }
}
