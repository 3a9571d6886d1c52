import HaulCore
import Testing

/// The daemon's one scheduler, driven by event scripts: no socket, no store, no sleep.
@Suite("Transfer scheduler: event scripts")
struct TransferSchedulerTests {
    private static let hostA = "http://a:80"
    private static let hostB = "http://b:80"

    private func task(_ n: Int64, host: String = hostA, priority: Int = 0, discretionary: Bool = false, notBefore: Double? = nil) -> TransferScheduler.Entry {
        .init(id: TransferID(.session, n), host: host, priority: priority, isDiscretionary: discretionary, notBefore: notBefore)
    }

    private func download(_ n: Int64, host: String = hostA, priority: Int = 0, notBefore: Double? = nil) -> TransferScheduler.Entry {
        .init(id: TransferID(.queue, n), host: host, priority: priority, notBefore: notBefore)
    }

    private func started(_ actions: [TransferScheduler.Action]) -> [TransferID] {
        actions.compactMap { if case .start(let id) = $0 { id } else { nil } }
    }

    private func yielded(_ actions: [TransferScheduler.Action]) -> [TransferID] {
        actions.compactMap { if case .yield(let id) = $0 { id } else { nil } }
    }

    /// Standby transfers asked to yield while their runs wait for a slot.
    private func yieldedIfWaiting(_ actions: [TransferScheduler.Action]) -> [TransferID] {
        actions.compactMap { if case .yieldIfWaiting(let id) = $0 { id } else { nil } }
    }

    @Test("The concurrency limit holds over both owners; an end starts the next")
    func concurrencyAcrossOwners() {
        var scheduler = TransferScheduler(limits: .init(maximumConcurrent: 3, maximumPerHost: 10))
        var starts: [TransferID] = []
        for n in 1...4 {
            starts += self.started(scheduler.add(self.task(Int64(n), host: "http://t\(n):80"), now: 0))
            starts += self.started(scheduler.add(self.download(Int64(n), host: "http://d\(n):80"), now: 0))
        }
        #expect(starts.count == 3)
        #expect(scheduler.runningCount == 3)
        #expect(scheduler.waitingCount == 5)
        let next = self.started(scheduler.ended(starts[0], now: 1))
        #expect(next.count == 1)
        #expect(scheduler.runningCount == 3)
        let r1 = scheduler.ended(TransferID(.queue, 99), now: 1)
        #expect(self.started(r1).isEmpty, "an unknown end changes nothing")
    }

    @Test("Per-host caps count background tasks and queue downloads together")
    func perHostAcrossOwners() {
        var scheduler = TransferScheduler(limits: .init(maximumConcurrent: 16, maximumPerHost: 4))
        var starts: [TransferID] = []
        for n in 1...4 {
            starts += self.started(scheduler.add(self.task(Int64(n)), now: 0))
            starts += self.started(scheduler.add(self.download(Int64(n)), now: 0))
        }
        #expect(starts.count == 4)
        #expect(scheduler.runningCount(host: Self.hostA) == 4)
        // Fair: two of each owner, not the first four added of one.
        #expect(starts.filter { $0.owner == .session }.count == 2)
        #expect(starts.filter { $0.owner == .queue }.count == 2)
        // Another host is not held back by a full one.
        let r2 = scheduler.add(self.download(9, host: Self.hostB), now: 0)
        #expect(self.started(r2) == [TransferID(.queue, 9)])
    }

    @Test("Fairness: a session with many waiting tasks does not starve the queue, nor the reverse")
    func fairness() {
        var scheduler = TransferScheduler(limits: .init(maximumConcurrent: 2, maximumPerHost: 2))
        for n in 1...50 { _ = scheduler.add(self.task(Int64(n)), now: 0) }
        _ = scheduler.add(self.download(1), now: 0)
        _ = scheduler.add(self.download(2), now: 0)
        // Two tasks started before the downloads arrived; from now on slots alternate.
        #expect(scheduler.isRunning(TransferID(.session, 1)) && scheduler.isRunning(TransferID(.session, 2)))
        let first = self.started(scheduler.ended(TransferID(.session, 1), now: 1))
        #expect(first == [TransferID(.queue, 1)])
        let second = self.started(scheduler.ended(TransferID(.session, 2), now: 1))
        #expect(second == [TransferID(.session, 3)], "now the session has fewer running")
    }

