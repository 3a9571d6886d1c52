/// Who a durable transfer belongs to: a background session's task or a queue download.
public enum TransferOwnerKind: String, Sendable, Hashable, CaseIterable, Codable {
    /// A task of a background session (`TransferSession` with `.background(withIdentifier:)`).
    case session
    /// A download of the download manager's queue (`haul add`, the web UI).
    case queue

    /// Hashes the case, not its raw value (see ``QueuedDownloadState/hash(into:)``): every
    /// ``TransferID`` the scheduler looks up hashes its owner.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(self == .queue)
    }
}

/// One value for each ``TransferOwnerKind``: read and written at every start, end and
/// decision of the scheduler, without hashing or a dictionary's storage (there are two kinds).
private struct PerOwner<Value: Sendable>: Sendable {
    var session: Value
    var queue: Value

    init(_ value: Value) {
        self.session = value
        self.queue = value
    }

    subscript(owner: TransferOwnerKind) -> Value {
        get {
            switch owner {
            case .session: self.session
            case .queue: self.queue
            }
        }
        set {
            switch owner {
            case .session: self.session = newValue
            case .queue: self.queue = newValue
            }
        }
    }
}

/// A transfer as the scheduler names it: its owner and the owner's own id for it.
public struct TransferID: Sendable, Hashable, CustomStringConvertible {
    public var owner: TransferOwnerKind
    public var number: Int64

    public init(_ owner: TransferOwnerKind, _ number: Int64) {
        self.owner = owner
        self.number = number
    }

    public var description: String { "\(self.owner.rawValue)#\(self.number)" }
}

/// Decides which transfers of `hauld` run: one set of limits over every owner.
///
/// A value-type state machine with no I/O and no clock of its own: the daemon feeds it events
/// (a transfer became ready, was withdrawn, ended; the limits changed; time passed) and carries
/// out the actions it answers with, in order. Nothing here depends on how many transfers are
/// paused (the scheduler never sees them), and a decision looks at one queue head per host and
/// owner, so its cost does not grow with the number of waiting transfers either.
///
/// The rules:
/// - at most ``Limits/maximumConcurrent`` transfers run, and at most
///   ``Limits/maximumPerHost`` against one host, counting every owner;
/// - a non-discretionary transfer goes before a discretionary one, then higher priority first;
///   among equals, the owner with fewer running transfers goes first (a background session
///   cannot starve the queue, nor the reverse), then the oldest;
/// - a transfer with a `notBefore` (a retry delay) is not a candidate before that time, and the
///   scheduler asks to be woken then;
/// - a non-discretionary transfer that finds no slot makes a running discretionary one
///   yield (stop, keeping its bytes, and wait again);
/// - when a limit goes down, the lowest-ranked running transfers beyond it yield at once.
///
/// With a look-ahead (``Limits/lookAhead``), transfers that find no slot may start as
/// *standby*, up to that many in all and per host: their owners run them up to the point of
/// asking for a slot and they take one the moment one frees, where it frees, without waiting
/// for the next decision (``admitted(_:)`` says one has). Then:
/// - a transfer that finds a slot starts in it before any starts as standby (a standby
///   transfer never keeps one that could run now from starting: another host's, say);
/// - standby transfers count against the look-ahead, not the limits; shown, they are waiting;
/// - a ready transfer that finds neither makes the lowest-ranked standby transfer of its owner
///   ranked below it yield (its owner stops it before it fetched anything), so that starting
///   ahead never lets a lower-ranked transfer go first by more than the slot being handed over.
public struct TransferScheduler: Sendable {
    public struct Limits: Sendable, Hashable {
        public var maximumConcurrent: Int
        public var maximumPerHost: Int
        /// Transfers started ahead of a free slot (standby), in all and per host (0: none).
        public var lookAhead: Int

        public init(maximumConcurrent: Int, maximumPerHost: Int, lookAhead: Int = 0) {
            self.maximumConcurrent = max(1, maximumConcurrent)
            self.maximumPerHost = max(1, maximumPerHost)
            self.lookAhead = max(0, lookAhead)
        }
    }

