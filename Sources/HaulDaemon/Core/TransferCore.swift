import Foundation
import HaulCore
import HaulEngine
import Logging
import NIOCore
import NIOPosix
import Synchronization

/// hauld's one transfer core: one ``TransferEngine`` (one connection pool), one
/// ``TransferScheduler`` with one set of limits, one global speed limit, one wake-up timer and
/// one shutdown path, for every owner of durable transfers (background sessions and the queue).
///
/// Owners tell the core what is ready (``enqueue(_:)``), what no longer is (``withdraw(_:)``)
/// and what ended (``ended(_:)``); the core decides on its serial queue and calls the owners
/// back (``TransferOwner/startTransfers(_:)``, ``TransferOwner/yieldTransfer(_:)``) in the order
/// decided. An owner that frees slots on its own serial queue may decide there at once
/// (``endedAndReady(_:_:startingFor:)``) and start its own transfers without a hop.
public final class TransferCore: Sendable {
    public struct Configuration: Sendable {
        /// Idle timeout of one request.
        public var idleTimeout: Duration = .seconds(60)
        /// Checkpoint and progress cadence of every transfer.
        public var cadence = Cadence()

        public init() {}
    }

    /// How often a running transfer records a checkpoint and reports progress.
    public struct Cadence: Sendable {
        /// A checkpoint after at most this many new bytes…
        public var checkpointBytes: Int64 = 4 << 20
        /// …or this many seconds, whichever comes first.
        public var checkpointInterval: Double = 0.5
        /// Live progress at least this many seconds apart per transfer.
        public var progressInterval: Double = 0.25

        public init() {}
    }

    /// The limits every owner shares.
    public struct Limits: Sendable, Hashable {
        public var maximumConcurrent: Int
        public var maximumPerHost: Int
        /// Bytes per second over all transfers; 0 is unlimited.
        public var globalSpeedLimit: Int64
        /// Transfers started ahead of a free slot, in all and per host
        /// (``TransferScheduler/Limits/lookAhead``): each waits in its run for a slot
        /// (``RunGate``) and takes it on the loop where it frees. 0: none. Only for owners
        /// whose starts ahead are private: a fleet's claims are visible to every daemon.
        public var lookAhead: Int = 0

        public init(maximumConcurrent: Int, maximumPerHost: Int, globalSpeedLimit: Int64, lookAhead: Int = 0) {
            self.maximumConcurrent = maximumConcurrent
            self.maximumPerHost = maximumPerHost
            self.globalSpeedLimit = globalSpeedLimit
            self.lookAhead = lookAhead
        }

        public init(_ settings: QueueSettings) {
            self.init(
                maximumConcurrent: settings.maximumConcurrentDownloads,
                maximumPerHost: settings.maximumConnectionsPerHost,
                globalSpeedLimit: settings.globalSpeedLimit
            )
        }

        var scheduler: TransferScheduler.Limits {
            .init(maximumConcurrent: self.maximumConcurrent, maximumPerHost: self.maximumPerHost, lookAhead: self.lookAhead)
        }

        var gate: RunGate.Limits {
            .init(maximumConcurrent: self.scheduler.maximumConcurrent, maximumPerHost: self.scheduler.maximumPerHost)
        }
    }

    private struct WeakOwner {
        weak var owner: (any TransferOwner)?
    }

    private struct State {
        var scheduler: TransferScheduler
        var owners: [TransferOwnerKind: WeakOwner] = [:]
        /// Bumped for every wake-up asked for: an older timer that fires finds it changed.
        var wakeUpGeneration = 0
        /// Bumped for every cap of a host (``capHost(_:excluding:)``): an older lift finds it changed.
        var hostCapGenerations: [String: Int] = [:]
        var idleWaiters: [CheckedContinuation<Void, Never>] = []
    }