    @Test("Priorities first, then the oldest")
    func priorities() {
        var scheduler = TransferScheduler(limits: .init(maximumConcurrent: 1, maximumPerHost: 1))
        let r3 = scheduler.add(self.download(1), now: 0)
        #expect(self.started(r3) == [TransferID(.queue, 1)])
        _ = scheduler.add(self.download(2), now: 0)
        _ = scheduler.add(self.download(3, priority: 5), now: 0)
        _ = scheduler.add(self.download(4, priority: 5), now: 0)
        let r4 = scheduler.ended(TransferID(.queue, 1), now: 1)
        #expect(self.started(r4) == [TransferID(.queue, 3)])
        let r5 = scheduler.ended(TransferID(.queue, 3), now: 1)
        #expect(self.started(r5) == [TransferID(.queue, 4)])
        let r6 = scheduler.ended(TransferID(.queue, 4), now: 1)
        #expect(self.started(r6) == [TransferID(.queue, 2)])
    }

    @Test("A discretionary task yields its slot to a non-discretionary one, once, and runs again later")
    func discretionaryYield() {
        var scheduler = TransferScheduler(limits: .init(maximumConcurrent: 1, maximumPerHost: 4))
        let r7 = scheduler.add(self.task(1, discretionary: true), now: 0)
        #expect(self.started(r7) == [TransferID(.session, 1)])
        let actions = scheduler.add(self.download(1, host: Self.hostB), now: 0)
        #expect(self.yielded(actions) == [TransferID(.session, 1)])
        #expect(self.started(actions).isEmpty, "the slot is held until the yielding transfer ended")
        let r8 = scheduler.timePassed(now: 1)
        #expect(self.yielded(r8).isEmpty, "no second victim for the same waiter")
        let r9 = scheduler.ended(TransferID(.session, 1), now: 1)
        #expect(self.started(r9) == [TransferID(.queue, 1)])
        _ = scheduler.add(self.task(1, discretionary: true), now: 1)
        #expect(scheduler.isWaiting(TransferID(.session, 1)))
        let r10 = scheduler.ended(TransferID(.queue, 1), now: 2)
        #expect(self.started(r10) == [TransferID(.session, 1)])
        // Running again, it yields again to the next that waits (and only while it runs).
        let r11 = scheduler.add(self.download(2, host: Self.hostB), now: 3)
        #expect(self.yielded(r11) == [TransferID(.session, 1)])
        let r12 = scheduler.ended(TransferID(.session, 1), now: 3)
        #expect(self.started(r12) == [TransferID(.queue, 2)])
        #expect(self.yielded(scheduler.add(self.download(3, host: Self.hostB), now: 4)).isEmpty, "nothing discretionary runs")
    }

    @Test("A non-discretionary task never yields, and a discretionary one waits behind it")
    func nonDiscretionaryKeepsItsSlot() {
        var scheduler = TransferScheduler(limits: .init(maximumConcurrent: 1, maximumPerHost: 4))
        _ = scheduler.add(self.task(1), now: 0)
        let actions = scheduler.add(self.task(2, discretionary: true), now: 0)
        #expect(actions.isEmpty)
        _ = scheduler.add(self.task(3), now: 0)
        let r11 = scheduler.ended(TransferID(.session, 1), now: 1)
        #expect(self.started(r11) == [TransferID(.session, 3)])
    }

    @Test("Lowering a limit mid-run yields the lowest-ranked transfers at once; raising it starts more")
    func loweringLimits() {
        var scheduler = TransferScheduler(limits: .init(maximumConcurrent: 4, maximumPerHost: 4))
        for n in 1...4 { _ = scheduler.add(self.download(Int64(n), priority: n == 1 ? 9 : 0), now: 0) }
        _ = scheduler.add(self.download(5), now: 0)
        let lowered = scheduler.setLimits(.init(maximumConcurrent: 2, maximumPerHost: 4), now: 1)
        #expect(Set(self.yielded(lowered)) == [TransferID(.queue, 3), TransferID(.queue, 4)], "the newest of the lowest priority")
        #expect(self.started(lowered).isEmpty)
        // Yielded transfers end and come back: nothing starts while two run.
        for n: Int64 in [3, 4] {
            let r12 = scheduler.ended(TransferID(.queue, n), now: 2)
            #expect(self.started(r12).isEmpty)
            _ = scheduler.add(self.download(n), now: 2)
        }
        #expect(scheduler.runningCount == 2)
        let perHost = scheduler.setLimits(.init(maximumConcurrent: 2, maximumPerHost: 1), now: 3)
        #expect(self.yielded(perHost) == [TransferID(.queue, 2)])
        _ = scheduler.ended(TransferID(.queue, 2), now: 4)
        let raised = scheduler.setLimits(.init(maximumConcurrent: 8, maximumPerHost: 8), now: 5)
        #expect(Set(self.started(raised)) == [TransferID(.queue, 3), TransferID(.queue, 4), TransferID(.queue, 5)])
    }