    /// What the scheduler needs to know of one transfer.
    public struct Entry: Sendable, Hashable {
        public var id: TransferID
        /// `scheme://host:port`: the unit of the per-host limit.
        public var host: String
        public var priority: Int
        public var isDiscretionary: Bool
        /// The earliest start (a retry delay), in seconds on the caller's clock.
        public var notBefore: Double?
        /// Among equal priorities, lower goes first: the id (oldest first) unless the owner
        /// reordered its queue (aria2's `changePosition`).
        public var order: Double

        public init(
            id: TransferID,
            host: String,
            priority: Int = 0,
            isDiscretionary: Bool = false,
            notBefore: Double? = nil,
            order: Double? = nil
        ) {
            self.id = id
            self.host = host
            self.priority = priority
            self.order = order ?? Double(id.number)
            self.isDiscretionary = isDiscretionary
            self.notBefore = notBefore
        }
    }

    /// What the caller must do, in the order given.
    public enum Action: Sendable, Hashable {
        /// Start this transfer now. Its slot is taken until ``ended(_:now:)``.
        case start(TransferID)
        /// Stop this running transfer, keeping its bytes, and make it ready again once stopped
        /// (``ended(_:now:)`` then ``add(_:now:)``). Its slot is taken until then.
        case yield(TransferID)
        /// Stop this standby transfer as ``yield(_:)`` does if its run still waits for a slot;
        /// one that took a slot since (it may be fetching already) runs on, and its owner says
        /// so with ``yieldRefused(_:now:)``.
        case yieldIfWaiting(TransferID)
        /// Send ``timePassed(now:)`` at this time (replaces any earlier request).
        case wakeUp(at: Double)
    }

    /// A queue of ready transfers: one host (its number, ``SchedulerHosts``) and one owner.
    private struct QueueKey: Hashable {
        var host: Int
        var owner: TransferOwnerKind

        func hash(into hasher: inout Hasher) {
            hasher.combine(self.host << 1 | (self.owner == .queue ? 1 : 0))
        }
    }

    private struct Running {
        var entry: Entry
        /// The entry's host, by number (``SchedulerHosts``).
        var host: Int
        var isYielding = false
        /// Started without a slot, to wait for one (``Limits/lookAhead``); not admitted yet.
        var isStandby = false
    }

    private enum Location: Hashable {
        case ready(Entry)
        case delayed(Entry)
    }

    public private(set) var limits: Limits
    /// Ready entries per host and owner, sorted worst first: the best is `last`.
    private var ready: [QueueKey: [Entry]] = [:]
    /// Entries waiting for their `notBefore`, sorted by it: the next due is `first`.
    private var delayed: [Entry] = []
    private var location: [TransferID: Location] = [:]
    private var running: [TransferID: Running] = [:]
    /// The hosts in use, and per host the transfers running, standby, and the cap.
    private var hosts = SchedulerHosts()
    private var runningPerOwner = PerOwner(0)
    /// How many of `running` are discretionary: with none, nothing can yield to a blocked
    /// transfer, and a decision skips looking (it is made at every start and end).
    private var runningDiscretionary = 0
    /// How many of `running` are standby (in all and per host): with none, nothing started
    /// ahead can yield. The others hold the slots.
    private var standbyCount = 0
    private var requestedWakeUp: Double?
    private var isShutDown = false

    public init(limits: Limits) {
        self.limits = limits
    }

    // MARK: - Reading