    /// The engine of every transfer whose body is small, and of background sessions: its loop
    /// is "the transfer loop" (``transferLoop``).
    let engine: TransferEngine
    /// ``engine`` and one more per further core of the shared event loop group (at most
    /// ``maximumLoops`` in all), sharing its per-host connection count: queued downloads with
    /// large bodies are spread over them (``LoopSpread``).
    let engines: [TransferEngine]
    /// The most loops transfers are spread over. Each keeps connections of its own (the census
    /// closes one loop's idle connection when another needs one beyond the host's limit): over
    /// many loops a host's runs would find none of their own loop's idle and reconnect for each
    /// file. Four copy a few GB/s of bodies, more than a disk takes.
    static let maximumLoops = 4
    /// Which engine each queued download's run goes to.
    private let spread = Mutex(LoopSpread())
    /// When (monotonic nanoseconds) a run last went to an engine other than ``engine``; 0: never.
    private let lastSpreadAt = Atomic<UInt64>(0)
    private let spreadRuns = Atomic<Int>(0)
    /// The loop the daemon's servers answer on (its socket, the web UI, the aria2 RPC): one the
    /// engine's transfers do not run on when the shared group has another, so that decoding a
    /// large `queueAdd` or encoding a list for a polling page never holds up a transfer's reads
    /// and writes (every transfer of a small body is on ``engine``'s loop; those of large bodies
    /// spread over ``engines``, whose loops include this one on a machine of two cores).
    let serviceLoop: any EventLoop
    /// Where the engine's loop runs, for owners to keep their bookkeeping threads off that CPU.
    let transferLoop = TransferLoopCPU()
    /// The global speed limit: every transfer of every owner passes it.
    let globalLimiter: BandwidthLimiter
    /// Where every run takes its slot, with a look-ahead (standby ones wait there for one).
    let gate: RunGate
    let configuration: Configuration
    let logger: Logger
    private let state: Mutex<State>
    /// Transfers whose runs took their slots at the gate since the last decision: heard on the
    /// run's event loop, told to the scheduler at the start of the next decision. A lock of its
    /// own, so that the loop never waits for a decision in progress (which holds `state`); until
    /// then the scheduler counts such a transfer as standby *and* its slot as taken, so the slots
    /// look fuller for a moment, never emptier (``TransferScheduler/admitted(_:)``).
    private let admissions = Mutex<[TransferID]>([])
    /// Every decision, and every call to an owner, happens here, in order.
    private let decisions = DispatchQueue(label: "hauld.scheduler")

    public init(limits: Limits, configuration: Configuration = Configuration(), logger: Logger) {
        self.configuration = configuration
        self.logger = logger
        var engineConfiguration = TransferEngine.Configuration()
        engineConfiguration.idleTimeout = configuration.idleTimeout
        // The daemon's environment decides proxies (http_proxy, https_proxy, no_proxy).
        engineConfiguration.proxies = ProxySettings.fromEnvironment(ProcessInfo.processInfo.environment)
        engineConfiguration.maximumConnectionsPerHost = limits.maximumPerHost
        // The pool may hold as many connections per host as the highest setting allows; the
        // scheduler and the engine's host limiter decide how many are used.
        engineConfiguration.connectionPoolSoftLimitPerHost = 64
        // No client of the daemon is shown per-exchange timings.
        engineConfiguration.recordsMetrics = false
        // Plain-HTTP downloads skip AsyncHTTPClient's request path (small files cost a third
        // fewer instructions).
        engineConfiguration.usesDirectHTTP1 = true
        // One loop carries every transfer: while creating files is slow, they are created on the
        // write threads, two at a time, not on the loop (1,000 × 16 KiB into a fresh ext4
        // directory: the loop had spent two thirds of its time creating files).
        engineConfiguration.offloadsSlowFileCreation = true
        // One count of connections per host for every engine (and one census of those they
        // keep open: together, never more than the limit).
        let limiter = HostConnectionLimiter(limit: limits.maximumPerHost)
        self.engines = (0..<max(1, min(System.coreCount, Self.maximumLoops))).map { _ in
            TransferEngine(configuration: engineConfiguration, sharingLimiter: limiter)
        }
        self.engine = self.engines[0]
        let engineLoop = self.engine.eventLoop
        self.serviceLoop = MultiThreadedEventLoopGroup.singleton.makeIterator().first { $0 !== engineLoop } ?? engineLoop
        self.globalLimiter = BandwidthLimiter(bytesPerSecond: limits.globalSpeedLimit)
        self.gate = RunGate(limits: limits.gate)
        self.state = Mutex(State(scheduler: TransferScheduler(limits: limits.scheduler)))
    }

