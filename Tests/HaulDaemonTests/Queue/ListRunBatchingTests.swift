import Testing

@testable import HaulDaemon

@Suite("ListRunBatching: when a list's ended files are saved (no I/O)")
struct ListRunBatchingTests {
    @Test("A file that ends while more are to start waits out the interval; those that end meanwhile join its save")
    func gathers() {
        var batching = ListRunBatching()
        #expect(batching.filesWait(1, nothingLeftToStart: false) == .afterInterval)
        #expect(batching.isSaving && batching.isGathering)
        #expect(batching.filesWait(2, nothingLeftToStart: false) == .none)
        #expect(batching.filesWait(3, nothingLeftToStart: false) == .none)
        batching.takes()
        #expect(batching.isSaving && !batching.isGathering)
        // Ended while the save runs: it takes them on its next pass, no second save asked.
        #expect(batching.filesWait(1, nothingLeftToStart: false) == .none)
        batching.takes()
        batching.drained()
        #expect(!batching.isSaving)
        #expect(batching.filesWait(1, nothingLeftToStart: false) == .afterInterval)
    }

    @Test("Once nothing is left to start, an end saves at once, also when a gathering save was asked for already; and once")
    func lastEndSavesAtOnce() {
        var alone = ListRunBatching()
        #expect(alone.filesWait(1, nothingLeftToStart: true) == .now)
        #expect(alone.isSaving && !alone.isGathering)

        var batching = ListRunBatching()
        #expect(batching.filesWait(1, nothingLeftToStart: false) == .afterInterval)
        #expect(batching.filesWait(2, nothingLeftToStart: true) == .now)
        #expect(batching.filesWait(2, nothingLeftToStart: true) == .none, "one save now is enough")
        // A save under way (not gathering) takes the last ones too.
        var running = ListRunBatching()
        _ = running.filesWait(1, nothingLeftToStart: false)
        running.takes()
        #expect(running.filesWait(1, nothingLeftToStart: true) == .none)
    }

    @Test("A full batch saves at once; nothing waiting asks for nothing")
    func fullBatchAndNothing() {
        var batching = ListRunBatching()
        #expect(batching.filesWait(0, nothingLeftToStart: true) == .none)
        #expect(!batching.isSaving)
        #expect(batching.filesWait(ListRunBatching.maximumBatch - 1, nothingLeftToStart: false) == .afterInterval)
        #expect(batching.filesWait(ListRunBatching.maximumBatch, nothingLeftToStart: false) == .now)
    }
}