    /// Transfers holding a slot (running, or yielding and not ended yet).
    public var runningCount: Int { self.running.count }
    /// Transfers waiting for a slot or for their retry time.
    public var waitingCount: Int { self.location.count }
    public func isRunning(_ id: TransferID) -> Bool { self.running[id] != nil }
    public func isWaiting(_ id: TransferID) -> Bool { self.location[id] != nil }
    public func runningCount(host: String) -> Int { self.hosts.number(of: host).map { self.hosts.running[$0] } ?? 0 }
    public var runningIDs: [TransferID] { Array(self.running.keys) }
    /// Whether `id` was started ahead and is not admitted yet.
    public func isStandby(_ id: TransferID) -> Bool { self.running[id]?.isStandby ?? false }
    /// Started transfers not admitted yet.
    public var standbyTotal: Int { self.standbyCount }
    /// The entry a running transfer was started from (its host, priority …).
    public func runningEntry(_ id: TransferID) -> Entry? { self.running[id]?.entry }
    /// Transfers ready to start on `host`, every owner's.
    public func readyCount(host: String) -> Int {
        guard let number = self.hosts.number(of: host) else { return 0 }
        return self.ready.reduce(0) { $0 + ($1.key.host == number ? $1.value.count : 0) }
    }
    /// The cap on `host` (``capHost(_:excluding:now:)``), if it has one.
    public func cap(host: String) -> Int? { self.hosts.number(of: host).flatMap { self.hosts.caps[$0] } }
    /// Hosts the scheduler keeps counts for now: those with a transfer ready or running, or a
    /// cap (for tests).
    public var hostsInUse: Int { self.hosts.inUse }

    // MARK: - Events

    /// `entry` is ready to run (new, resumed, retried, or back from yielding). Adding an entry
    /// that is already waiting replaces it; adding a running one is ignored.
    public mutating func add(_ entry: Entry, now: Double) -> [Action] {
        guard self.running[entry.id] == nil else { return [] }
        self.removeWaiting(entry.id)
        if let notBefore = entry.notBefore, notBefore > now {
            let index = self.delayed.partitioningIndex { ($0.notBefore ?? 0) > notBefore }
            self.delayed.insert(entry, at: index)
            self.location[entry.id] = .delayed(entry)
        } else {
            self.insertReady(entry)
        }
        return self.decide(now: now)
    }

    /// Up to this many entries added together to one queue are each inserted in place; more
    /// are appended and the queue sorted.
    static let fewToInsert = 16

    /// Many entries at once (a daemon's start, a batch resumed, a list read again): the same
    /// as adding each, but every queue is sorted once instead of shifted once per entry, and
    /// one decision is made — adding 100,000 costs a sort, not 100,000 insertions in the middle
    /// of an array. An entry already waiting unchanged stays where it is.
    public mutating func add(_ entries: [Entry], now: Double) -> [Action] {
        var replaced = Set<TransferID>()
        var fresh: [Entry] = []
        fresh.reserveCapacity(entries.count)
        var seen = Set<TransferID>()
        for entry in entries.reversed() where self.running[entry.id] == nil && seen.insert(entry.id).inserted {
            // The last one given for an id wins, as with one add after another.
            switch self.location[entry.id] {
            case .ready(let waiting)? where waiting == entry && !(entry.notBefore.map { $0 > now } ?? false):
                continue
            case .delayed(let waiting)? where waiting == entry:
                continue
            case nil:
                break
            default:
                replaced.insert(entry.id)
            }
            fresh.append(entry)
        }
        self.removeWaiting(replaced)
        var added: [QueueKey: [Entry]] = [:]
        var delayedAdded = false
        for entry in fresh {
            if let notBefore = entry.notBefore, notBefore > now {
                self.delayed.append(entry)
                self.location[entry.id] = .delayed(entry)
                delayedAdded = true
            } else {
                added[QueueKey(host: self.hosts.intern(entry.host), owner: entry.id.owner), default: []].append(entry)
            }
        }
        for (key, entries) in added {
            // A few into a long queue (a fleet's alternatives handed back, a few rows read
            // again) are each put in place; many are appended and the queue sorted once.
            guard entries.count > Self.fewToInsert else {
                for entry in entries { self.insertReady(entry) }
                continue
            }
            var queue = self.ready.removeValue(forKey: key) ?? []
            queue.append(contentsOf: entries)
            for entry in entries { self.location[entry.id] = .ready(entry) }
            queue.sort { Self.isWorse($0, than: $1) }
            self.ready[key] = queue
        }
        if delayedAdded { self.delayed.sort { ($0.notBefore ?? 0) < ($1.notBefore ?? 0) } }
        return self.decide(now: now)
    }