    @Test("Retry times: not a candidate before notBefore, and the scheduler asks to be woken then")
    func retryTimes() {
        var scheduler = TransferScheduler(limits: .init(maximumConcurrent: 4, maximumPerHost: 4))
        let actions = scheduler.add(self.download(1, notBefore: 10), now: 0)
        #expect(actions == [.wakeUp(at: 10)])
        let r13 = scheduler.add(self.download(2, notBefore: 5), now: 0)
        #expect(r13 == [.wakeUp(at: 5)])
        let r14 = scheduler.add(self.download(3, notBefore: 7), now: 0)
        #expect(r14.isEmpty, "the earlier wake-up stands")
        let r15 = scheduler.timePassed(now: 4.9)
        #expect(self.started(r15).isEmpty)
        let atFive = scheduler.timePassed(now: 5)
        #expect(self.started(atFive) == [TransferID(.queue, 2)])
        #expect(atFive.contains(.wakeUp(at: 7)))
        _ = scheduler.withdraw(TransferID(.queue, 3), now: 6)
        let r16 = scheduler.timePassed(now: 10)
        #expect(self.started(r16) == [TransferID(.queue, 1)])
        #expect(scheduler.waitingCount == 0)
    }

    @Test("Withdrawn transfers never start; a repeated add replaces the waiting entry")
    func withdrawAndReplace() {
        var scheduler = TransferScheduler(limits: .init(maximumConcurrent: 1, maximumPerHost: 1))
        _ = scheduler.add(self.download(1), now: 0)
        for n in 2...1000 { _ = scheduler.add(self.download(Int64(n)), now: 0) }
        for n in stride(from: 2, through: 1000, by: 2) { _ = scheduler.withdraw(TransferID(.queue, Int64(n)), now: 0) }
        _ = scheduler.add(self.download(999, priority: 3), now: 0)
        #expect(scheduler.waitingCount == 499)
        let r17 = scheduler.ended(TransferID(.queue, 1), now: 1)
        #expect(self.started(r17) == [TransferID(.queue, 999)])
        var order: [Int64] = []
        var current = TransferID(.queue, 999)
        while let next = self.started(scheduler.ended(current, now: 2)).first {
            order.append(next.number)
            current = next
        }
        #expect(order == Array(stride(from: 3, through: 997, by: 2)))
    }

    @Test("Priority, then age, within the global and per-host limits; a delayed entry waits for its time")
    func startOrder() {
        var scheduler = TransferScheduler(limits: .init(maximumConcurrent: 1, maximumPerHost: 2))
        _ = scheduler.add(self.download(100, host: "z"), now: 0)  // holds the only slot
        var actions: [TransferScheduler.Action] = []
        for entry in [
            self.download(1, host: "a"), self.download(2, host: "a"), self.download(3, host: "a", priority: 5),
            self.download(4, host: "b"), self.download(5, host: "c", priority: 9, notBefore: 100),
        ] {
            actions += scheduler.add(entry, now: 0)
        }
        #expect(self.started(actions).isEmpty)
        #expect(actions.contains(.wakeUp(at: 100)))
        let freed = scheduler.ended(TransferID(.queue, 100), now: 1)
        #expect(self.started(freed) == [TransferID(.queue, 3)], "the highest priority first")
        let raised = scheduler.setLimits(.init(maximumConcurrent: 3, maximumPerHost: 2), now: 1)
        #expect(self.started(raised) == [TransferID(.queue, 1), TransferID(.queue, 4)], "then the oldest, while its host has room")
        let later = scheduler.timePassed(now: 200)
        #expect(self.started(later).isEmpty, "every slot is taken")
        let next = scheduler.ended(TransferID(.queue, 4), now: 200)
        #expect(self.started(next) == [TransferID(.queue, 5)], "the delayed one, due now, outranks the rest")
    }

    @Test("After shutDown nothing starts")
    func shutdown() {
        var scheduler = TransferScheduler(limits: .init(maximumConcurrent: 1, maximumPerHost: 1))
        _ = scheduler.add(self.task(1), now: 0)
        _ = scheduler.add(self.task(2), now: 0)
        scheduler.shutDown()
        let r18 = scheduler.ended(TransferID(.session, 1), now: 1)
        #expect(self.started(r18).isEmpty)
        #expect(scheduler.runningCount == 0)
    }