    /// Seconds on the clock of the scheduler's `notBefore` (wall time: retry times are stored).
    static func now() -> Double { Date().timeIntervalSinceReferenceDate }

    /// Seconds on a monotonic clock, for cadences and speed.
    static func monotonicNow() -> Double {
        let elapsed = ContinuousClock.now - Self.origin
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
    }

    private static let origin = ContinuousClock.now

    // MARK: - Owners

    /// Makes `owner` the one that runs transfers of `kind`.
    func register(_ owner: any TransferOwner, for kind: TransferOwnerKind) {
        self.state.withLock { $0.owners[kind] = WeakOwner(owner: owner) }
    }

    /// `entry` is ready to run (or to run after its `notBefore`).
    func enqueue(_ entry: TransferScheduler.Entry) {
        self.decide { $0.add(entry, now: $1) }
    }

    /// Many entries at once (a daemon start, a batch add): one decision.
    func enqueue(_ entries: [TransferScheduler.Entry]) {
        guard !entries.isEmpty else { return }
        self.decide { scheduler, now in scheduler.add(entries, now: now) }
    }

    /// Many waiting transfers no longer want to run: one decision.
    func withdraw(_ ids: [TransferID]) {
        guard !ids.isEmpty else { return }
        self.decide { scheduler, now in scheduler.withdraw(ids, now: now) }
    }

    /// The waiting transfer `id` no longer wants to run.
    func withdraw(_ id: TransferID) {
        self.decide { $0.withdraw(id, now: $1) }
    }

    /// A transfer the core started has ended (or could not start): its slot is free.
    func ended(_ id: TransferID) {
        self.decide { $0.ended(id, now: $1) }
    }

    /// The standby transfer `id`, asked to yield if its run still waited for a slot, had one
    /// already: it runs on (``TransferScheduler/yieldRefused(_:now:)``).
    func yieldRefused(_ id: TransferID) {
        self.decide { $0.yieldRefused(id, now: $1) }
    }

    /// Many transfers ended (an owner handled their ends together): one decision.
    func ended(_ ids: [TransferID]) {
        guard !ids.isEmpty else { return }
        self.decide { scheduler, now in ids.flatMap { scheduler.ended($0, now: now) } }
    }

    /// `ended` freed their slots and `ready` wait for one: one decision, made now on the
    /// caller's thread (in order with every other decision), whose starts of `owner`'s own
    /// transfers are returned for the caller to start at once instead of being sent to its
    /// queue. Every other action goes out as ``decide(_:)``'s do.
    ///
    /// For an owner on its own serial queue: a slot that frees refills without two thread hops
    /// (to the decision queue and back), which bound a queue of small files more than their
    /// bytes did. Must not be called from the decision queue.
    func endedAndReady(_ ended: [TransferID], _ ready: [TransferScheduler.Entry], startingFor owner: TransferOwnerKind) -> [TransferScheduler.Entry] {
        guard !ended.isEmpty || !ready.isEmpty else { return [] }
        dispatchPrecondition(condition: .notOnQueue(self.decisions))
        return self.decisions.sync {
            self.run(
                { scheduler, now in
                    var actions = ended.flatMap { scheduler.ended($0, now: now) }
                    if !ready.isEmpty { actions += scheduler.add(ready, now: now) }
                    return actions
                },
                keepingStartsOf: owner
            )
        }
    }

    /// How long a host stays capped when nothing says it has room again
    /// (``capHost(_:excluding:)``).
    static let hostCapSeconds = 1.0

    /// No more transfers start on `host` than hold a slot on it now, not counting `id`, which
    /// found no room (``TransferScheduler/capHost(_:excluding:now:)``): a fleet's connections to
    /// the host are all held, by other daemons. One of this daemon's transfers on the host
    /// ending lets one more start, and so does one of another daemon's (``raiseHostCap(_:)``);
    /// a second without news lifts the cap. Instead of each waiting download asking the
    /// store again every second (a claim each, all of them in turn: 1,000 waiting were 1,000
    /// claims a second), one asks when room may have come back.
    func capHost(_ host: String, excluding id: TransferID?) {
        let generation = self.state.withLock { state in
            state.hostCapGenerations[host, default: 0] += 1
            return state.hostCapGenerations[host]!
        }
        self.decide { $0.capHost(host, excluding: id, now: $1) }
        self.decisions.asyncAfter(deadline: .now() + Self.hostCapSeconds) {
            guard self.state.withLock({ $0.hostCapGenerations[host] == generation }) else { return }
            _ = self.run({ $0.uncapHost(host, now: $1) }, keepingStartsOf: nil)
        }
    }