    /// Many waiting transfers no longer want a slot: one pass over each queue, one decision.
    public mutating func withdraw(_ ids: [TransferID], now: Double) -> [Action] {
        let removed = ids.filter { self.location[$0] != nil }
        guard !removed.isEmpty else { return [] }
        self.removeWaiting(Set(removed))
        return self.decide(now: now)
    }

    /// The waiting transfer `id` no longer wants a slot (paused, cancelled, removed).
    public mutating func withdraw(_ id: TransferID, now: Double) -> [Action] {
        guard self.removeWaiting(id) else { return [] }
        return self.decide(now: now)
    }

    /// The transfer `id` that was started has ended (finished, failed, stopped), or its owner
    /// could not start it after all: its slot is free.
    public mutating func ended(_ id: TransferID, now: Double) -> [Action] {
        guard let finished = self.running.removeValue(forKey: id) else { return [] }
        self.hosts.running[finished.host] -= 1
        self.runningPerOwner[id.owner] -= 1
        if finished.entry.isDiscretionary { self.runningDiscretionary -= 1 }
        if finished.isStandby { self.leaveStandby(finished.host) }
        let actions = self.decide(now: now)
        self.releaseIfUnused(finished.host)
        return actions
    }

    /// The standby transfer `id` has a slot now (its owner's run took one as a transfer ended):
    /// it counts against the limits from now on. Nothing to do, so no actions (the end that freed
    /// the slot decided already); an id that is not standby (ended meanwhile, or started in a
    /// slot) is ignored.
    ///
    /// Until this is heard, a transfer started in the slot it freed counts as holding it too,
    /// while its run waits at the owner's gate: the slots look fuller than they are, for a
    /// moment, never emptier.
    public mutating func admitted(_ id: TransferID) {
        guard let running = self.running[id], running.isStandby else { return }
        self.running[id]!.isStandby = false
        self.leaveStandby(running.host)
    }

    /// The standby transfer `id` asked to yield (``Action/yieldIfWaiting(_:)``) had a slot by
    /// then: it holds it (as ``admitted(_:)`` says, whichever of the two is heard first) and
    /// yields nothing; the heads it was to serve are decided anew.
    public mutating func yieldRefused(_ id: TransferID, now: Double) -> [Action] {
        guard let running = self.running[id], running.isYielding else { return [] }
        self.running[id]!.isYielding = false
        self.admitted(id)
        return self.decide(now: now)
    }

    private mutating func leaveStandby(_ host: Int) {
        self.standbyCount -= 1
        self.hosts.standby[host] -= 1
    }

    /// Frees the number of `host` when nothing counts on it any more (``SchedulerHosts``).
    private mutating func releaseIfUnused(_ host: Int) {
        guard self.hosts.isIdle(host), self.ready[QueueKey(host: host, owner: .queue)] == nil,
            self.ready[QueueKey(host: host, owner: .session)] == nil
        else { return }
        self.hosts.release(host)
    }

    /// Transfers holding a slot, in all and on `host` (by number).
    private var slotsHeld: Int { self.running.count - self.standbyCount }
    private func slotsHeld(on host: Int) -> Int { self.hosts.running[host] - self.hosts.standby[host] }
    private func slotsHeld(on host: String) -> Int { self.hosts.number(of: host).map { self.slotsHeld(on: $0) } ?? 0 }

    /// Takes up to `limit` of `owner`'s ready transfers on `host` out of the ready queue, best
    /// first, for its owner to offer as alternatives to the one it is starting: a fleet's daemon
    /// that finds that one taken by another daemon claims the first of these still free in the
    /// same request (``replace(running:with:)``) instead of asking again for each. While taken
    /// out, no decision starts them; the owner adds back those it did not start (``add(_:now:)``).
    /// No decision follows (nothing changed that frees or fills a slot).
    public mutating func takeReady(host: String, owner: TransferOwnerKind, limit: Int) -> [Entry] {
        guard let number = self.hosts.number(of: host) else { return [] }
        let key = QueueKey(host: number, owner: owner)
        // Out of the dictionary while changed: the only reference, so no copy of the queue.
        guard limit > 0, var entries = self.ready.removeValue(forKey: key) else { return [] }
        let taken = Array(entries.suffix(limit).reversed())
        entries.removeLast(taken.count)
        if !entries.isEmpty { self.ready[key] = entries }
        for entry in taken { self.location[entry.id] = nil }
        self.releaseIfUnused(number)
        return taken
    }

