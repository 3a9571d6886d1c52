import HaulCore
import HaulEngine
import Synchronization

/// The slots of hauld's transfers, taken by the transfers the scheduler started ahead of a
/// free one (``TransferScheduler/Limits/lookAhead``): at most ``Limits/maximumConcurrent`` at
/// once, at most ``Limits/maximumPerHost`` per host, the same limits the scheduler keeps.
///
/// A run that ends gives its slot back on its event loop, and the best-ranked waiter that fits
/// takes it there and then (``TransferScheduler/isWorse(_:than:)``: discretion, priority, order,
/// id): a queue of small files refills its slots without waiting for a decision of the core
/// and the owner's queue after every end. A waiter whose task is cancelled leaves the line.
///
/// The rank is what the transfers are, not the scheduler's fairness between owners (which
/// decided who started): at most the look-ahead's worth of waiters can be admitted in another
/// order than the scheduler would have started them.
///
/// A run is taken out of the line (``withdraw(_:stopping:)``) only while it holds no slot: the
/// scheduler's wish that a standby transfer yield reaches its owner a moment after the
/// decision, and a run admitted meanwhile may be fetching already.
final class RunGate: Sendable {
    struct Limits: Sendable, Hashable {
        var maximumConcurrent: Int
        var maximumPerHost: Int
    }

    /// The loop a run of a host spread over several (``LoopSpread``) runs on: its slots of the
    /// host are that loop's share of the host's (``share(of:)``), so that a slot a run gives back
    /// goes to a run on the same loop, which takes over its idle connection (a slot handed to
    /// another loop had one connection closed and one opened: half of the files of a list).
    struct Lane: Sendable, Hashable {
        /// Which loop, below `count`.
        var index: Int
        /// Loops the host's runs are spread over.
        var count: Int

        /// This lane's part of `limit` slots: an even share, the first lanes one more while
        /// slots are left over.
        func share(of limit: Int) -> Int {
            limit / self.count + (self.index < limit % self.count ? 1 : 0)
        }
    }

    private struct Waiter {
        var number: UInt64
        var entry: TransferScheduler.Entry
        var lane: Lane?
        var resumption: Resumption

        /// Tells the waiter it holds its slot now (outside the gate's lock).
        func admit() {
            switch self.resumption {
            case .task(let continuation): continuation.resume()
            case .callback(let admitted): admitted()
            }
        }
    }

    /// How a waiter hears that it has its slot: a run's task waiting in ``enter(_:lane:number:)``,
    /// or a callback (``enqueue(_:lane:number:admitted:)``: a host run's next member, with no
    /// task of its own).
    private enum Resumption {
        case task(CheckedContinuation<Void, any Error>)
        case callback(@Sendable () -> Void)
    }

    /// Where a ticket is: in the line, holding a slot, taken out before it entered, or done
    /// with its slot.
    private enum Place {
        case waiting
        case holding
        case withdrawn
        case done
    }

    private struct State {
        var limits: Limits
        var admitted = 0
        var admittedPerHost: [String: Int] = [:]
        /// Slots taken by lane, for the hosts with lanes.
        var admittedPerLane: [String: [Int]] = [:]
        var waiters: [Waiter] = []
        /// Each ticket that entered or was withdrawn, until it is released (none for a ticket
        /// that has not entered yet).
        var places: [UInt64: Place] = [:]
        var nextNumber: UInt64 = 0

        func fits(_ host: String, _ lane: Lane?) -> Bool {
            self.admitted < self.limits.maximumConcurrent && self.admittedPerHost[host, default: 0] < self.limits.maximumPerHost
                && self.laneFits(host, lane)
        }

        /// Whether `lane` has room for one more of `host`'s runs. A lane left no share (the
        /// host's limit lowered below the loops its runs were spread over) has the host's room:
        /// its runs would otherwise wait for ever.
        func laneFits(_ host: String, _ lane: Lane?) -> Bool {
            guard let lane else { return true }
            let share = lane.share(of: self.limits.maximumPerHost)
            guard share > 0 else { return true }
            let taken = self.admittedPerLane[host].map { lane.index < $0.count ? $0[lane.index] : 0 } ?? 0
            return taken < share
        }

        mutating func take(_ host: String, _ lane: Lane?) {
            self.admitted += 1
            self.admittedPerHost[host, default: 0] += 1
            guard let lane else { return }
            var taken = self.admittedPerLane[host] ?? []
            if taken.count <= lane.index { taken += Array(repeating: 0, count: lane.index + 1 - taken.count) }
            taken[lane.index] += 1
            self.admittedPerLane[host] = taken
        }

