import HaulCore
import HaulEngine
import Synchronization

/// The plain downloads of one host, run the way a list's files are (docs/host-run.md): each is
/// still a download of its own to the queue (claimed, listed, paused, removed, ended through
/// the inbox), but its run has no task waiting at the core's gate and no hop to the queue's
/// thread to start.
///
/// The queue hands each member over once claimed, on a lane (one of the host run's loops, the
/// fewest members first). On its lane's loop, a member starts as soon as the gate has a slot
/// for it (``RunGate/take(_:lane:)``, synchronous); when the gate has none, the lane waits in the
/// gate's line with one callback for all of its backlog (``RunGate/enqueue(_:lane:number:admitted:)``),
/// not a task and continuation for each member. A member that ends gives its slot back on its
/// loop, and the lane's next member takes one there and then. The queue hears of the members
/// that started in one post for each pass (``admitted``), and of each end as of any run's.
///
/// Members are those ``DownloadQueue`` finds plain: one URL, no checksum, no speed limit of their
/// own, nothing on disk yet, a small body, on hauld's own store.
final class HostRun: Sendable {
    /// A download handed over, with the run the queue made for it (on its lane's engine, with no
    /// admission of its own).
    struct Member: Sendable {
        var id: Int64
        var run: TransferRun
        var entry: TransferScheduler.Entry
        var lane: Int
    }

    private struct Lane {
        /// Members handed over and not started, next at `next`.
        var backlog: [Member] = []
        var next = 0
        var inFlight = 0
        /// The lane's place in the gate's line, while it has one.
        var waiting: UInt64?

        var waitingCount: Int { self.backlog.count - self.next }

        mutating func pop() -> Member? {
            guard self.next < self.backlog.count else { return nil }
            let member = self.backlog[self.next]
            self.next += 1
            // The started part goes once it is most of the array (amortized O(1) a start).
            if self.next > 32, self.next * 2 > self.backlog.count {
                self.backlog.removeFirst(self.next)
                self.next = 0
            }
            return member
        }
    }

    private struct State {
        var lanes: [Lane]
        /// Members started (with a slot) since the run was made.
        var started = 0
    }

    let host: String
    let engines: [TransferEngine]
    private let gate: RunGate
    /// A member's run ended (on its loop): as a run's end, to the queue's inbox.
    private let ended: @Sendable (Int64, TransferOutcome) -> Void
    /// These members started (on a lane's loop), once per pass of a lane.
    private let admitted: @Sendable ([Int64]) -> Void
    private let state: Mutex<State>

    init(
        host: String,
        engines: [TransferEngine],
        gate: RunGate,
        ended: @escaping @Sendable (Int64, TransferOutcome) -> Void,
        admitted: @escaping @Sendable ([Int64]) -> Void
    ) {
        precondition(!engines.isEmpty)
        self.host = host
        self.engines = engines
        self.gate = gate
        self.ended = ended
        self.admitted = admitted
        self.state = Mutex(State(lanes: Array(repeating: Lane(), count: engines.count)))
    }

    /// The lane the next member goes to: the one with the fewest members waiting or in flight.
    func nextLane() -> Int {
        self.state.withLock { state in
            var best = 0
            for index in state.lanes.indices {
                let load = state.lanes[index].waitingCount + state.lanes[index].inFlight
                let bestLoad = state.lanes[best].waitingCount + state.lanes[best].inFlight
                if load < bestLoad { best = index }
            }
            return best
        }
    }

    /// The lane a member's slots are counted in at the gate (`nil`: one loop).
    private func gateLane(_ index: Int) -> RunGate.Lane? {
        self.engines.count > 1 ? RunGate.Lane(index: index, count: self.engines.count) : nil
    }

    /// Takes `members` after those waiting on their lanes, and starts what the gate has slots
    /// for (on each lane's loop).
    func handOver(_ members: [Member]) {
        guard !members.isEmpty else { return }
        let lanes = self.state.withLock { state -> Set<Int> in
            var lanes: Set<Int> = []
            for member in members {
                state.lanes[member.lane].backlog.append(member)
                lanes.insert(member.lane)
            }
            return lanes
        }
        for lane in lanes {
            self.engines[lane].eventLoop.execute { self.pump(lane) }
        }
    }