    /// A capped `host` has room for `count` more transfers (other daemons' downloads of it
    /// stopped running): as many more may start, a claim each, where lifting the cap would send
    /// as many as the limits allow to find the room taken.
    func raiseHostCap(_ host: String, by count: Int = 1) {
        self.decide { $0.raiseHostCap(host, by: count, now: $1) }
    }

    /// Up to `limit` of `owner`'s transfers ready on `host`, best first, taken out of the
    /// scheduler's queue while `owner` offers them as alternatives to the transfer it is
    /// starting (``TransferScheduler/takeReady(host:owner:limit:)``); it hands them back with
    /// ``startedInstead(of:_:returning:)``. Must not be called from the decision queue.
    func takeReady(host: String, owner: TransferOwnerKind, limit: Int) -> [TransferScheduler.Entry] {
        dispatchPrecondition(condition: .notOnQueue(self.decisions))
        return self.decisions.sync { self.state.withLock { $0.scheduler.takeReady(host: host, owner: owner, limit: limit) } }
    }

    /// The owner started `started` (one of the entries ``takeReady(host:owner:limit:)`` gave it)
    /// in the slot of `old`, which it could not start (`nil`: it started `old` itself, or
    /// nothing); `rest`, the entries it did not start, are ready again before this returns
    /// (the owner's next start counts them among the host's waiting downloads). One decision,
    /// made on the caller's thread in order with every other; its actions go out as
    /// ``decide(_:)``'s do. Must not be called from the decision queue.
    func startedInstead(of old: TransferID, _ started: TransferScheduler.Entry?, returning rest: [TransferScheduler.Entry]) {
        guard started != nil || !rest.isEmpty else { return }
        dispatchPrecondition(condition: .notOnQueue(self.decisions))
        let replaced = self.decisions.sync {
            var replaced = true
            _ = self.run(
                { scheduler, now in
                    if let started { replaced = scheduler.replace(running: old, with: started) }
                    return rest.isEmpty ? [] : scheduler.add(rest, now: now)
                },
                keepingStartsOf: nil
            )
            return replaced
        }
        if !replaced, let started { self.logger.error("scheduler: \(started.id) started in the slot of \(old), which it no longer had") }
    }

    // MARK: - Loops

    /// The engine the run of a queued download of `url` from `host` (``TransferRun/hostKey(_:)``)
    /// goes to, `knownBytes` long when its length is known: ``engine`` unless its body is large
    /// (``LoopSpread``) and it goes over the engines' own HTTP/1.1 connections, whose count per
    /// host the engines keep together (``TransferEngine/carriesDirectly(_:)``; AsyncHTTPClient's
    /// pools, for HTTPS and proxies, are each an engine's own). Called once per start, from
    /// any thread.
    ///
    /// `lane`: the loop the run was counted on, for its slot at the gate (``admission(for:lane:admitted:)``)
    /// and to give back with ``runEnded(host:lane:)``; `nil` when it was not (small bodies, one
    /// loop).
    func engine(for url: URL, host: String, knownBytes: Int64?) -> (engine: TransferEngine, lane: RunGate.Lane?) {
        guard self.engines.count > 1 else { return (self.engine, nil) }
        // Never more loops than the host may have connections: each would want one of its own.
        let loops = min(self.engines.count, self.engine.limiter.limit)
        guard let index = self.spread.withLock({ $0.loop(forHost: host, knownBytes: knownBytes, loops: loops) }) else { return (self.engine, nil) }
        let lane = RunGate.Lane(index: index, count: loops)
        guard self.engine.carriesDirectly(url) else {
            self.runEnded(host: host, lane: lane)
            return (self.engine, nil)
        }
        if index != 0 {
            self.lastSpreadAt.store(DispatchTime.now().uptimeNanoseconds, ordering: .relaxed)
            self.spreadRuns.add(1, ordering: .relaxed)
        }
        return (self.engines[index], lane)
    }