        mutating func give(_ host: String, _ lane: Lane?) {
            self.admitted -= 1
            self.admittedPerHost[host, default: 1] -= 1
            if self.admittedPerHost[host] == 0 { self.admittedPerHost[host] = nil }
            guard let lane, var taken = self.admittedPerLane[host], lane.index < taken.count, taken[lane.index] > 0 else { return }
            taken[lane.index] -= 1
            self.admittedPerLane[host] = taken.allSatisfy { $0 == 0 } ? nil : taken
        }

        /// Takes slots for the best-ranked waiters that fit, as long as any does.
        ///
        /// Runs on the transfer loop every time a run leaves: the waiters are looked at in place
        /// (no copy of each), and a host is looked up once per pass (they mostly share one, and
        /// each lookup hashes its name).
        mutating func admitWaiters() -> [Waiter] {
            var admitted: [Waiter] = []
            while self.admitted < self.limits.maximumConcurrent, !self.waiters.isEmpty {
                var best: Int?
                var roomy: String?
                var full: String?
                for index in self.waiters.indices {
                    let host = self.waiters[index].entry.host
                    if host == full { continue }
                    if host != roomy {
                        guard self.admittedPerHost[host, default: 0] < self.limits.maximumPerHost else {
                            full = host
                            continue
                        }
                        roomy = host
                    }
                    if self.waiters[index].lane != nil, !self.laneFits(host, self.waiters[index].lane) { continue }
                    if let current = best, !TransferScheduler.isWorse(self.waiters[current].entry, than: self.waiters[index].entry) { continue }
                    best = index
                }
                guard let best else { break }
                let waiter = self.waiters.remove(at: best)
                self.take(waiter.entry.host, waiter.lane)
                self.places[waiter.number] = .holding
                admitted.append(waiter)
            }
            return admitted
        }
    }

    private let state: Mutex<State>

    init(limits: Limits) {
        self.state = Mutex(State(limits: limits))
    }

    /// New limits: raising one admits the waiters that now fit; lowering one admits nobody
    /// until the slots taken are below it (the scheduler makes the extra transfers yield).
    func setLimits(_ limits: Limits) {
        let admitted = self.state.withLock { state in
            state.limits = limits
            return state.admitWaiters()
        }
        for waiter in admitted { waiter.admit() }
    }

    /// A number for a new ticket.
    func issueNumber() -> UInt64 {
        self.state.withLock { state in
            state.nextNumber += 1
            return state.nextNumber
        }
    }