    /// The slot of running transfer `old` goes to `entry` of the same host and owner, which its
    /// owner started in its place (``takeReady(host:owner:limit:)``): `old` is no longer
    /// running (nor waiting), `entry` runs, with `old`'s standby state; no slot is freed or
    /// filled, so no decision follows. `false` (nothing changed) when `old` is not running, when
    /// `entry` runs already, or is of another host or owner.
    @discardableResult
    public mutating func replace(running old: TransferID, with entry: Entry) -> Bool {
        guard let running = self.running[old], self.running[entry.id] == nil,
            entry.host == running.entry.host, entry.id.owner == old.owner
        else { return false }
        self.removeWaiting(entry.id)
        self.running[old] = nil
        self.running[entry.id] = Running(entry: entry, host: running.host, isYielding: running.isYielding, isStandby: running.isStandby)
        if running.entry.isDiscretionary != entry.isDiscretionary { self.runningDiscretionary += entry.isDiscretionary ? 1 : -1 }
        return true
    }

    /// New limits: raising one starts what now fits, lowering one yields what no longer does.
    public mutating func setLimits(_ limits: Limits, now: Double) -> [Action] {
        self.limits = limits
        var actions = self.yieldBeyondLimits()
        actions += self.decide(now: now)
        return actions
    }

    /// No more transfers start on `host` than hold a slot on it now, not counting `id` (which
    /// is about to end): room for more was refused elsewhere (a fleet's budget for the host is
    /// spent by other daemons). One of them ending lets one more start (it gave room back);
    /// ``raiseHostCap(_:now:)`` lets one more, ``uncapHost(_:now:)`` lifts the cap. No actions:
    /// nothing new can start.
    public mutating func capHost(_ host: String, excluding id: TransferID?, now: Double) -> [Action] {
        let number = self.hosts.intern(host)
        var held = self.slotsHeld(on: number)
        if let id, let running = self.running[id], running.host == number, !running.isStandby { held -= 1 }
        self.hosts.caps[number] = max(0, held)
        return []
    }

    /// `host` may have room again (another daemon gave some back, or the owner's wait ran out):
    /// its transfers start up to the limits.
    public mutating func uncapHost(_ host: String, now: Double) -> [Action] {
        guard let number = self.hosts.number(of: host), self.hosts.caps[number] != nil else { return [] }
        self.hosts.caps[number] = nil
        let actions = self.decide(now: now)
        self.releaseIfUnused(number)
        return actions
    }

    /// A capped `host` has room for `count` more transfers (other daemons gave connections
    /// back): its cap rises by as many. No change for a host without a cap.
    public mutating func raiseHostCap(_ host: String, by count: Int = 1, now: Double) -> [Action] {
        guard let number = self.hosts.number(of: host), let cap = self.hosts.caps[number], count > 0 else { return [] }
        self.hosts.caps[number] = min(cap + count, self.limits.maximumPerHost)
        return self.decide(now: now)
    }

    /// At most this many transfers hold a slot on `host` at once.
    private func hostLimit(_ host: Int) -> Int {
        min(self.limits.maximumPerHost, self.hosts.caps[host] ?? .max)
    }

    /// The clock reached `now` (the wake-up asked for, or later).
    public mutating func timePassed(now: Double) -> [Action] {
        self.requestedWakeUp = nil
        return self.decide(now: now)
    }

    /// No transfer starts from now on (the daemon is stopping); running ones still end.
    public mutating func shutDown() {
        self.isShutDown = true
    }

    // MARK: - Deciding