    /// A run that ``engine(for:host:knownBytes:)`` counted on `lane` has ended (or never ran).
    func runEnded(host: String, lane: RunGate.Lane) {
        self.spread.withLock { $0.ended(host: host, loop: lane.index) }
    }

    /// Runs of queued downloads sent to an engine other than ``engine`` since the start.
    var runsOnOtherLoops: Int { self.spreadRuns.load(ordering: .relaxed) }

    /// A queued download from `host` completed with a body of `bytes` (what the next starts
    /// from that host go by). Once per completed download.
    func noteBody(host: String, bytes: Int64) {
        guard self.engines.count > 1 else { return }
        self.spread.withLock { $0.noteBody(host: host, bytes: bytes) }
    }

    /// Whether runs went to more than one loop in the last second: then no core is the
    /// transfer loop's alone, and the queue's threads do not keep off one
    /// (``TransferLoopCPU``).
    var isSpreading: Bool {
        let last = self.lastSpreadAt.load(ordering: .relaxed)
        return last != 0 && DispatchTime.now().uptimeNanoseconds &- last < 1_000_000_000
    }

    /// Transfers ready to start on `host`, every owner's.
    func readyCount(host: String) -> Int {
        self.state.withLock { $0.scheduler.readyCount(host: host) }
    }

    /// New shared limits, effective at once (lowering one yields what no longer fits).
    func setLimits(_ limits: Limits) {
        self.engine.limiter.limit = limits.maximumPerHost
        self.globalLimiter.setRate(bytesPerSecond: limits.globalSpeedLimit)
        self.gate.setLimits(limits.gate)
        self.decide { $0.setLimits(limits.scheduler, now: $1) }
    }

    /// What the run of transfer `id`, just started, waits for before its first request: with a
    /// look-ahead, a place at the gate (every run takes its slot there, a standby one as soon as
    /// one frees, one started in a slot at once unless a standby one took it first), else `nil`.
    /// Once admitted, `admitted` is called on the run's loop (at most once, never for a run
    /// stopped while it waited), and the scheduler counts it as holding a slot from its next
    /// decision on (``admissions``).
    func admission(for id: TransferID, lane: RunGate.Lane? = nil, admitted: @escaping @Sendable () -> Void) -> (any RunAdmission)? {
        guard let entry = self.state.withLock({ $0.scheduler.limits.lookAhead > 0 ? $0.scheduler.runningEntry(id) : nil }) else { return nil }
        return RunGate.Ticket(gate: self.gate, entry: entry, lane: lane) {
            // Bookkeeping only (no action follows from it): no decision, no hop, and not even the
            // scheduler's lock (``admissions``).
            self.admissions.withLock { $0.append(id) }
            admitted()
        }
    }

    /// Transfers that took their slots at the gate without a ticket (a ``HostRun``'s members):
    /// counted as holding them from the scheduler's next decision on, as an admitted ticket's.
    func noteAdmitted(_ ids: [TransferID]) {
        self.admissions.withLock { $0.append(contentsOf: ids) }
    }

    /// Whether the scheduler starts transfers ahead of a free slot, each then taking its slot
    /// at the gate (``admission(for:lane:admitted:)``).
    var startsAhead: Bool {
        self.state.withLock { $0.scheduler.limits.lookAhead > 0 }
    }

    /// Whether a download from `host`, `knownBytes` long when known, has a large body
    /// (``LoopSpread/isLarge(host:knownBytes:)``).
    func isLarge(host: String, knownBytes: Int64?) -> Bool {
        self.spread.withLock { $0.isLarge(host: host, knownBytes: knownBytes) }
    }

    /// Counts for diagnostics and tests.
    var counts: (running: Int, waiting: Int) {
        self.state.withLock { ($0.scheduler.runningCount, $0.scheduler.waitingCount) }
    }

