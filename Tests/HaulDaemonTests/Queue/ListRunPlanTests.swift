import Foundation
import HaulEngine
import HaulStore
import Testing

@testable import HaulDaemon

@Suite("ListRunPlan: which file starts where, what an end means, how a list's run ends (no I/O)")
struct ListRunPlanTests {
    static func files(_ count: Int, done: Set<Int> = []) -> [StoredListFile] {
        (0..<count).map { position in
            StoredListFile(
                position: position,
                url: URL(string: "http://127.0.0.1/f\(position)")!,
                state: done.contains(position) ? .done : .waiting,
                path: done.contains(position) ? "/d/f\(position)" : nil,
                bytes: done.contains(position) ? 100 : nil
            )
        }
    }

    static let reset = TransferFailure(URLError(.networkConnectionLost))
    static let notFound = TransferFailure(URLError(.badServerResponse), serverStatus: 404)
    static let busy = TransferFailure(URLError(.badServerResponse), serverStatus: 503)

    static func url(_ position: Int) -> URL { URL(string: "http://127.0.0.1/f\(position)")! }

    @Test("Files done and still where they were placed count as done; the rest start in the list's order")
    func startsWhatIsNotDone() {
        var plan = ListRunPlan(files: Self.files(6, done: [0, 2, 3]), engines: 1, filesAtOnce: 8) { path, bytes in
            path != "/d/f3" && bytes == 100
        }
        #expect(plan.doneCount == 2 && plan.doneBytes == 200)
        var started: [Int] = []
        while let next = plan.next() { started.append(next.position) }
        #expect(started == [1, 3, 4, 5], "f3's file is gone: fetched again")
    }

    @Test("filesAtOnce is shared out over the engines; a file that ends makes room on its own engine")
    func sharesPerEngine() throws {
        var plan = ListRunPlan(files: Self.files(20), engines: 2, filesAtOnce: 5) { _, _ in true }
        #expect(plan.share(of: 0) == 3 && plan.share(of: 1) == 2)
        var engines: [Int] = []
        while let next = plan.next() { engines.append(next.engine) }
        #expect(engines == [0, 0, 0, 1, 1])
        // File 3 ran on engine 1: the next file takes its place there.
        #expect(plan.inFlight[3] == 1)
        let placed = plan.ended(3, .finished)
        #expect(placed == .place)
        let following = plan.next()
        let next = try #require(following)
        #expect(next.engine == 1 && next.position == 5)
        let full = plan.next()
        #expect(full == nil)
        // One file at once over two engines: the second engine gets none.
        let single = ListRunPlan(files: Self.files(3), engines: 2, filesAtOnce: 1) { _, _ in true }
        #expect(single.share(of: 0) == 1 && single.share(of: 1) == 0)
    }

    @Test("A lost connection is tried again at once, once a run; a 404 or a 503 fails for the run (the queue's backoff retries a 503); a stopped file waits for the next run")
    func endsDecided() {
        var plan = ListRunPlan(files: Self.files(4), engines: 1, filesAtOnce: 4) { _, _ in true }
        while plan.next() != nil {}
        let first = [plan.ended(0, .failed(Self.reset)), plan.ended(1, .failed(Self.notFound)), plan.ended(2, .failed(Self.busy))]
        #expect(first == [.retry, .failed, .failed])
        #expect(plan.pending == [0])
        while plan.next() != nil {}
        let second = plan.ended(0, .failed(Self.reset))
        #expect(second == .failed, "once a run")
        _ = plan.stop(.pause)
        let stoppedEnd = plan.ended(3, .stopped)
        #expect(stoppedEnd == .requeued)
        #expect(plan.pending == [3])
        #expect(plan.failures.map(\.position) == [1, 2, 0])
        #expect(plan.placedThisRun == 0)
        plan.placed(bytes: 1)
        #expect(plan.placedThisRun == 1)
    }