    private mutating func decide(now: Double) -> [Action] {
        var actions: [Action] = []
        // Due retries become ready.
        while let first = self.delayed.first, (first.notBefore ?? 0) <= now {
            self.delayed.removeFirst()
            self.insertReady(first)
        }
        guard !self.isShutDown else { return actions }
        // First whatever finds a slot, then standby places for the best of the rest.
        while self.slotsHeld < self.limits.maximumConcurrent,
            let key = self.bestCandidate(where: { self.slotsHeld(on: $0) < self.hostLimit($0) })
        {
            actions.append(.start(self.start(key, standby: false)))
        }
        while self.standbyCount < self.limits.lookAhead,
            let key = self.bestCandidate(where: { self.hosts.standby[$0] < self.limits.lookAhead })
        {
            actions.append(.start(self.start(key, standby: true)))
        }
        actions += self.yieldStandbyForBlocked()
        actions += self.yieldDiscretionaryForBlocked()
        if let next = self.delayed.first?.notBefore, next != self.requestedWakeUp {
            self.requestedWakeUp = next
            actions.append(.wakeUp(at: next))
        }
        return actions
    }

    /// Starts the head of `key`'s queue; its id.
    private mutating func start(_ key: QueueKey, standby: Bool) -> TransferID {
        let entry = self.ready[key]!.removeLast()
        if self.ready[key]!.isEmpty { self.ready[key] = nil }
        self.location[entry.id] = nil
        self.running[entry.id] = Running(entry: entry, host: key.host, isStandby: standby)
        if standby {
            self.standbyCount += 1
            self.hosts.standby[key.host] += 1
        }
        self.hosts.running[key.host] += 1
        self.runningPerOwner[entry.id.owner] += 1
        if entry.isDiscretionary { self.runningDiscretionary += 1 }
        return entry.id
    }

    /// The queue whose head should start next, among hosts `hasRoom` accepts.
    private func bestCandidate(where hasRoom: (Int) -> Bool) -> QueueKey? {
        var best: (key: QueueKey, entry: Entry)?
        for (key, entries) in self.ready where hasRoom(key.host) {
            guard let head = entries.last else { continue }
            if let current = best, !self.startsBefore(head, current.entry) { continue }
            best = (key, head)
        }
        return best?.key
    }

    /// Whether `a` should start before `b` (different queues).
    private func startsBefore(_ a: Entry, _ b: Entry) -> Bool {
        if a.isDiscretionary != b.isDiscretionary { return !a.isDiscretionary }
        if a.priority != b.priority { return a.priority > b.priority }
        let runningA = self.runningPerOwner[a.id.owner]
        let runningB = self.runningPerOwner[b.id.owner]
        if runningA != runningB { return runningA < runningB }
        if a.order != b.order { return a.order < b.order }
        if a.id.number != b.id.number { return a.id.number < b.id.number }
        return a.id.owner.rawValue < b.id.owner.rawValue
    }

    /// Whether `a` ranks below `b` by what they are (discretion, priority, order, id), not by
    /// who runs what now: the order within one queue (one owner, one host), worse first, so the
    /// best is last; and the order in which transfers started ahead are admitted.
    public static func isWorse(_ a: Entry, than b: Entry) -> Bool {
        if a.isDiscretionary != b.isDiscretionary { return a.isDiscretionary }
        if a.priority != b.priority { return a.priority < b.priority }
        if a.order != b.order { return a.order > b.order }
        return a.id.number > b.id.number
    }

    /// Ready heads that found no slot take one from a standby transfer of their owner ranked
    /// below them each (the lowest-ranked; on their host when the host is what blocks them).
    /// A standby transfer yielding already serves one head.
    private mutating func yieldStandbyForBlocked() -> [Action] {
        guard self.standbyCount > 0 else { return [] }
        // Only a head ranked above its owner's lowest-ranked standby transfer can take a place:
        // in a queue worked through in order there is none, and nothing is sorted.
        // Looked at after every start and end: no dictionary, no array until a head is blocked.
        var lowest = PerOwner<Entry?>(nil)
        for running in self.running.values where running.isStandby && !running.isYielding {
            let owner = running.entry.id.owner
            if let current = lowest[owner], !Self.isWorse(running.entry, than: current) { continue }
            lowest[owner] = running.entry
        }
        guard lowest.session != nil || lowest.queue != nil else { return [] }
        var blocked: [Entry] = []
        for entries in self.ready.values {
            guard let head = entries.last, let standby = lowest[head.id.owner], Self.isWorse(standby, than: head) else { continue }
            blocked.append(head)
        }
        guard !blocked.isEmpty else { return [] }
        blocked.sort { Self.isWorse($1, than: $0) }  // best first
        let (hosts, lookAhead) = (self.hosts, self.limits.lookAhead)
        return self.yield(
            for: blocked,
            alreadyServing: { $0.isStandby },
            hostFull: { hosts.number(of: $0.host).map { hosts.standby[$0] >= lookAhead } ?? false },
            victims: { candidate, head in
                candidate.isStandby && candidate.entry.id.owner == head.id.owner && Self.isWorse(candidate.entry, than: head)
            }
        )
    }