    @Test("Adding and withdrawing in bulk decides as one at a time does; an unchanged entry keeps its place")
    func bulkMatchesOneByOne() {
        var rng = SystemRandomNumberGenerator()
        let hosts = ["a", "b", "c"]
        // Given best first, so that one at a time starts what the bulk decision starts.
        let entries: [TransferScheduler.Entry] = (1...400).map { n in
            self.download(Int64(n), host: hosts[Int(n) % 3], priority: Int.random(in: 0...2, using: &rng),
                          notBefore: n % 7 == 0 ? 50 : nil)
        }.sorted { ($0.priority, -$0.id.number) > ($1.priority, -$1.id.number) }
        let withdrawn = entries.filter { $0.id.number % 5 == 0 }.map(\.id)
        var one = TransferScheduler(limits: .init(maximumConcurrent: 4, maximumPerHost: 2))
        var bulk = one
        for entry in entries { _ = one.add(entry, now: 0) }
        for id in withdrawn { _ = one.withdraw(id, now: 0) }
        _ = bulk.add(entries, now: 0)
        _ = bulk.add(Array(entries.prefix(100)), now: 0)  // again, unchanged: nothing moves
        _ = bulk.withdraw(withdrawn, now: 0)
        // A few more (each put in place, not sorted in), ranked among the rest.
        let few: [TransferScheduler.Entry] = (401...412).map { n in
            self.download(Int64(n), host: hosts[Int(n) % 3], priority: Int(n) % 3, notBefore: n == 405 ? 50 : nil)
        }
        for entry in few { _ = one.add(entry, now: 0) }
        _ = bulk.add(few, now: 0)
        #expect(Set(one.runningIDs) == Set(bulk.runningIDs))
        #expect(one.waitingCount == bulk.waitingCount)
        // The rest starts in the same order, the retries after their time.
        var orderOne: [TransferID] = []
        var orderBulk: [TransferID] = []
        for now in [0.0, 60] {
            while true {
                let running = one.runningIDs.sorted { $0.number < $1.number }
                guard let next = running.first else { break }
                orderOne += started(one.ended(next, now: now))
                orderBulk += started(bulk.ended(next, now: now))
                if one.runningCount == 0 { break }
            }
            _ = one.timePassed(now: 60)
            _ = bulk.timePassed(now: 60)
        }
        #expect(orderOne == orderBulk)
        #expect(!orderOne.isEmpty)
    }

    // MARK: - Look-ahead

    @Test("With a look-ahead, those that find a slot start in it, then as many more as standby; an admission moves one into the slots")
    func lookAheadStartsStandby() {
        var scheduler = TransferScheduler(limits: .init(maximumConcurrent: 2, maximumPerHost: 2, lookAhead: 2))
        let started = self.started(scheduler.add((1...6).map { self.download(Int64($0)) }, now: 0))
        #expect(started == (1...4).map { TransferID(.queue, Int64($0)) }, "the limit, then the look-ahead, in rank order")
        #expect(!scheduler.isStandby(TransferID(.queue, 1)) && !scheduler.isStandby(TransferID(.queue, 2)))
        #expect(scheduler.isStandby(TransferID(.queue, 3)) && scheduler.isStandby(TransferID(.queue, 4)))
        #expect(scheduler.standbyTotal == 2)
        // 1 ends; its slot went to 3 (the owner's gate), which is heard of after the end: until
        // then 5 starts in the slot the end freed (and waits at the gate for the next).
        #expect(self.started(scheduler.ended(TransferID(.queue, 1), now: 1)) == [TransferID(.queue, 5)])
        #expect(!scheduler.isStandby(TransferID(.queue, 5)))
        scheduler.admitted(TransferID(.queue, 3))
        #expect(scheduler.standbyTotal == 1)
        // The slots look full (2, 5, 3): the next end starts a standby one, not another in a slot.
        let next = scheduler.ended(TransferID(.queue, 2), now: 2)
        #expect(self.started(next) == [TransferID(.queue, 6)])
        #expect(scheduler.isStandby(TransferID(.queue, 6)))
        // An admission of a transfer that is not standby (ended, or started in a slot) changes nothing.
        scheduler.admitted(TransferID(.queue, 1))
        scheduler.admitted(TransferID(.queue, 5))
        scheduler.admitted(TransferID(.queue, 99))
        #expect(scheduler.standbyTotal == 2)
        #expect(scheduler.runningCount == 4)
    }

    @Test("Without a look-ahead nothing is standby, and an admission changes nothing")
    func noLookAhead() {
        var scheduler = TransferScheduler(limits: .init(maximumConcurrent: 2, maximumPerHost: 2))
        #expect(self.started(scheduler.add((1...3).map { self.download(Int64($0)) }, now: 0)).count == 2)
        #expect(scheduler.standbyTotal == 0)
        #expect(!scheduler.isStandby(TransferID(.queue, 1)))
        scheduler.admitted(TransferID(.queue, 1))
        #expect(scheduler.runningCount == 2)
    }