    /// Starts nothing more, stops every running transfer (keeping checkpoints), waits for them
    /// to end (at most `timeout`) and for their owners to record how they ended, then closes
    /// the engine's connections.
    public func shutdown(timeout: Duration = .seconds(5)) async {
        let owners = self.state.withLock { state -> [any TransferOwner] in
            state.scheduler.shutDown()
            return state.owners.values.compactMap(\.owner)
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            self.decisions.async {
                let idle = self.state.withLock { state -> Bool in
                    if state.scheduler.runningCount == 0 { return true }
                    state.idleWaiters.append(continuation)
                    return false
                }
                if idle {
                    continuation.resume()
                    return
                }
                for owner in owners { owner.stopForShutdown() }
                let (seconds, attoseconds) = timeout.components
                self.decisions.asyncAfter(deadline: .now() + Double(seconds) + Double(attoseconds) * 1e-18) {
                    let waiters = self.state.withLock { state in
                        defer { state.idleWaiters = [] }
                        return state.idleWaiters
                    }
                    if !waiters.isEmpty { self.logger.warning("shutdown: transfers did not stop in time") }
                    for waiter in waiters { waiter.resume() }
                }
            }
        }
        for owner in owners { await owner.settle() }
        for engine in self.engines { await engine.shutdown() }
    }

    // MARK: - Deciding

    private func decide(_ event: @escaping @Sendable (inout TransferScheduler, Double) -> [TransferScheduler.Action]) {
        self.decisions.async { _ = self.run(event, keepingStartsOf: nil) }
    }

    /// Makes one decision and carries out its actions (on `decisions`); the starts of `kept`'s
    /// transfers are returned instead of sent.
    private func run(
        _ event: (inout TransferScheduler, Double) -> [TransferScheduler.Action],
        keepingStartsOf kept: TransferOwnerKind?
    ) -> [TransferScheduler.Entry] {
        let now = Self.now()
        let (actions, started, owners, idleWaiters, becameIdle) = self.state.withLock { state in
            // Admissions heard since the last decision count before this one is made.
            let admitted = self.admissions.withLock { admissions in
                defer { admissions.removeAll(keepingCapacity: true) }
                return admissions
            }
            for id in admitted { state.scheduler.admitted(id) }
            let wasRunning = state.scheduler.runningCount > 0
            let actions = event(&state.scheduler, now)
            var started: [TransferID: TransferScheduler.Entry] = [:]
            for case .start(let id) in actions { started[id] = state.scheduler.runningEntry(id) }
            var waiters: [CheckedContinuation<Void, Never>] = []
            if state.scheduler.runningCount == 0 {
                waiters = state.idleWaiters
                state.idleWaiters = []
            }
            return (actions, started, state.owners, waiters, wasRunning && state.scheduler.runningCount == 0)
        }
        // Starts go to each owner together (one hop to its queue for the lot), after the
        // yields and wake-ups of the same decision, in the scheduler's order per owner.
        var starts: [TransferOwnerKind: [TransferScheduler.Entry]] = [:]
        for action in actions {
            switch action {
            case .start(let id):
                guard owners[id.owner]?.owner != nil, let entry = started[id] else {
                    self.decide { $0.ended(id, now: $1) }
                    continue
                }
                starts[id.owner, default: []].append(entry)
            case .yield(let id):
                owners[id.owner]?.owner?.yieldTransfer(id.number, onlyIfWaiting: false)
            case .yieldIfWaiting(let id):
                owners[id.owner]?.owner?.yieldTransfer(id.number, onlyIfWaiting: true)
            case .wakeUp(let at):
                self.scheduleWakeUp(at: at)
            }
        }
        for kind in TransferOwnerKind.allCases where kind != kept {
            if let entries = starts[kind] { owners[kind]?.owner?.startTransfers(entries) }
        }
        for waiter in idleWaiters { waiter.resume() }
        // The last transfer ended: the heap its buffers grew goes back to the system now,
        // not at the next quiet-time trim (scripts/queue-bench, 10,000 queued and 200 run:
        // 64.2 -> 62.9 MiB right after).
        if becameIdle { WorkingSetTrimmer.releaseFreeHeap() }
        return kept.flatMap { starts[$0] } ?? []
    }

    private func scheduleWakeUp(at time: Double) {
        let generation = self.state.withLock { state in
            state.wakeUpGeneration += 1
            return state.wakeUpGeneration
        }
        let delay = max(0, time - Self.now()) + 0.005
        self.decisions.asyncAfter(deadline: .now() + delay) {
            guard self.state.withLock({ $0.wakeUpGeneration == generation }) else { return }
            self.decide { $0.timePassed(now: $1) }
        }
    }
}