    /// Non-discretionary transfers that found no slot take one from a running discretionary
    /// transfer each (on their host when the host is what blocks them): ready heads, and
    /// transfers started ahead that wait for a slot (standby). The one that yields holds a slot
    /// (it is admitted).
    private mutating func yieldDiscretionaryForBlocked() -> [Action] {
        guard self.runningDiscretionary > 0 else { return [] }
        var blocked: [Entry] = []
        for entries in self.ready.values {
            guard let head = entries.last, !head.isDiscretionary else { continue }
            blocked.append(head)
        }
        if self.standbyCount > 0 {
            // A standby one is blocked when the slots it needs are all held (as far as the
            // scheduler heard: one about to be admitted is not).
            blocked += self.running.values
                .filter {
                    $0.isStandby && !$0.isYielding && !$0.entry.isDiscretionary
                        && (self.slotsHeld >= self.limits.maximumConcurrent || self.slotsHeld(on: $0.host) >= self.limits.maximumPerHost)
                }
                .map(\.entry)
        }
        guard !blocked.isEmpty else { return [] }
        let slotsHeld = Dictionary(uniqueKeysWithValues: Set(blocked.map(\.host)).map { ($0, self.slotsHeld(on: $0)) })
        let perHost = self.limits.maximumPerHost
        return self.yield(
            // A standby transfer yielding serves a head too (``yieldStandbyForBlocked()``).
            for: blocked,
            alreadyServing: { $0.entry.isDiscretionary || $0.isStandby },
            hostFull: { slotsHeld[$0.host, default: 0] >= perHost },
            victims: { candidate, _ in candidate.entry.isDiscretionary && !candidate.isStandby }
        )
    }

    /// Each of `blocked` (in the order given) makes one running transfer yield: the lowest-ranked
    /// that `victims` accepts for it and is not yielding already, on its host when `hostFull`
    /// says the host is what blocks it. A transfer yielding already that `alreadyServing`
    /// counts serves one head instead (it was asked for by an earlier decision).
    private mutating func yield(
        for blocked: [Entry],
        alreadyServing: (Running) -> Bool,
        hostFull: (Entry) -> Bool,
        victims: (Running, Entry) -> Bool
    ) -> [Action] {
        var alreadyYielding = self.running.values.filter { $0.isYielding && alreadyServing($0) }.count
        var actions: [Action] = []
        for head in blocked {
            if alreadyYielding > 0 {
                alreadyYielding -= 1
                continue
            }
            let onHost = hostFull(head)
            let victim = self.running.values
                .filter { !$0.isYielding && (!onHost || $0.entry.host == head.host) && victims($0, head) }
                .map(\.entry)
                .min { Self.isWorse($0, than: $1) }
            guard let victim else { continue }
            self.running[victim.id]!.isYielding = true
            actions.append(self.running[victim.id]!.isStandby ? .yieldIfWaiting(victim.id) : .yield(victim.id))
        }
        return actions
    }