    /// Waits for a slot for `entry`'s transfer, as ticket `number` (``issueNumber()``); one that
    /// fits is taken without suspending. Where the ticket is, is kept for its withdrawal until
    /// it is released.
    ///
    /// - Throws: `CancellationError` when the calling task is cancelled while waiting, or when
    ///   the ticket was withdrawn.
    func enter(_ entry: TransferScheduler.Entry, lane: Lane? = nil, number: UInt64) async throws {
        let waits = try self.state.withLock { state throws(CancellationError) -> Bool in
            if state.places[number] == .withdrawn {
                state.places[number] = nil
                throw CancellationError()
            }
            if Task.isCancelled { throw CancellationError() }
            if state.fits(entry.host, lane) {
                state.take(entry.host, lane)
                state.places[number] = .holding
                return false
            }
            return true
        }
        guard waits else { return }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let outcome: Result<Bool, any Error> = self.state.withLock { state in
                    if state.places[number] == .withdrawn {
                        state.places[number] = nil
                        return .failure(CancellationError())
                    }
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if state.fits(entry.host, lane) {
                        state.take(entry.host, lane)
                        state.places[number] = .holding
                        return .success(true)
                    }
                    state.waiters.append(Waiter(number: number, entry: entry, lane: lane, resumption: .task(continuation)))
                    state.places[number] = .waiting
                    return .success(false)
                }
                switch outcome {
                case .success(true): continuation.resume()
                case .success(false): break
                case .failure(let error): continuation.resume(throwing: error)
                }
            }
        } onCancel: {
            let waiter = self.state.withLock { state -> Waiter? in
                guard let index = state.waiters.firstIndex(where: { $0.number == number }) else { return nil }
                state.places[number] = nil
                return state.waiters.remove(at: index)
            }
            if case .task(let continuation) = waiter?.resumption { continuation.resume(throwing: CancellationError()) }
        }
    }

    /// Takes a slot for `entry` if one fits now, without waiting: whether it did. The slot is
    /// given back with ``leave(host:lane:number:)`` (no number). For a ``HostRun``, which holds
    /// slots for its members itself.
    func take(_ entry: TransferScheduler.Entry, lane: Lane? = nil) -> Bool {
        self.state.withLock { state in
            // (A waiter that fits has been admitted already: every leave admits those.)
            guard state.fits(entry.host, lane) else { return false }
            state.take(entry.host, lane)
            return true
        }
    }

    /// Waits in line for a slot for `entry`, as `number` (``issueNumber()``), without a task:
    /// `admitted` is called once the slot is taken for it, on the thread that freed it (outside
    /// the gate's lock). Taken out with ``cancelWaiting(_:)``.
    func enqueue(_ entry: TransferScheduler.Entry, lane: Lane? = nil, number: UInt64, admitted: @escaping @Sendable () -> Void) {
        let now = self.state.withLock { state -> Bool in
            if state.fits(entry.host, lane) {
                state.take(entry.host, lane)
                return true
            }
            state.waiters.append(Waiter(number: number, entry: entry, lane: lane, resumption: .callback(admitted)))
            return false
        }
        if now { admitted() }
    }

    /// Takes waiter `number` (``enqueue(_:lane:number:admitted:)``) out of the line: whether it
    /// was still in it (`false`: it was admitted, or never waited).
    func cancelWaiting(_ number: UInt64) -> Bool {
        self.state.withLock { state in
            guard let index = state.waiters.firstIndex(where: { $0.number == number }) else { return false }
            state.waiters.remove(at: index)
            return true
        }
    }

    /// Takes ticket `number` out of the line unless it holds a slot: a waiting one leaves the
    /// line (its ``enter(_:number:)`` throws), one that has not entered yet is refused when it
    /// does. `stop` runs under the gate's lock when the ticket is taken out, before any
    /// admission could happen.
    ///
    /// - Returns: whether the ticket was taken out (`false`: it holds a slot).
    func withdraw(_ number: UInt64, stopping stop: () -> Void) -> Bool {
        let outcome = self.state.withLock { state -> (withdrawn: Bool, waiter: Waiter?) in
            switch state.places[number] {
            case .holding, .done:
                return (false, nil)
            case .waiting:
                stop()
                state.places[number] = nil
                guard let index = state.waiters.firstIndex(where: { $0.number == number }) else { return (true, nil) }
                return (true, state.waiters.remove(at: index))
            case .withdrawn:
                return (true, nil)
            case nil:
                // Not entered yet (or left the line cancelled): the mark goes when it enters or
                // when the ticket is released.
                stop()
                state.places[number] = .withdrawn
                return (true, nil)
            }
        }
        if case .task(let continuation) = outcome.waiter?.resumption { continuation.resume(throwing: CancellationError()) }
        return outcome.withdrawn
    }

    /// Ticket `number` is gone: where it was is forgotten.
    func release(_ number: UInt64) {
        self.state.withLock { _ = $0.places.removeValue(forKey: number) }
    }

    /// Gives back a slot of `host` (held by ticket `number`, if given); the best-ranked
    /// waiters that fit take the free slots.
    func leave(host: String, lane: Lane? = nil, number: UInt64? = nil) {
        let admitted = self.state.withLock { state in
            if let number { state.places[number] = .done }
            state.give(host, lane)
            return state.admitWaiters()
        }
        for waiter in admitted { waiter.admit() }
    }

    /// Slots taken now, and transfers waiting for one (for tests and diagnostics).
    var counts: (admitted: Int, waiting: Int) {
        self.state.withLock { ($0.admitted, $0.waiters.count) }
    }

    /// One run's place at the gate: enters with the transfer's entry, tells the core (and the
    /// owner, through `admitted`) once it has a slot.
    final class Ticket: RunAdmission {
        let gate: RunGate
        let entry: TransferScheduler.Entry
        let lane: Lane?
        let admitted: @Sendable () -> Void
        let number: UInt64

        init(gate: RunGate, entry: TransferScheduler.Entry, lane: Lane? = nil, admitted: @escaping @Sendable () -> Void) {
            self.gate = gate
            self.entry = entry
            self.lane = lane
            self.admitted = admitted
            self.number = gate.issueNumber()
        }

        deinit {
            self.gate.release(self.number)
        }

        func enter() async throws {
            try await self.gate.enter(self.entry, lane: self.lane, number: self.number)
            self.admitted()
        }

        func withdraw(stopping stop: () -> Void) -> Bool {
            self.gate.withdraw(self.number, stopping: stop)
        }

        func leave() {
            self.gate.leave(host: self.entry.host, lane: self.lane, number: self.number)
        }
    }
}