    /// Starts the lane's next members while the gate has slots for them; otherwise the lane
    /// waits in the gate's line (once). On the lane's loop.
    private func pump(_ lane: Int, admittedOne: Bool = false) {
        var starts: [Member] = []
        var wait: (number: UInt64, entry: TransferScheduler.Entry)?
        var giveBack = false
        self.state.withLock { state in
            if admittedOne {
                // The slot the gate took for the lane's place in line.
                state.lanes[lane].waiting = nil
                if let member = state.lanes[lane].pop() {
                    state.lanes[lane].inFlight += 1
                    starts.append(member)
                } else {
                    giveBack = true
                }
            }
            guard state.lanes[lane].waiting == nil else { return }
            while state.lanes[lane].waitingCount > 0 {
                let next = state.lanes[lane].backlog[state.lanes[lane].next]
                guard self.gate.take(next.entry, lane: self.gateLane(lane)) else {
                    let number = self.gate.issueNumber()
                    state.lanes[lane].waiting = number
                    wait = (number, next.entry)
                    break
                }
                _ = state.lanes[lane].pop()
                state.lanes[lane].inFlight += 1
                starts.append(next)
            }
            state.started += starts.count
        }
        if giveBack { self.gate.leave(host: self.host, lane: self.gateLane(lane)) }
        for member in starts {
            member.run.start { outcome in self.memberEnded(member, outcome) }
        }
        if !starts.isEmpty { self.admitted(starts.map(\.id)) }
        if let wait {
            self.gate.enqueue(wait.entry, lane: self.gateLane(lane), number: wait.number) {
                self.engines[lane].eventLoop.execute { self.pump(lane, admittedOne: true) }
            }
        }
    }

    /// A member's run ended (on its loop): the queue hears of it, then its slot goes back (to
    /// the best-ranked waiter of the gate, or this lane's next member).
    private func memberEnded(_ member: Member, _ outcome: TransferOutcome) {
        self.state.withLock { $0.lanes[member.lane].inFlight -= 1 }
        self.ended(member.id, outcome)
        self.gate.leave(host: self.host, lane: self.gateLane(member.lane))
        self.pump(member.lane)
    }

    /// Takes member `id` out of its lane's backlog when it has not started, calling `stop` (which
    /// stops its run) under the run's lock, so that it cannot start meanwhile: its run then
    /// starts with no slot and ends at once, stopped, through the queue's inbox as any end.
    /// Whether it had not started (`false`: it runs or ended, and `stop` was not called).
    @discardableResult
    func withdraw(_ id: Int64, stopping stop: () -> Void) -> Bool {
        let released = self.state.withLock { state -> (Member, cancel: UInt64?)? in
            for lane in state.lanes.indices {
                guard let index = state.lanes[lane].backlog[state.lanes[lane].next...].firstIndex(where: { $0.id == id }) else { continue }
                stop()
                let member = state.lanes[lane].backlog.remove(at: index)
                // The lane's place in line was for its backlog: none is left to wait for.
                let cancel = state.lanes[lane].waitingCount == 0 ? state.lanes[lane].waiting : nil
                return (member, cancel)
            }
            return nil
        }
        guard let (member, cancel) = released else { return false }
        if let cancel, self.gate.cancelWaiting(cancel) {
            self.state.withLock { state in
                if state.lanes[member.lane].waiting == cancel { state.lanes[member.lane].waiting = nil }
            }
        }
        member.run.engine.eventLoop.execute {
            member.run.start { outcome in self.ended(member.id, outcome) }
        }
        return true
    }

    /// Members waiting in the run's lines and in flight now, and those started with a slot
    /// since it was made (for tests and diagnostics).
    var counts: (waiting: Int, inFlight: Int, started: Int) {
        self.state.withLock { state in
            (state.lanes.reduce(0) { $0 + $1.waitingCount }, state.lanes.reduce(0) { $0 + $1.inFlight }, state.started)
        }
    }
}