    /// After a limit went down: the lowest-ranked running transfers beyond it yield; those
    /// holding slots against the limits, standby ones against the look-ahead.
    private mutating func yieldBeyondLimits() -> [Action] {
        let ordered = self.running.values.filter { !$0.isYielding }
            .sorted { Self.isWorse($1.entry, than: $0.entry) }  // best first
        var kept = 0
        var perHost: [String: Int] = [:]
        var actions: [Action] = []
        for running in ordered where !running.isStandby {
            let entry = running.entry
            if kept < self.limits.maximumConcurrent, perHost[entry.host, default: 0] < self.limits.maximumPerHost {
                kept += 1
                perHost[entry.host, default: 0] += 1
            } else {
                self.running[entry.id]!.isYielding = true
                actions.append(.yield(entry.id))
            }
        }
        var standbyKept = 0
        var standbyPerHost: [String: Int] = [:]
        for running in ordered where running.isStandby {
            let entry = running.entry
            if standbyKept < self.limits.lookAhead, standbyPerHost[entry.host, default: 0] < self.limits.lookAhead {
                standbyKept += 1
                standbyPerHost[entry.host, default: 0] += 1
            } else {
                self.running[entry.id]!.isYielding = true
                actions.append(.yieldIfWaiting(entry.id))
            }
        }
        return actions
    }

    // MARK: - Waiting entries

    private mutating func insertReady(_ entry: Entry) {
        let key = QueueKey(host: self.hosts.intern(entry.host), owner: entry.id.owner)
        var entries = self.ready[key] ?? []
        self.ready[key] = nil  // unique while mutated: no copy of the array
        let index = entries.partitioningIndex { !Self.isWorse($0, than: entry) }
        entries.insert(entry, at: index)
        self.ready[key] = entries
        self.location[entry.id] = .ready(entry)
    }

    /// Removes many waiting entries: each affected queue is filtered once.
    private mutating func removeWaiting(_ ids: Set<TransferID>) {
        guard !ids.isEmpty else { return }
        if ids.count < 8 {
            for id in ids { self.removeWaiting(id) }
            return
        }
        var keys = Set<QueueKey>()
        var anyDelayed = false
        for id in ids {
            switch self.location.removeValue(forKey: id) {
            case .ready(let entry)?:
                // A ready entry's host has its number (until its last queue empties below).
                if let number = self.hosts.number(of: entry.host) { keys.insert(QueueKey(host: number, owner: entry.id.owner)) }
            case .delayed?: anyDelayed = true
            case nil: break
            }
        }
        for key in keys {
            guard var queue = self.ready.removeValue(forKey: key) else { continue }
            queue.removeAll { ids.contains($0.id) }
            if !queue.isEmpty { self.ready[key] = queue }
            self.releaseIfUnused(key.host)
        }
        if anyDelayed { self.delayed.removeAll { ids.contains($0.id) } }
    }

    @discardableResult
    private mutating func removeWaiting(_ id: TransferID) -> Bool {
        guard let place = self.location.removeValue(forKey: id) else { return false }
        switch place {
        case .delayed(let entry):
            // Binary search to the first entry due at the same time, then the few alike.
            var index = self.delayed.partitioningIndex { ($0.notBefore ?? 0) >= (entry.notBefore ?? 0) }
            while index < self.delayed.count, self.delayed[index].id != id { index += 1 }
            if index < self.delayed.count { self.delayed.remove(at: index) }
        case .ready(let entry):
            // Ranks are unique within a queue (the id breaks ties): binary search finds it.
            guard let number = self.hosts.number(of: entry.host) else { return true }
            let key = QueueKey(host: number, owner: entry.id.owner)
            guard var entries = self.ready[key] else { return true }
            self.ready[key] = nil
            let index = entries.partitioningIndex { !Self.isWorse($0, than: entry) }
            if index < entries.count, entries[index].id == id { entries.remove(at: index) }
            if !entries.isEmpty { self.ready[key] = entries }
            self.releaseIfUnused(number)
        }
        return true
    }
}

extension Array {
    /// The first index whose element satisfies `belongsInSecondPart`, for an array partitioned
    /// by it (binary search).
    func partitioningIndex(where belongsInSecondPart: (Element) -> Bool) -> Int {
        var low = 0
        var high = self.count
        while low < high {
            let middle = (low + high) / 2
            if belongsInSecondPart(self[middle]) { high = middle } else { low = middle + 1 }
        }
        return low
    }
}