    @Test("Standby transfers never keep one that finds a slot from starting: other hosts run while one host's wait")
    func standbyLeavesSlotsToOtherHosts() {
        var scheduler = TransferScheduler(limits: .init(maximumConcurrent: 5, maximumPerHost: 1, lookAhead: 5))
        var entries: [TransferScheduler.Entry] = []
        for (index, host) in ["a", "b", "c", "d", "e"].enumerated() {
            for n in 0..<10 { entries.append(self.download(Int64(index * 100 + n), host: "http://\(host):80")) }
        }
        let started = self.started(scheduler.add(entries, now: 0))
        let inSlots = started.filter { !scheduler.isStandby($0) }.map(\.number).sorted()
        #expect(inSlots == [0, 100, 200, 300, 400], "one per host, all five hosts")
        #expect(scheduler.standbyTotal == 5)
        // The standby ones are the best-ranked of the rest: host a's next, within the look-ahead per host.
        #expect(started.filter { scheduler.isStandby($0) }.map(\.number).sorted() == [1, 2, 3, 4, 5])
    }

    @Test("The look-ahead counts per host too: a host's standby places do not hold another's back")
    func lookAheadPerHost() {
        var scheduler = TransferScheduler(limits: .init(maximumConcurrent: 1, maximumPerHost: 1, lookAhead: 2))
        var started = self.started(scheduler.add((1...4).map { self.download(Int64($0)) }, now: 0))
        #expect(started.count == 3, "one in the slot, two standby")
        scheduler = TransferScheduler(limits: .init(maximumConcurrent: 1, maximumPerHost: 1, lookAhead: 1))
        started = self.started(scheduler.add((1...4).map { self.download(Int64($0)) }, now: 0))
        #expect(started.count == 2)
        started = self.started(scheduler.add(self.download(9, host: Self.hostB), now: 0))
        #expect(started.isEmpty, "the look-ahead is taken: host b's waits in the queue")
        scheduler = TransferScheduler(limits: .init(maximumConcurrent: 2, maximumPerHost: 1, lookAhead: 1))
        _ = scheduler.add((1...4).map { self.download(Int64($0)) }, now: 0)
        started = self.started(scheduler.add(self.download(9, host: Self.hostB), now: 0))
        #expect(started == [TransferID(.queue, 9)], "a free slot on another host is taken")
        #expect(!scheduler.isStandby(TransferID(.queue, 9)))
    }

    @Test("A better-ranked transfer that finds no place makes the lowest-ranked standby of its owner yield, once")
    func betterRankYieldsStandby() {
        var scheduler = TransferScheduler(limits: .init(maximumConcurrent: 2, maximumPerHost: 4, lookAhead: 2))
        _ = scheduler.add((10...13).map { self.download(Int64($0)) }, now: 0)
        #expect(scheduler.isStandby(TransferID(.queue, 12)) && scheduler.isStandby(TransferID(.queue, 13)))
        // A worse-ranked one waits, nothing yields.
        var actions = scheduler.add(self.download(20), now: 1)
        #expect(actions.isEmpty)
        // An older one (moved up, or retried) takes the place of the lowest-ranked standby.
        actions = scheduler.add(self.download(5), now: 1)
        #expect(self.yieldedIfWaiting(actions) == [TransferID(.queue, 13)] && self.yielded(actions).isEmpty)
        #expect(self.started(actions).isEmpty)
        // Decided again before the yield ended: no second victim.
        actions = scheduler.add(self.download(21), now: 1)
        #expect(self.yieldedIfWaiting(actions).isEmpty)
        // The yielded one ends (it never fetched anything) and the better one starts in its place.
        actions = scheduler.ended(TransferID(.queue, 13), now: 2)
        #expect(self.started(actions) == [TransferID(.queue, 5)])
        #expect(scheduler.isStandby(TransferID(.queue, 5)))
        // Transfers in slots never yield to it, nor does another owner's standby.
        var other = TransferScheduler(limits: .init(maximumConcurrent: 1, maximumPerHost: 4, lookAhead: 1))
        _ = other.add(self.task(10), now: 0)
        _ = other.add(self.download(11), now: 0)
        #expect(!other.isStandby(TransferID(.session, 10)))
        #expect(other.isStandby(TransferID(.queue, 11)))
        actions = other.add(self.task(3), now: 1)
        #expect(self.yieldedIfWaiting(actions).isEmpty, "a session task does not bump a queue download")
        actions = other.add(self.download(4), now: 1)
        #expect(self.yieldedIfWaiting(actions) == [TransferID(.queue, 11)])
    }

