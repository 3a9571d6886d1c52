import HaulCore
import HaulEngine
import NIOCore
import Synchronization

/// The plain downloads of one host, run the way a list's files are (docs/host-run.md): each is
/// still a download of its own to the queue (claimed, listed, paused, removed, ended through
/// the inbox), but its run has no task waiting at the core's gate and no hop to the queue's
/// thread to start.
///
/// The queue hands each member over once claimed. On the run's loop, a member starts as soon as
/// the gate has a slot for it (``RunGate/take(_:lane:)``, synchronous); when the gate has none,
/// the run waits in the gate's line once for its whole backlog, with a callback
/// (``RunGate/enqueue(_:lane:number:admitted:)``), not a task and continuation for each member.
/// A member that ends gives its slot back on the loop, and the next member takes one there and
/// then. The queue hears of the members that started and of those that ended in the order they
/// did so (``Report``), gathered on the loop for up to ``reportDelay`` (or ``reportsAtOnce``
/// reports, or until the run's line runs short): one post and at most one wake-up of the
/// queue's thread for several ends, not one each.
///
/// Members are those ``DownloadQueue`` finds plain: one URL, no checksum, no speed limit of their
/// own, nothing on disk yet, a small body, on hauld's own store. They run on one loop, as every
/// small body does (``LoopSpread``): spread over both loops of the 2-core project machine, a
/// host run was no faster and took more CPU (docs/host-run.md).
final class HostRun: Sendable {
    /// A download handed over, with the run the queue made for it (on ``engine``, with no
    /// admission of its own).
    struct Member: Sendable {
        var id: Int64
        var run: TransferRun
        var entry: TransferScheduler.Entry
    }

    /// What the queue hears from the run, in the order it happened: a member's end is heard
    /// before the start that took its slot.
    enum Report: Sendable {
        /// These members started (took a slot).
        case admitted([Int64])
        /// A member's run ended.
        case ended(Int64, TransferOutcome)
    }

    private struct State {
        /// Members handed over and not started, next at `next`.
        var backlog: [Member] = []
        var next = 0
        var inFlight = 0
        /// The run's place in the gate's line, while it has one.
        var waiting: UInt64?
        /// Members started (with a slot) since the run was made.
        var started = 0
        /// Reports gathered for the queue (on the loop), and whether a timer will send them.
        var reports: [Report] = []
        var reportTimer: NIOScheduledCallback?

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

    let host: String
    /// The engine whose loop runs every member.
    let engine: TransferEngine
    private let gate: RunGate
    /// Members started: told at once (on the loop), for the core's count of slots taken.
    private let admitted: @Sendable ([Int64]) -> Void
    /// What happened since the last time, in order (on the loop): to the queue's inbox.
    private let report: @Sendable ([Report]) -> Void
    private let state = Mutex(State())

    /// How long a report waits on the loop for others to share its post. Posted one by one,
    /// nearly every end woke the queue's thread (~2.5 futex calls a file, 1,000 × 16 KiB) and
    /// was recorded in a batch of two or three, a commit for its promise and one for its row.
    static let reportDelay = TimeAmount.milliseconds(2)
    /// Reports that are posted at once, however soon.
    static let reportsAtOnce = 32
    /// Reports are posted at once when fewer members than this wait in the run's line: the
    /// queue refills the line as it hears of ends (the scheduler's look-ahead), so the loop is
    /// never left without a next member for want of a post.
    static let lineLow = 2

    init(
        host: String,
        engine: TransferEngine,
        gate: RunGate,
        admitted: @escaping @Sendable ([Int64]) -> Void,
        report: @escaping @Sendable ([Report]) -> Void
    ) {
        self.host = host
        self.engine = engine
        self.gate = gate
        self.admitted = admitted
        self.report = report
    }

    /// Takes `members` after those waiting, and starts what the gate has slots for (on the loop).
    func handOver(_ members: [Member]) {
        guard !members.isEmpty else { return }
        self.state.withLock { $0.backlog.append(contentsOf: members) }
        self.engine.eventLoop.execute { self.pump() }
    }

