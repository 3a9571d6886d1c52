import HaulCore
import Testing

@Suite("One outcome path: retry, mirrors, deadlines, bytes kept or dropped")
struct TransferOutcomePolicyTests {
    let policy = TransferOutcomePolicy(
        retryPolicy: RetryPolicy(maximumAttempts: 3, initialDelay: 1, maximumDelay: 30, maximumRetryAfter: 60, retriesRefusedConnections: false)
    )

    @Test("Transient failures retry with backoff and keep resumable bytes; the last attempt fails")
    func retries() {
        let lost = TransferOutcomePolicy.Failure(attempt: 1, kind: .connectionLost, hasResumePoint: true)
        #expect(self.policy.decide(lost, randomUnit: 0) == .retry(afterSeconds: 0.5, keepBytes: true))
        var second = lost
        second.attempt = 2
        #expect(self.policy.decide(second, randomUnit: 0.5) == .retry(afterSeconds: 1.5, keepBytes: true))
        var last = lost
        last.attempt = 3
        #expect(self.policy.decide(last, randomUnit: 0) == .fail(keepBytes: true))
        let fresh = TransferOutcomePolicy.Failure(attempt: 1, kind: .timedOut, hasResumePoint: false)
        #expect(self.policy.decide(fresh, randomUnit: 0) == .retry(afterSeconds: 0.5, keepBytes: false))
    }

    @Test("Retry-After is honoured up to its limit; a longer one gives up")
    func retryAfter() {
        let busy = TransferOutcomePolicy.Failure(attempt: 1, kind: .serverStatus(503), retryAfter: 7, hasResumePoint: true)
        #expect(self.policy.decide(busy, randomUnit: 0.3) == .retry(afterSeconds: 7, keepBytes: true))
        var tooLong = busy
        tooLong.retryAfter = 3600
        #expect(self.policy.decide(tooLong, randomUnit: 0.3) == .fail(keepBytes: true))
    }

    @Test("A status that retrying cannot fix fails at once, or moves to the next mirror")
    func mirrors() {
        let missing = TransferOutcomePolicy.Failure(attempt: 1, kind: .serverStatus(404), hasResumePoint: false)
        #expect(self.policy.decide(missing, randomUnit: 0) == .fail(keepBytes: false))
        var withMirror = missing
        withMirror.mirrorsLeft = 1
        #expect(self.policy.decide(withMirror, randomUnit: 0) == .nextMirror(keepBytes: false))
        var exhausted = TransferOutcomePolicy.Failure(attempt: 3, kind: .connectionLost, hasResumePoint: true, mirrorsLeft: 2)
        #expect(self.policy.decide(exhausted, randomUnit: 0) == .nextMirror(keepBytes: true))
        exhausted.kind = .permanent  // a full disk: no mirror helps
        #expect(self.policy.decide(exhausted, randomUnit: 0) == .fail(keepBytes: true))
        let refused = TransferOutcomePolicy.Failure(attempt: 1, kind: .cannotConnect, hasResumePoint: false)
        #expect(self.policy.decide(refused, randomUnit: 0) == .fail(keepBytes: false), "refused connections are not retried unless asked")
    }

    @Test("The resource deadline: no retry that would start after it, and a timeout past it is final")
    func deadline() {
        let soon = TransferOutcomePolicy.Failure(attempt: 1, kind: .connectionLost, hasResumePoint: true, secondsUntilDeadline: 0.2)
        #expect(self.policy.decide(soon, randomUnit: 0) == .fail(keepBytes: true))
        var later = soon
        later.secondsUntilDeadline = 100
        #expect(self.policy.decide(later, randomUnit: 0) == .retry(afterSeconds: 0.5, keepBytes: true))
        let past = TransferOutcomePolicy.Failure(attempt: 1, kind: .timedOut, hasResumePoint: false, secondsUntilDeadline: -1, mirrorsLeft: 1)
        #expect(self.policy.decide(past, randomUnit: 0) == .fail(keepBytes: false))
    }

    @Test("Checkpoint cadence: every N bytes or T seconds, whichever first; restart moves the base")
    func cadence() {
        var cadence = CheckpointCadence(bytes: 1000, interval: 0.5, startingAt: 200, now: 10)
        let r1 = cadence.isDue(total: 1100, now: 10.1)
        #expect(!r1)
        let r2 = cadence.isDue(total: 1200, now: 10.2)
        #expect(r2)
        let r3 = cadence.isDue(total: 1300, now: 10.3)
        #expect(!r3)
        let r4 = cadence.isDue(total: 1301, now: 10.7)
        #expect(r4, "time alone")
        cadence.restart(at: 0, now: 11)
        let r5 = cadence.isDue(total: 999, now: 11.1)
        #expect(!r5)
        let r6 = cadence.isDue(total: 1000, now: 11.1)
        #expect(r6)
    }
}