    @Test("A standby transfer that took its slot before it could yield runs on; the better-ranked one takes the standby place it left")
    func refusedYield() {
        var scheduler = TransferScheduler(limits: .init(maximumConcurrent: 2, maximumPerHost: 4, lookAhead: 2))
        _ = scheduler.add((10...13).map { self.download(Int64($0)) }, now: 0)
        var actions = scheduler.add(self.download(5), now: 1)
        #expect(self.yieldedIfWaiting(actions) == [TransferID(.queue, 13)])
        // Download 10 ended on the loop and 13 took its slot there before its owner could stop
        // it (the core hears of 10's end later): 13 holds a slot now, and 5 starts ahead in
        // the place 13 left, with no other standby one bumped.
        actions = scheduler.yieldRefused(TransferID(.queue, 13), now: 2)
        #expect(!scheduler.isStandby(TransferID(.queue, 13)))
        #expect(self.started(actions) == [TransferID(.queue, 5)] && scheduler.isStandby(TransferID(.queue, 5)))
        #expect(self.yieldedIfWaiting(actions).isEmpty && self.yielded(actions).isEmpty)
        // Its admission, heard after, changes nothing; a refusal nobody asked for is ignored.
        scheduler.admitted(TransferID(.queue, 13))
        #expect(scheduler.yieldRefused(TransferID(.queue, 11), now: 2).isEmpty)
        #expect(scheduler.yieldRefused(TransferID(.queue, 13), now: 2).isEmpty)
        // 10's end heard: 11 and 13 hold both slots, 12 and 5 wait for them.
        #expect(scheduler.ended(TransferID(.queue, 10), now: 3).isEmpty)
        #expect(scheduler.isStandby(TransferID(.queue, 12)) && scheduler.isStandby(TransferID(.queue, 5)))
    }

    @Test("Lowering a limit with a look-ahead: those in slots beyond it yield, standby ones beyond the look-ahead yield")
    func lowerLimitWithLookAhead() {
        var scheduler = TransferScheduler(limits: .init(maximumConcurrent: 3, maximumPerHost: 8, lookAhead: 3))
        _ = scheduler.add((1...6).map { self.download(Int64($0)) }, now: 0)
        let actions = scheduler.setLimits(.init(maximumConcurrent: 1, maximumPerHost: 8, lookAhead: 1), now: 1)
        // In slots: 1 kept, 2 and 3 yield. Standby: one place (4), 5 and 6 yield.
        #expect(Set(self.yielded(actions)) == [TransferID(.queue, 2), TransferID(.queue, 3)])
        #expect(Set(self.yieldedIfWaiting(actions)) == [TransferID(.queue, 5), TransferID(.queue, 6)], "unless they took a slot meanwhile")
        #expect(self.started(actions).isEmpty)
    }

    @Test("A non-discretionary transfer started ahead that finds every slot held makes a discretionary one in a slot yield")
    func standbyBlockedYieldsDiscretionary() {
        var scheduler = TransferScheduler(limits: .init(maximumConcurrent: 1, maximumPerHost: 4, lookAhead: 1))
        _ = scheduler.add(self.task(1, discretionary: true), now: 0)
        let actions = scheduler.add(self.task(2), now: 1)
        #expect(self.started(actions) == [TransferID(.session, 2)], "it starts ahead, as standby")
        #expect(scheduler.isStandby(TransferID(.session, 2)))
        #expect(self.yielded(actions) == [TransferID(.session, 1)], "and the discretionary one gives up its slot")
        // One that finds a slot makes nothing yield.
        var roomy = TransferScheduler(limits: .init(maximumConcurrent: 2, maximumPerHost: 4, lookAhead: 2))
        _ = roomy.add(self.task(1, discretionary: true), now: 0)
        #expect(self.yielded(roomy.add(self.task(2), now: 1)).isEmpty)
        #expect(!roomy.isStandby(TransferID(.session, 2)))
    }

