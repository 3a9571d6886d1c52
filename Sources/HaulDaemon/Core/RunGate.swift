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
final class RunGate: Sendable {
    struct Limits: Sendable, Hashable {
        var maximumConcurrent: Int
        var maximumPerHost: Int
    }

    private struct Waiter {
        var number: UInt64
        var entry: TransferScheduler.Entry
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var limits: Limits
        var admitted = 0
        var admittedPerHost: [String: Int] = [:]
        var waiters: [Waiter] = []
        var nextNumber: UInt64 = 0

        func fits(_ host: String) -> Bool {
            self.admitted < self.limits.maximumConcurrent && self.admittedPerHost[host, default: 0] < self.limits.maximumPerHost
        }

        mutating func take(_ host: String) {
            self.admitted += 1
            self.admittedPerHost[host, default: 0] += 1
        }

        /// Takes slots for the best-ranked waiters that fit, as long as any does.
        mutating func admitWaiters() -> [Waiter] {
            var admitted: [Waiter] = []
            while self.admitted < self.limits.maximumConcurrent {
                var best: Int?
                for (index, waiter) in self.waiters.enumerated() where self.fits(waiter.entry.host) {
                    if let current = best, !TransferScheduler.isWorse(self.waiters[current].entry, than: waiter.entry) { continue }
                    best = index
                }
                guard let best else { break }
                let waiter = self.waiters.remove(at: best)
                self.take(waiter.entry.host)
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
        for waiter in admitted { waiter.continuation.resume() }
    }

    /// Waits for a slot for `entry`'s transfer; one that fits is taken without suspending.
    ///
    /// - Throws: `CancellationError` when the calling task is cancelled while waiting.
    func enter(_ entry: TransferScheduler.Entry) async throws {
        let number = try self.state.withLock { state throws(CancellationError) -> UInt64? in
            if Task.isCancelled { throw CancellationError() }
            if state.fits(entry.host) {
                state.take(entry.host)
                return nil
            }
            state.nextNumber += 1
            return state.nextNumber
        }
        guard let number else { return }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let outcome: Result<Bool, any Error> = self.state.withLock { state in
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if state.fits(entry.host) {
                        state.take(entry.host)
                        return .success(true)
                    }
                    state.waiters.append(Waiter(number: number, entry: entry, continuation: continuation))
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
                return state.waiters.remove(at: index)
            }
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Gives back a slot of `host`; the best-ranked waiters that fit take the free slots.
    func leave(host: String) {
        let admitted = self.state.withLock { state in
            state.admitted -= 1
            state.admittedPerHost[host, default: 1] -= 1
            if state.admittedPerHost[host] == 0 { state.admittedPerHost[host] = nil }
            return state.admitWaiters()
        }
        for waiter in admitted { waiter.continuation.resume() }
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
        let admitted: @Sendable () -> Void

        init(gate: RunGate, entry: TransferScheduler.Entry, admitted: @escaping @Sendable () -> Void) {
            self.gate = gate
            self.entry = entry
            self.admitted = admitted
        }

        func enter() async throws {
            try await self.gate.enter(self.entry)
            self.admitted()
        }

        func leave() {
            self.gate.leave(host: self.entry.host)
        }
    }
}
