import HaulCore
@testable import HaulDaemon
import Synchronization
import Testing

@Suite("RunGate: the slots transfers started ahead wait for")
struct RunGateTests {
    static func entry(_ number: Int64, host: String = "a", priority: Int = 0) -> TransferScheduler.Entry {
        TransferScheduler.Entry(id: TransferID(.queue, number), host: host, priority: priority)
    }

    /// The numbers of the entries admitted, in order.
    final class Order: Sendable {
        private let numbers = Mutex<[Int64]>([])
        func append(_ number: Int64) { self.numbers.withLock { $0.append(number) } }
        var all: [Int64] { self.numbers.withLock { $0 } }
    }

    /// Enters in a task; `order` records the numbers in the order they were admitted.
    static func enter(_ gate: RunGate, _ entry: TransferScheduler.Entry, order: Order) -> Task<Bool, Never> {
        Task {
            do {
                try await gate.enter(entry)
                order.append(entry.id.number)
                return true
            } catch {
                return false
            }
        }
    }

    /// Waits (at most 5 s) until `count` runs wait at the gate.
    static func waitUntil(_ gate: RunGate, waiting count: Int) async throws {
        for _ in 0..<500 where gate.counts.waiting != count { try await Task.sleep(for: .milliseconds(10)) }
        #expect(gate.counts.waiting == count)
    }

    @Test("Free slots are taken at once, within both limits; a leave admits the best-ranked waiter that fits")
    func admitsByRankWithinLimits() async throws {
        let gate = RunGate(limits: .init(maximumConcurrent: 2, maximumPerHost: 1))
        let order = Order()
        try await gate.enter(Self.entry(1, host: "a"))
        try await gate.enter(Self.entry(2, host: "b"))
        #expect(gate.counts.admitted == 2)
        // Three wait: two for host a (the later one ranked higher), one for host c.
        let low = Self.enter(gate, Self.entry(7, host: "a"), order: order)
        try await Self.waitUntil(gate, waiting: 1)
        let high = Self.enter(gate, Self.entry(8, host: "a", priority: 5), order: order)
        try await Self.waitUntil(gate, waiting: 2)
        let other = Self.enter(gate, Self.entry(3, host: "c"), order: order)
        try await Self.waitUntil(gate, waiting: 3)
        // Host b's slot frees: host a is still full (1 per host), so c gets it, not a better-ranked a.
        gate.leave(host: "b")
        #expect(await other.value)
        // Host a's frees: the higher priority goes first though it came later.
        gate.leave(host: "a")
        #expect(await high.value)
        try await Self.waitUntil(gate, waiting: 1)
        gate.leave(host: "a")
        #expect(await low.value)
        #expect(order.all == [3, 8, 7])
        #expect(gate.counts.admitted == 2)
    }

    @Test("A waiter whose task is cancelled leaves the line and takes no slot")
    func cancelledWaiterLeaves() async throws {
        let gate = RunGate(limits: .init(maximumConcurrent: 1, maximumPerHost: 1))
        let order = Order()
        try await gate.enter(Self.entry(1))
        let cancelled = Self.enter(gate, Self.entry(2), order: order)
        try await Self.waitUntil(gate, waiting: 1)
        let next = Self.enter(gate, Self.entry(3), order: order)
        try await Self.waitUntil(gate, waiting: 2)
        cancelled.cancel()
        #expect(await cancelled.value == false)
        try await Self.waitUntil(gate, waiting: 1)
        gate.leave(host: "a")
        #expect(await next.value)
        #expect(order.all == [3])
        // Cancelled before asking: no slot either, even a free one.
        gate.leave(host: "a")
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            do { try await gate.enter(Self.entry(4)); return true } catch { return false }
        }
        #expect(await early.value == false)
        #expect(gate.counts.admitted == 0)
    }

    @Test("Raising the limits admits the waiters that now fit; lowering them admits nobody until below")
    func limitsChange() async throws {
        let gate = RunGate(limits: .init(maximumConcurrent: 1, maximumPerHost: 4))
        let order = Order()
        try await gate.enter(Self.entry(1))
        let second = Self.enter(gate, Self.entry(2), order: order)
        let third = Self.enter(gate, Self.entry(3), order: order)
        try await Self.waitUntil(gate, waiting: 2)
        gate.setLimits(.init(maximumConcurrent: 3, maximumPerHost: 4))
        #expect(await second.value)
        #expect(await third.value)
        #expect(gate.counts.admitted == 3)
        gate.setLimits(.init(maximumConcurrent: 1, maximumPerHost: 4))
        let fourth = Self.enter(gate, Self.entry(4), order: order)
        try await Self.waitUntil(gate, waiting: 1)
        gate.leave(host: "a")
        gate.leave(host: "a")
        // Two slots are still taken of a limit of one: the fourth waits.
        #expect(gate.counts.waiting == 1)
        gate.leave(host: "a")
        #expect(await fourth.value)
    }
}
