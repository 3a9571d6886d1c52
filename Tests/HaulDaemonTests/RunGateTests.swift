import Foundation
import HaulCore
@testable import HaulDaemon
import HaulEngine
import HaulTestSupport
import Logging
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
    static func enter(_ gate: RunGate, _ entry: TransferScheduler.Entry, lane: RunGate.Lane? = nil, order: Order) -> Task<Bool, Never> {
        Task {
            do {
                try await gate.enter(entry, lane: lane, number: gate.issueNumber())
                order.append(entry.id.number)
                return true
            } catch {
                return false
            }
        }
    }

    /// Waits (at most 5 s) until the entries admitted are `expected`, in order: a wrong one
    /// admitted fails the test instead of leaving it waiting for the right one forever.
    static func waitUntil(_ order: Order, is expected: [Int64]) async throws {
        for _ in 0..<500 where order.all.count < expected.count { try await Task.sleep(for: .milliseconds(10)) }
        #expect(order.all == expected)
    }

    /// Waits (at most 5 s) until the entries admitted are `expected`, in any order: for waiters
    /// admitted at once, whose tasks resume side by side and record in either order.
    static func waitUntil(_ order: Order, admitted expected: Set<Int64>) async throws {
        for _ in 0..<500 where order.all.count < expected.count { try await Task.sleep(for: .milliseconds(10)) }
        #expect(Set(order.all) == expected && order.all.count == expected.count)
    }

    /// Waits (at most 5 s) until `count` runs wait at the gate.
    static func waitUntil(_ gate: RunGate, waiting count: Int) async throws {
        for _ in 0..<500 where gate.counts.waiting != count { try await Task.sleep(for: .milliseconds(10)) }
        #expect(gate.counts.waiting == count)
    }

    @Test("Without a task: a slot that fits is taken at once, one that does not waits in line with a callback, ranked with the tasks; a waiter taken out of the line is never admitted")
    func takesAndWaitsWithoutTasks() async throws {
        let gate = RunGate(limits: .init(maximumConcurrent: 2, maximumPerHost: 2))
        #expect(gate.take(Self.entry(1, host: "a")))
        #expect(gate.take(Self.entry(2, host: "a")))
        #expect(!gate.take(Self.entry(3, host: "a")), "both slots are taken")
        #expect(gate.counts == (admitted: 2, waiting: 0), "a refused take does not wait")
        let admitted = Mutex<[Int64]>([])
        // A host run's lane waits (ranked low), a run's task waits (ranked high), another lane
        // waits and is taken out again.
        gate.enqueue(Self.entry(4, host: "a"), number: gate.issueNumber()) { admitted.withLock { $0.append(4) } }
        let order = Order()
        let task = Self.enter(gate, Self.entry(5, host: "a", priority: 5), order: order)
        try await Self.waitUntil(gate, waiting: 2)
        let withdrawn = gate.issueNumber()
        gate.enqueue(Self.entry(6, host: "a"), number: withdrawn) { admitted.withLock { $0.append(6) } }
        #expect(gate.counts.waiting == 3)
        #expect(gate.cancelWaiting(withdrawn))
        #expect(!gate.cancelWaiting(withdrawn), "out of the line already")
        // The first slot back goes to the better-ranked task, the second to the callback.
        gate.leave(host: "a")
        try await Self.waitUntil(order, admitted: [5])
        #expect(admitted.withLock { $0 }.isEmpty)
        gate.leave(host: "a")
        #expect(admitted.withLock { $0 } == [4], "called as the slot is taken, on the thread that gave it back")
        #expect(gate.counts == (admitted: 2, waiting: 0))
        // A callback that fits at once is called at once.
        gate.leave(host: "a")
        gate.enqueue(Self.entry(7, host: "b"), number: gate.issueNumber()) { admitted.withLock { $0.append(7) } }
        #expect(admitted.withLock { $0 } == [4, 7])
        #expect(gate.counts == (admitted: 2, waiting: 0))
        _ = await task.value
    }

    @Test("Free slots are taken at once, within both limits; a leave admits the best-ranked waiter that fits")
    func admitsByRankWithinLimits() async throws {
        let gate = RunGate(limits: .init(maximumConcurrent: 2, maximumPerHost: 1))
        let order = Order()
        try await gate.enter(Self.entry(1, host: "a"), number: gate.issueNumber())
        try await gate.enter(Self.entry(2, host: "b"), number: gate.issueNumber())
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
        try await Self.waitUntil(order, is: [3])
        // Host a's frees: the higher priority goes first though it came later.
        gate.leave(host: "a")
        try await Self.waitUntil(order, is: [3, 8])
        try await Self.waitUntil(gate, waiting: 1)
        gate.leave(host: "a")
        try await Self.waitUntil(order, is: [3, 8, 7])
        #expect(gate.counts.admitted == 2)
        for task in [low, high, other] { task.cancel() }
    }

    @Test("A waiter whose task is cancelled leaves the line and takes no slot")
    func cancelledWaiterLeaves() async throws {
        let gate = RunGate(limits: .init(maximumConcurrent: 1, maximumPerHost: 1))
        let order = Order()
        try await gate.enter(Self.entry(1), number: gate.issueNumber())
        let cancelled = Self.enter(gate, Self.entry(2), order: order)
        try await Self.waitUntil(gate, waiting: 1)
        let next = Self.enter(gate, Self.entry(3), order: order)
        try await Self.waitUntil(gate, waiting: 2)
        cancelled.cancel()
        #expect(await cancelled.value == false)
        try await Self.waitUntil(gate, waiting: 1)
        gate.leave(host: "a")
        try await Self.waitUntil(order, is: [3])
        next.cancel()
        // Cancelled before asking: no slot either, even a free one.
        gate.leave(host: "a")
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            do { try await gate.enter(Self.entry(4), number: gate.issueNumber()); return true } catch { return false }
        }
        #expect(await early.value == false)
        #expect(gate.counts.admitted == 0)
    }

    @Test("Raising the limits admits the waiters that now fit; lowering them admits nobody until below")
    func limitsChange() async throws {
        let gate = RunGate(limits: .init(maximumConcurrent: 1, maximumPerHost: 4))
        let order = Order()
        try await gate.enter(Self.entry(1), number: gate.issueNumber())
        let second = Self.enter(gate, Self.entry(2), order: order)
        let third = Self.enter(gate, Self.entry(3), order: order)
        try await Self.waitUntil(gate, waiting: 2)
        gate.setLimits(.init(maximumConcurrent: 3, maximumPerHost: 4))
        try await Self.waitUntil(order, admitted: [2, 3])
        #expect(gate.counts.admitted == 3)
        gate.setLimits(.init(maximumConcurrent: 1, maximumPerHost: 4))
        let fourth = Self.enter(gate, Self.entry(4), order: order)
        try await Self.waitUntil(gate, waiting: 1)
        gate.leave(host: "a")
        gate.leave(host: "a")
        // Two slots are still taken of a limit of one: the fourth waits.
        #expect(gate.counts.waiting == 1)
        gate.leave(host: "a")
        try await Self.waitUntil(order, admitted: [2, 3, 4])
        #expect(order.all.last == 4)
        for task in [second, third, fourth] { task.cancel() }
    }

    @Test("A lane shares its host's slots: each holds at most its share, and a slot given back goes to a run of the same lane, even one ranked lower than the other lane's")
    func lanesKeepTheirShare() async throws {
        #expect((0..<3).map { RunGate.Lane(index: $0, count: 3).share(of: 16) } == [6, 5, 5])
        #expect((0..<2).map { RunGate.Lane(index: $0, count: 2).share(of: 1) } == [1, 0])
        let gate = RunGate(limits: .init(maximumConcurrent: 10, maximumPerHost: 4))
        let order = Order()
        let zero = RunGate.Lane(index: 0, count: 2), one = RunGate.Lane(index: 1, count: 2)
        try await gate.enter(Self.entry(1), lane: zero, number: gate.issueNumber())
        try await gate.enter(Self.entry(2), lane: zero, number: gate.issueNumber())
        // Lane 0 has its two of the host's four: the third waits though the host has room.
        let third = Self.enter(gate, Self.entry(3), lane: zero, order: order)
        try await Self.waitUntil(gate, waiting: 1)
        try await gate.enter(Self.entry(4), lane: one, number: gate.issueNumber())
        try await gate.enter(Self.entry(5, host: "b"), number: gate.issueNumber())
        // Lane 1 full too now; its waiter ranks above lane 0's.
        try await gate.enter(Self.entry(6), lane: one, number: gate.issueNumber())
        let seventh = Self.enter(gate, Self.entry(7, priority: 9), lane: one, order: order)
        try await Self.waitUntil(gate, waiting: 2)
        #expect(gate.counts == (admitted: 5, waiting: 2))
        gate.leave(host: "a", lane: zero)
        try await Self.waitUntil(order, is: [3])
        gate.leave(host: "a", lane: one)
        try await Self.waitUntil(order, is: [3, 7])
        let (thirdIn, seventhIn) = (await third.value, await seventh.value)
        #expect(thirdIn && seventhIn)
        // A run with no lane (a small body) counts against the host's limit, not a lane's.
        let unlaned = Self.enter(gate, Self.entry(8), order: order)
        try await Self.waitUntil(gate, waiting: 1)
        gate.leave(host: "a", lane: one)
        try await Self.waitUntil(order, is: [3, 7, 8])
        let unlanedIn = await unlaned.value
        #expect(unlanedIn)
        #expect(gate.counts == (admitted: 5, waiting: 0))
        // The host's limit lowered to one: lane 1 has no share left, and its run is not stuck
        // for it (it waits for the host's room, as a run with no lane does).
        for _ in 0..<2 { gate.leave(host: "a", lane: zero) }
        gate.leave(host: "a", lane: one)
        gate.leave(host: "a")
        #expect(gate.counts == (admitted: 1, waiting: 0), "host b's alone")
        gate.setLimits(.init(maximumConcurrent: 10, maximumPerHost: 1))
        #expect(RunGate.Lane(index: 1, count: 2).share(of: 1) == 0)
        let late = Self.enter(gate, Self.entry(9), lane: one, order: order)
        try await Self.waitUntil(order, is: [3, 7, 8, 9])
        late.cancel()  // (a run still waiting leaves the line)
        let lateIn = await late.value
        #expect(lateIn)
    }

    @Test("A ticket is taken out of the line only while it holds no slot: a waiting one leaves it, one not entered yet is refused when it enters, one holding a slot or done with it stays")
    func withdrawal() async throws {
        let gate = RunGate(limits: .init(maximumConcurrent: 1, maximumPerHost: 1))
        var stops: [Int64] = []
        let holder = RunGate.Ticket(gate: gate, entry: Self.entry(1)) {}
        try await holder.enter()
        #expect(!holder.withdraw { stops.append(1) }, "it holds the slot")
        let waiting = RunGate.Ticket(gate: gate, entry: Self.entry(2, priority: 5)) {}
        let waited = Task {
            do { try await waiting.enter(); return true } catch { return false }
        }
        try await Self.waitUntil(gate, waiting: 1)
        #expect(waiting.withdraw { stops.append(2) })
        #expect(await waited.value == false, "its enter throws")
        #expect(gate.counts == (admitted: 1, waiting: 0))
        let early = RunGate.Ticket(gate: gate, entry: Self.entry(3)) {}
        #expect(early.withdraw { stops.append(3) })
        holder.leave()
        // A slot is free, and still the withdrawn ticket does not get it.
        await #expect(throws: CancellationError.self) { try await early.enter() }
        #expect(gate.counts == (admitted: 0, waiting: 0))
        #expect(!holder.withdraw { stops.append(4) }, "done with its slot: nothing to take back")
        #expect(stops == [2, 3])
    }

    @Test("A run stops unless admitted: one waiting for its slot ends stopped with nothing sent, one holding it runs on to the end")
    func runStopsUnlessAdmitted() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let core = TransferCore(limits: .init(maximumConcurrent: 1, maximumPerHost: 1, globalSpeedLimit: 0), logger: Logger(label: "run-gate-test"))
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-gate-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let gate = RunGate(limits: .init(maximumConcurrent: 1, maximumPerHost: 1))
        let owner = RecordingOwner()  // a transfer holds its owner unowned
        func run(_ name: String, _ number: Int64) -> TransferRun {
            let url = server.url("/file/\(name)?size=200000&rate=400000")
            return TransferRun(
                engine: core.engine,
                request: TransferRequest(url: url, method: "GET", headers: HTTPHeaderFields()),
                destination: .file(path: directory.appendingPathComponent(name).path, resume: nil),
                resourceTimeout: nil,
                admission: RunGate.Ticket(gate: gate, entry: Self.entry(number)) {},
                observer: TrackedTransfer(id: TransferID(.queue, number), owner: owner, url: url, startingPoint: nil, totalBytes: nil, cadence: .init())
            )
        }
        let first = run("first", 1)
        let firstEnded = Task { await Self.outcome(of: first) }
        for _ in 0..<500 where server.bodyBytesSent(forKey: "first") == 0 { try await Task.sleep(for: .milliseconds(10)) }
        let second = run("second", 2)
        let secondEnded = Task { await Self.outcome(of: second) }
        try await Self.waitUntil(gate, waiting: 1)
        #expect(!first.stopUnlessAdmitted(.pause), "fetching: left alone")
        #expect(second.stopUnlessAdmitted(.pause))
        guard case .stopped(.pause, nil, _) = await secondEnded.value else {
            Issue.record("the waiting run did not end stopped")
            return
        }
        guard case .completed(_, let total) = await firstEnded.value else {
            Issue.record("the admitted run did not complete")
            return
        }
        #expect(total == 200_000)
        #expect(server.bodyBytesSent(forKey: "second") == 0, "nothing asked for")
        // Given back right after the completion, on the run's loop.
        for _ in 0..<500 where gate.counts.admitted != 0 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(gate.counts == (admitted: 0, waiting: 0))
        withExtendedLifetime(owner) {}
        await core.shutdown()
    }

    @Test("A run's slot goes to a run on another loop only after the first run's completion told its owner: the end is heard before the admission")
    func endHeardBeforeAdmissionOnAnotherLoop() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let core = TransferCore(limits: .init(maximumConcurrent: 1, maximumPerHost: 1, globalSpeedLimit: 0), logger: Logger(label: "run-gate-test"))
        let engines = core.engines
        guard engines.count > 1 else {
            await core.shutdown()
            return  // one core: one loop, nothing runs beside
        }
        #expect(engines[0].eventLoop !== engines[1].eventLoop)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-gate-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let gate = RunGate(limits: .init(maximumConcurrent: 1, maximumPerHost: 1))
        let owner = RecordingOwner()
        let heard = Mutex<[String]>([])
        func run(_ name: String, _ number: Int64, on engine: TransferEngine) -> TransferRun {
            let url = server.url("/file/\(name)?size=100000&rate=1000000")
            return TransferRun(
                engine: engine,
                request: TransferRequest(url: url, method: "GET", headers: HTTPHeaderFields()),
                destination: .file(path: directory.appendingPathComponent(name).path, resume: nil),
                resourceTimeout: nil,
                admission: RunGate.Ticket(gate: gate, entry: Self.entry(number)) { heard.withLock { $0.append("\(name) admitted") } },
                observer: TrackedTransfer(id: TransferID(.queue, number), owner: owner, url: url, startingPoint: nil, totalBytes: nil, cadence: .init())
            )
        }
        let first = run("first", 1, on: engines[0])
        let second = run("second", 2, on: engines[1])
        let ended = Mutex(0)
        let done = AsyncStream<Void>.makeStream()
        for item in [("first", first), ("second", second)] {
            item.1.start { _ in
                // The owner takes its time to hear of the end (a queue's thread that is busy):
                // the slot is still this run's meanwhile.
                usleep(50_000)
                heard.withLock { $0.append("\(item.0) ended") }
                if ended.withLock({ $0 += 1; return $0 }) == 2 { done.continuation.finish() }
            }
            if item.0 == "first" {
                for _ in 0..<500 where server.bodyBytesSent(forKey: "first") == 0 { try await Task.sleep(for: .milliseconds(10)) }
            }
        }
        for await _ in done.stream {}
        #expect(heard.withLock { $0 } == ["first admitted", "first ended", "second admitted", "second ended"])
        withExtendedLifetime(owner) {}
        await core.shutdown()
    }

    /// A segmented download's point whose first bytes are missing (its offset is 0): the
    /// download state machine cannot send a range for it, so only the run keeps it.
    static let mappedPoint = ResumePoint(
        done: ByteRangeSet([1000..<2000, 3000..<3500]),
        validators: EntityValidators(entityTag: "\"v1\""),
        entityLength: 4000
    )

    static func run(_ url: URL, core: TransferCore, path: String, admission: (any RunAdmission)? = nil) -> TransferRun {
        let transfer = TrackedTransfer(
            id: TransferID(.queue, 1), owner: RecordingOwner(), url: url, startingPoint: Self.mappedPoint, totalBytes: 4000, cadence: .init()
        )
        return TransferRun(
            engine: core.engine,
            request: TransferRequest(url: url, method: "GET", headers: HTTPHeaderFields()),
            destination: .file(path: path, resume: Self.mappedPoint),
            resourceTimeout: nil,
            admission: admission,
            observer: transfer
        )
    }

    static func outcome(of run: TransferRun) async -> TransferOutcome {
        await withCheckedContinuation { continuation in run.start { continuation.resume(returning: $0) } }
    }

    @Test("A run that ends before any answer (stopped while it waits for a slot, or refused) keeps the point it started from, map included")
    func untouchedRunKeepsItsPoint() async throws {
        #expect(Self.mappedPoint.offset == 0 && Self.mappedPoint.segments != nil)
        let core = TransferCore(limits: .init(maximumConcurrent: 1, maximumPerHost: 1, globalSpeedLimit: 0), logger: Logger(label: "run-gate-test"))
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-gate-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("file.haul-part").path
        try Data(count: 3500).write(to: URL(fileURLWithPath: path))
        // Refused: nothing listens on port 1 of the loopback address.
        let refused = await Self.outcome(of: Self.run(URL(string: "http://127.0.0.1:1/file")!, core: core, path: path))
        guard case .failed(_, nil, let kept) = refused else {
            Issue.record("expected a failure, got \(refused)")
            return
        }
        #expect(kept == Self.mappedPoint)
        // Stopped at the gate: its only slot is taken.
        let gate = RunGate(limits: .init(maximumConcurrent: 1, maximumPerHost: 1))
        try await gate.enter(Self.entry(9), number: gate.issueNumber())
        let ticket = RunGate.Ticket(gate: gate, entry: Self.entry(1)) { Issue.record("admitted though the slot was taken") }
        let waiting = Self.run(URL(string: "http://127.0.0.1:1/file")!, core: core, path: path, admission: ticket)
        let stopped = Task { await Self.outcome(of: waiting) }
        try await Self.waitUntil(gate, waiting: 1)
        waiting.stop(.pause)
        guard case .stopped(.pause, nil, let point) = await stopped.value else {
            Issue.record("expected a stop")
            return
        }
        #expect(point == Self.mappedPoint)
        #expect(gate.counts == (admitted: 1, waiting: 0), "it left the line and took no slot")
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)).count == 3500, "the file as it was")
        await core.shutdown()
    }
}