    @Test("The run is over when nothing is in flight, waits to be saved, or is left; its outcome")
    func outcomes() throws {
        // Not started yet (waiting for its slot): not over.
        var plan = ListRunPlan(files: Self.files(3), engines: 1, filesAtOnce: 2) { _, _ in true }
        #expect(plan.outcome(hasPendingWrites: false, url: Self.url) == nil)
        while plan.next() != nil {}
        _ = plan.ended(0, .finished)
        plan.placed(bytes: 10)
        #expect(plan.outcome(hasPendingWrites: false, url: Self.url) == nil, "one in flight, one left")
        _ = plan.ended(1, .finished)
        while plan.next() != nil {}
        _ = plan.ended(2, .finished)
        #expect(plan.outcome(hasPendingWrites: true, url: Self.url) == nil, "its last files not saved yet")
        plan.placed(bytes: 20)
        plan.placed(bytes: 30)
        guard case .completed(let bytes)? = plan.outcome(hasPendingWrites: false, url: Self.url) else {
            Issue.record("not completed")
            return
        }
        #expect(bytes == 60 && plan.doneCount == 3)

        // Everything done before the run: complete at once, nothing started.
        let done = ListRunPlan(files: Self.files(2, done: [0, 1]), engines: 2, filesAtOnce: 4) { _, _ in true }
        guard case .completed(200)? = done.outcome(hasPendingWrites: false, url: Self.url) else {
            Issue.record("a list with every file done is complete")
            return
        }

        // Failures: the message counts them and names the first; the kind is the most retryable.
        var failing = ListRunPlan(files: Self.files(5), engines: 1, filesAtOnce: 5) { _, _ in true }
        while failing.next() != nil {}
        _ = failing.ended(4, .failed(Self.notFound))
        let retried = failing.ended(2, .failed(Self.reset))
        #expect(retried == .retry)
        for position in [0, 1, 3] { _ = failing.ended(position, .finished) }
        // The retried file 2 is to start again: not over until it has.
        #expect(failing.outcome(hasPendingWrites: false, url: Self.url) == nil)
        while failing.next() != nil {}
        _ = failing.ended(2, .failed(Self.reset))
        guard case .failed(let failure)? = failing.outcome(hasPendingWrites: false, url: Self.url) else {
            Issue.record("not failed")
            return
        }
        #expect(failure.error.localizedDescription.hasPrefix("2 of 5 files failed (first: http://127.0.0.1/f2: "), "\(failure.error.localizedDescription)")
        #expect(failure.kind == .connectionLost, "a lost connection before a 404: the queue retries the list")
        var permanent = ListRunPlan(files: Self.files(1), engines: 1, filesAtOnce: 1) { _, _ in true }
        _ = permanent.next()
        _ = permanent.ended(0, .failed(Self.notFound))
        guard case .failed(let only)? = permanent.outcome(hasPendingWrites: false, url: Self.url) else {
            Issue.record("not failed")
            return
        }
        #expect(only.serverStatus == 404)

        // Stopped: over once its files in flight have ended, with the first reason.
        var stopped = ListRunPlan(files: Self.files(3), engines: 1, filesAtOnce: 2) { _, _ in true }
        while stopped.next() != nil {}
        let stops = [stopped.stop(.pause), stopped.stop(.cancel)]
        #expect(stops == [true, false])
        let afterStop = stopped.next()
        #expect(afterStop == nil)
        #expect(stopped.outcome(hasPendingWrites: false, url: Self.url) == nil)
        _ = stopped.ended(0, .stopped)
        _ = stopped.ended(1, .finished)
        stopped.placed(bytes: 5)
        guard case .stopped(.pause)? = stopped.outcome(hasPendingWrites: false, url: Self.url) else {
            Issue.record("not stopped")
            return
        }
    }

    @Test("Bytes on disk are the placed files' and those in flight")
    func bytes() {
        var plan = ListRunPlan(files: Self.files(3, done: [0]), engines: 1, filesAtOnce: 3) { _, _ in true }
        while plan.next() != nil {}
        let totals = [plan.wrote(1, bytes: 40), plan.wrote(2, bytes: 7), plan.wrote(1, bytes: 50)]
        #expect(totals == [140, 147, 157])
        _ = plan.ended(1, .finished)
        #expect(plan.bytesOnDisk == 107, "a finished file counts again once placed")
        plan.placed(bytes: 50)
        #expect(plan.bytesOnDisk == 157)
    }
}
