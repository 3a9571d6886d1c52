import Synchronization
@testable import HaulEngine
import Testing

@Suite("HostConnectionLimiter: slots per host, first come first served")
struct HostConnectionLimiterTests {
    /// Starts `acquire` in a task and reports when it returned (or threw).
    final class Acquirer: Sendable {
        final class Flag: Sendable {
            let value = Mutex(false)
        }

        let task: Task<Bool, Never>
        private let done = Flag()
        init(_ limiter: HostConnectionLimiter, host: String) {
            let done = self.done
            self.task = Task {
                defer { done.value.withLock { $0 = true } }
                do { try await limiter.acquire(host: host); return true } catch { return false }
            }
        }
        var hasReturned: Bool { self.done.value.withLock { $0 } }
    }

    @Test func freeSlotsAreTakenAtOnceAndTheNextWaitsForARelease() async throws {
        let limiter = HostConnectionLimiter(limit: 2)
        try await limiter.acquire(host: "a")
        try await limiter.acquire(host: "a")
        try await limiter.acquire(host: "b")  // hosts are counted apart
        let third = Acquirer(limiter, host: "a")
        try await Task.sleep(for: .milliseconds(100))
        #expect(!third.hasReturned)
        limiter.release(host: "a")
        #expect(await third.task.value)
    }

    @Test func waitersAreServedInOrderAndANewcomerDoesNotJumpTheLine() async throws {
        let limiter = HostConnectionLimiter(limit: 1)
        try await limiter.acquire(host: "a")
        let first = Acquirer(limiter, host: "a")
        try await Task.sleep(for: .milliseconds(50))
        let second = Acquirer(limiter, host: "a")
        try await Task.sleep(for: .milliseconds(50))
        limiter.release(host: "a")
        #expect(await first.task.value)
        try await Task.sleep(for: .milliseconds(50))
        #expect(!second.hasReturned)
        limiter.release(host: "a")
        #expect(await second.task.value)
    }

    @Test func cancellationThrowsWhetherWaitingOrNot() async throws {
        let limiter = HostConnectionLimiter(limit: 1)
        // Cancelled before it asks: no slot, even though one is free.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            do { try await limiter.acquire(host: "a"); return true } catch { return false }
        }
        #expect(await early.value == false)
        try await limiter.acquire(host: "a")  // the free slot is still there
        let waiting = Acquirer(limiter, host: "a")
        try await Task.sleep(for: .milliseconds(50))
        waiting.task.cancel()
        #expect(await waiting.task.value == false)
        // The cancelled waiter left the line: the next release goes to a new one.
        let next = Acquirer(limiter, host: "a")
        try await Task.sleep(for: .milliseconds(50))
        limiter.release(host: "a")
        #expect(await next.task.value)
    }
}