    /// Starts the next members while the gate has slots for them; otherwise the run waits in the
    /// gate's line (once). `admittedOne`: the gate took a slot for the run's place in line. On
    /// the loop.
    private func pump(admittedOne: Bool = false) {
        var starts: [Member] = []
        var wait: (number: UInt64, entry: TransferScheduler.Entry)?
        var giveBack = false
        self.state.withLock { state in
            if admittedOne {
                state.waiting = nil
                if let member = state.pop() {
                    state.inFlight += 1
                    starts.append(member)
                } else {
                    // Everyone it waited for was taken out meanwhile.
                    giveBack = true
                }
            }
            guard state.waiting == nil else { return }
            while state.waitingCount > 0 {
                let next = state.backlog[state.next]
                guard self.gate.take(next.entry) else {
                    let number = self.gate.issueNumber()
                    state.waiting = number
                    wait = (number, next.entry)
                    break
                }
                _ = state.pop()
                state.inFlight += 1
                starts.append(next)
            }
            state.started += starts.count
        }
        if giveBack { self.gate.leave(host: self.host) }
        for member in starts {
            member.run.start { outcome in self.memberEnded(member, outcome) }
        }
        if !starts.isEmpty {
            let ids = starts.map(\.id)
            self.admitted(ids)
            self.note(.admitted(ids))
        }
        if let wait {
            self.gate.enqueue(wait.entry, number: wait.number) {
                self.engine.eventLoop.execute { self.pump(admittedOne: true) }
            }
        }
    }

    /// A member's run ended (on the loop): its end is noted for the queue before its slot goes
    /// back (to the gate's best-ranked waiter, or this run's next member), so the queue hears of
    /// it before it hears of the start that took the slot. The core hears of that start at once
    /// (``admitted``): until the end reaches it, its slots look fuller than they are, never
    /// emptier.
    private func memberEnded(_ member: Member, _ outcome: TransferOutcome) {
        self.state.withLock { $0.inFlight -= 1 }
        self.note(.ended(member.id, outcome))
        self.gate.leave(host: self.host)
        self.pump()
    }

    /// Gathers `report` for the queue (on the loop): posted with the others now when there are
    /// ``reportsAtOnce``, when the run's line is short or empty, or when other runs wait at the
    /// gate (a slot this run gives back may go to one of them, whose start the queue must not
    /// hear of before the end that freed it); else within ``reportDelay``.
    private func note(_ report: Report) {
        self.engine.eventLoop.assertInEventLoop()
        let now = self.state.withLock { state -> [Report]? in
            state.reports.append(report)
            let othersWait = self.gate.counts.waiting > (state.waiting == nil ? 0 : 1)
            guard state.reports.count >= Self.reportsAtOnce || state.waitingCount < Self.lineLow || othersWait else {
                if state.reportTimer == nil {
                    state.reportTimer = try? self.engine.eventLoop.scheduleCallback(in: Self.reportDelay, handler: self)
                }
                return state.reportTimer == nil ? Self.takeReports(&state) : nil
            }
            return Self.takeReports(&state)
        }
        if let now { self.report(now) }
    }

    /// The reports gathered, taken out, and the timer that was to send them stopped (a no-op once
    /// it fired).
    private static func takeReports(_ state: inout State) -> [Report] {
        state.reportTimer?.cancel()
        state.reportTimer = nil
        defer { state.reports.removeAll(keepingCapacity: true) }
        return state.reports
    }

    /// Takes member `id` out of the backlog when it has not started, calling `stop` (which stops
    /// its run) under the run's lock, so that it cannot start meanwhile: its run then starts with
    /// no slot and ends at once, stopped, through the queue's inbox as any end. Whether it had
    /// not started (`false`: it runs or ended, and `stop` was not called).
    @discardableResult
    func withdraw(_ id: Int64, stopping stop: () -> Void) -> Bool {
        let released = self.state.withLock { state -> (Member, cancel: UInt64?)? in
            guard let index = state.backlog[state.next...].firstIndex(where: { $0.id == id }) else { return nil }
            stop()
            let member = state.backlog.remove(at: index)
            // The run's place in line was for its backlog: none is left to wait for.
            return (member, state.waitingCount == 0 ? state.waiting : nil)
        }
        guard let (member, cancel) = released else { return false }
        if let cancel, self.gate.cancelWaiting(cancel) {
            self.state.withLock { state in
                if state.waiting == cancel { state.waiting = nil }
            }
        }
        self.engine.eventLoop.execute {
            member.run.start { outcome in self.note(.ended(member.id, outcome)) }
        }
        return true
    }

    /// Whether nothing waits or runs in it.
    var isIdle: Bool { self.state.withLock { $0.waitingCount == 0 && $0.inFlight == 0 } }

    /// Members waiting in the run's line and in flight now, and those started with a slot since
    /// it was made (for tests and diagnostics).
    var counts: (waiting: Int, inFlight: Int, started: Int) {
        self.state.withLock { ($0.waitingCount, $0.inFlight, $0.started) }
    }
}

extension HostRun: NIOScheduledCallbackHandler {
    /// The report timer fired (on the loop): what was gathered goes to the queue.
    func handleScheduledCallback(eventLoop: some EventLoop) {
        let reports = self.state.withLock { Self.takeReports(&$0) }
        if !reports.isEmpty { self.report(reports) }
    }
}