    @Test("A host capped when room was refused elsewhere: nothing more starts on it until one of its transfers ends or room comes back; other hosts run on")
    func hostCap() {
        var scheduler = TransferScheduler(limits: .init(maximumConcurrent: 10, maximumPerHost: 4))
        var starts: [TransferID] = []
        for n in 1...8 { starts += self.started(scheduler.add(self.download(Int64(n)), now: 0)) }
        #expect(starts.map(\.number) == [1, 2, 3, 4])
        // Download 4 found the fleet's connections to the host all held: it waits again, first
        // in line, and the host is capped at the three others.
        #expect(scheduler.capHost(Self.hostA, excluding: starts[3], now: 1).isEmpty)
        #expect(scheduler.cap(host: Self.hostA) == 3)
        #expect(self.started(scheduler.ended(starts[3], now: 1)).isEmpty, "its own end starts nothing on the capped host")
        #expect(self.started(scheduler.add(self.download(4), now: 1)).isEmpty)
        #expect(self.started(scheduler.add(self.download(20, host: Self.hostB), now: 1)).map(\.number) == [20], "another host is not capped")
        // One of the host's own transfers ends: it gave a connection back, one more starts.
        #expect(self.started(scheduler.ended(starts[0], now: 2)).map(\.number) == [4])
        #expect(scheduler.runningCount(host: Self.hostA) == 3)
        // Another daemon gave one back: one more, not as many as the limit allows.
        #expect(self.started(scheduler.raiseHostCap(Self.hostA, now: 3)).map(\.number) == [5])
        #expect(scheduler.runningCount(host: Self.hostA) == 4 && scheduler.cap(host: Self.hostA) == 4)
        // The cap lifted: the limits alone decide again.
        #expect(self.started(scheduler.ended(TransferID(.queue, 2), now: 4)).map(\.number) == [6])
        #expect(self.started(scheduler.uncapHost(Self.hostA, now: 4)).isEmpty, "the host is at its limit")
        #expect(scheduler.cap(host: Self.hostA) == nil)
        #expect(self.started(scheduler.ended(TransferID(.queue, 3), now: 5)).map(\.number) == [7])
        #expect(scheduler.raiseHostCap(Self.hostB, now: 5).isEmpty, "raising a host without a cap changes nothing")
        #expect(scheduler.cap(host: Self.hostB) == nil)
        // Raised by many at once (a list read again), never above the limit.
        #expect(scheduler.capHost(Self.hostA, excluding: nil, now: 6).isEmpty && scheduler.cap(host: Self.hostA) == 4)
        #expect(scheduler.raiseHostCap(Self.hostA, by: 50, now: 6).isEmpty && scheduler.cap(host: Self.hostA) == 4)
    }
    @Test("A host no transfer needs any more is forgotten; a new host given its number starts with no counts, and a host in use keeps its own")
    func hostsForgottenAndReused() {
        var scheduler = TransferScheduler(limits: .init(maximumConcurrent: 4, maximumPerHost: 2, lookAhead: 2))
        var starts: [TransferID] = []
        for n in 1...3 { starts += self.started(scheduler.add(self.download(Int64(n)), now: 0)) }
        #expect(starts.map(\.number) == [1, 2, 3], "two in slots, one ahead (standby)")
        #expect(scheduler.hostsInUse == 1)
        // Many hosts come and go (a daemon fed URLs of every host it finds): each is forgotten
        // once its last transfer ended, and host A's counts are untouched by the reuse.
        for n in 10..<60 {
            let host = "http://h\(n):80"
            #expect(self.started(scheduler.add(self.download(Int64(n), host: host), now: 1)).map(\.number) == [Int64(n)])
            #expect(scheduler.runningCount(host: host) == 1)
            #expect(self.started(scheduler.ended(TransferID(.queue, Int64(n)), now: 1)).isEmpty)
            #expect(scheduler.runningCount(host: host) == 0)
            #expect(scheduler.hostsInUse == 1)
        }
        #expect(scheduler.runningCount(host: Self.hostA) == 3)
        #expect(scheduler.isStandby(TransferID(.queue, 3)))
        // Host A still counts its two slots and its standby one: nothing more runs on it.
        #expect(self.started(scheduler.add(self.download(4), now: 2)).map(\.number) == [4], "a second standby (look-ahead 2)")
        #expect(self.started(scheduler.add(self.download(5), now: 2)).isEmpty)
        #expect(scheduler.readyCount(host: Self.hostA) == 1)
        // A capped host with nothing running is kept (the cap is remembered), then forgotten
        // once the cap lifts.
        _ = scheduler.capHost(Self.hostB, excluding: nil, now: 3)
        #expect(scheduler.cap(host: Self.hostB) == 0 && scheduler.hostsInUse == 2)
        #expect(self.started(scheduler.add(self.download(30, host: Self.hostB), now: 3)).isEmpty, "capped at 0")
        #expect(self.started(scheduler.uncapHost(Self.hostB, now: 3)).map(\.number) == [30])
        #expect(self.started(scheduler.ended(TransferID(.queue, 30), now: 4)).isEmpty)
        #expect(scheduler.hostsInUse == 1 && scheduler.cap(host: Self.hostB) == nil)
        _ = scheduler.add(self.download(50, host: "http://d:80", notBefore: 100), now: 7)
        #expect(scheduler.hostsInUse == 1, "a transfer waiting for its retry time holds no host")
        #expect(scheduler.withdraw(TransferID(.queue, 5), now: 8).isEmpty)
        #expect(scheduler.readyCount(host: Self.hostA) == 0 && scheduler.hostsInUse == 1, "host A still runs")
        // A ready transfer withdrawn, or taken out as an alternative, was its host's last use.
        var full = TransferScheduler(limits: .init(maximumConcurrent: 1, maximumPerHost: 1))
        _ = full.add(self.download(1), now: 0)
        _ = full.add(self.download(2, host: Self.hostB), now: 0)
        _ = full.add(self.download(3, host: "http://c:80"), now: 0)
        #expect(full.hostsInUse == 3)
        _ = full.withdraw(TransferID(.queue, 2), now: 1)
        #expect(full.takeReady(host: "http://c:80", owner: .queue, limit: 4).map(\.id.number) == [3])
        #expect(full.hostsInUse == 1)
        #expect(self.started(full.add(self.download(4, host: "http://c:80"), now: 2)).isEmpty)
        #expect(self.started(full.ended(TransferID(.queue, 1), now: 3)).map(\.number) == [4], "the new host C counts from zero")
        #expect(full.hostsInUse == 1 && full.runningCount(host: Self.hostA) == 0)
        // A host whose last running transfer ended while others of it wait is kept: its queue
        // is still its own when a new host comes.
        var busy = TransferScheduler(limits: .init(maximumConcurrent: 2, maximumPerHost: 2))
        _ = busy.add(self.download(1, host: Self.hostB), now: 0)
        _ = busy.add(self.download(2), now: 0)
        _ = busy.add(self.download(3, host: Self.hostB), now: 0)
        _ = busy.add(self.download(4, priority: 5), now: 0)
        #expect(self.started(busy.ended(TransferID(.queue, 1), now: 1)).map(\.number) == [4], "the higher priority takes B's slot")
        #expect(busy.runningCount(host: Self.hostB) == 0 && busy.readyCount(host: Self.hostB) == 1)
        _ = busy.add(self.download(5, host: "http://c:80", priority: 1), now: 1)
        #expect(busy.readyCount(host: Self.hostB) == 1 && busy.readyCount(host: "http://c:80") == 1)
        #expect(self.started(busy.ended(TransferID(.queue, 2), now: 2)).map(\.number) == [5])
        #expect(self.started(busy.ended(TransferID(.queue, 4), now: 3)).map(\.number) == [3])
        #expect(busy.runningCount(host: Self.hostB) == 1 && busy.runningCount(host: "http://c:80") == 1)
    }

