/// The hosts ``TransferScheduler`` counts by (`scheme://host:port`), each under a small number
/// while it is in use: while a transfer of it is ready or running, or it has a cap. Its counts
/// are elements of arrays, and the scheduler's queues are keyed by the number, so that a start
/// or an end hashes no string.
///
/// Keyed by the host string, a small file's start, standby, admission and end looked its host
/// up about 25 times (the per-host counts, the cap, the queue of its host and owner), each a
/// hash of the whole string and a comparison: ~10 K instructions a file of the daemon's queue
/// (callgrind, 1,000 × 16 KiB). Now one add looks its host's string up once.
///
/// A number whose host is no longer in use goes back to be given again (``release(_:)``), so a
/// daemon that saw many hosts over its life does not keep a count for each.
struct SchedulerHosts: Sendable {
    private var numbers: [String: Int] = [:]
    /// Each number's host (`""`: the number is free).
    private(set) var names: [String] = []
    private var free: [Int] = []
    /// Per number: transfers running on the host (standby ones included).
    var running: [Int] = []
    /// Per number: standby transfers on the host.
    var standby: [Int] = []
    /// Per number: the host's cap (``TransferScheduler/capHost(_:excluding:now:)``), if it has one.
    var caps: [Int?] = []

    /// The number `host` has now, if it is in use.
    func number(of host: String) -> Int? { self.numbers[host] }

    /// The number of `host`, given it now when it has none.
    mutating func intern(_ host: String) -> Int {
        if let number = self.numbers[host] { return number }
        let number: Int
        if let reused = self.free.popLast() {
            number = reused
            self.names[number] = host
        } else {
            number = self.names.count
            self.names.append(host)
            self.running.append(0)
            self.standby.append(0)
            self.caps.append(nil)
        }
        self.numbers[host] = number
        return number
    }

    /// Whether `number` is given, no transfer of its host runs and it has no cap: then only the
    /// scheduler's ready queues can still need it.
    func isIdle(_ number: Int) -> Bool {
        self.running[number] == 0 && self.caps[number] == nil && !self.names[number].isEmpty
    }

    /// Frees `number` (``isIdle(_:)``, and nothing of its host is ready): given again to the next
    /// new host.
    mutating func release(_ number: Int) {
        self.numbers[self.names[number]] = nil
        self.names[number] = ""
        self.standby[number] = 0
        self.free.append(number)
    }

    /// How many numbers are given now (for tests).
    var inUse: Int { self.numbers.count }
}