    @Test("Alternatives: the next ready transfers of a host are taken out (best first, none started meanwhile); one started in another's slot takes it over; the rest come back in their places")
    func alternativesTakeOverASlot() {
        var scheduler = TransferScheduler(limits: .init(maximumConcurrent: 2, maximumPerHost: 2))
        var starts: [TransferID] = []
        for n in 1...7 { starts += self.started(scheduler.add(self.download(Int64(n)), now: 0)) }
        starts += self.started(scheduler.add(self.download(30, host: Self.hostB), now: 0))
        #expect(starts.map(\.number) == [1, 2])
        // Download 2's daemon offers 3, 4 and 5 with its claim.
        let taken = scheduler.takeReady(host: Self.hostA, owner: .queue, limit: 3)
        #expect(taken.map(\.id.number) == [3, 4, 5], "best first")
        let otherOwner = scheduler.takeReady(host: Self.hostA, owner: .session, limit: 3)
        #expect(otherOwner.isEmpty, "another owner's queue")
        #expect(!scheduler.isWaiting(TransferID(.queue, 3)) && scheduler.waitingCount == 3, "6, 7 and the other host's wait")
        // 2 was another daemon's; 4 started in its slot.
        let replaced = scheduler.replace(running: TransferID(.queue, 2), with: taken[1])
        #expect(replaced)
        #expect(!scheduler.isRunning(TransferID(.queue, 2)) && !scheduler.isWaiting(TransferID(.queue, 2)))
        #expect(scheduler.isRunning(TransferID(.queue, 4)) && scheduler.runningCount == 2 && scheduler.runningCount(host: Self.hostA) == 2)
        let refused = [
            scheduler.replace(running: TransferID(.queue, 2), with: taken[2]),
            scheduler.replace(running: TransferID(.queue, 1), with: taken[1]),
            scheduler.replace(running: TransferID(.queue, 1), with: self.download(31, host: Self.hostB)),
        ]
        #expect(refused == [false, false, false], "2 holds no slot any more; 4 runs already; another host's count would be wrong")
        // 3 and 5 come back: full slots start nothing; then ends start them in order.
        let back = scheduler.add([taken[0], taken[2]], now: 1)
        #expect(self.started(back).isEmpty)
        let end1 = scheduler.ended(TransferID(.queue, 4), now: 2)
        #expect(self.started(end1).map(\.number) == [3], "the slot 4 took over is freed by 4's end")
        let end2 = scheduler.ended(TransferID(.queue, 1), now: 3)
        #expect(self.started(end2).map(\.number) == [5])
        let end3 = scheduler.ended(TransferID(.queue, 3), now: 4)
        #expect(self.started(end3).map(\.number) == [6])
        let end4 = scheduler.ended(TransferID(.queue, 5), now: 5)
        #expect(self.started(end4).map(\.number) == [7])
        let end5 = scheduler.ended(TransferID(.queue, 6), now: 6)
        #expect(self.started(end5).map(\.number) == [30])
    }
}
