import Foundation
import HaulCore
import HaulEngine
import HaulStore

/// The queue's inbox: starts from the core and ends of runs are handled together on `work`,
/// with their store writes in one batch (``QueueStore/batch(_:)``); what others may act on
/// (events to subscribers, runs to start) goes out only once that batch is saved.
///
/// A quiet queue handles each event at once, alone. A busy one (many small files) finds
/// several waiting when it gets to them and handles them with one commit: the batch grows with
/// the load, and no event waits for a timer.
extension DownloadQueue {
    /// What reaches the queue's inbox.
    enum WorkEvent: Sendable {
        /// The core chose the waiting download (its entry as enqueued): claim and start it.
        case start(TransferScheduler.Entry)
        /// Its run ended with this outcome.
        case ended(Int64, TransferOutcome)
        /// Its run has its slot at the core's gate now: it is active from now on.
        case admitted(Int64)

        var downloadID: Int64 {
            switch self {
            case .start(let entry): entry.id.number
            case .ended(let id, _), .admitted(let id): id
            }
        }
    }

    /// What one drain of the inbox collects while its batch is open.
    struct DrainEffects {
        /// Slots of transfers that ended or could not start: the core hears of them (and
        /// refills them) before the batch is committed, the scheduler needs no durability.
        var freedSlots: [TransferID] = []
        /// Downloads waiting again: as `freedSlots`.
        var ready: [TransferScheduler.Entry] = []
        /// Events for the subscribers, in order.
        var changes: [QueueChange] = []
        /// Claimed downloads whose run starts after the commit (their claim is then saved).
        var runs: [(id: Int64, run: QueueRun)] = []
        /// The batch's writes, in order, to write again one by one if it is not saved.
        var replays: [Replay] = []
    }

    /// The events waiting for a drain (``DownloadQueue/inbox``).
    struct Inbox {
        var events: [WorkEvent] = []
        var drainScheduled = false

        /// Whether nothing but admissions waits (their ends come later, each with a drain).
        var isQuiet: Bool {
            self.events.allSatisfy { if case .admitted = $0 { true } else { false } }
        }
    }

    /// Adds `events` to the inbox; the first to find it empty schedules a drain on `work`.
    /// Posted from the engine's loop (ends, admissions), it also tells the core where the loop
    /// runs (``TransferLoopCPU``).
    func post(_ events: [WorkEvent]) {
        if self.core.engine.eventLoop.inEventLoop { self.core.transferLoop.noteLoopRunsHere() }
        let schedule = self.inbox.withLock { inbox -> Bool in
            inbox.events.append(contentsOf: events)
            defer { inbox.drainScheduled = true }
            return !inbox.drainScheduled
        }
        if schedule { self.work.async { self.drainInbox() } }
    }

    /// Handles everything in the inbox (on `work`).
    ///
    /// With the embedded store, in two steps, each one batch: first the slots of the runs that
    /// ended are given back to the core and the downloads it starts in them are claimed (held in
    /// memory, see `DownloadQueue+Store`) and launched; then the ends are recorded (verified,
    /// placed, saved) while those new runs already transfer on the engine's loop: at once, or
    /// with a later drain's ends while more events are on their way. In one step, a queue of
    /// small files went in lockstep: the loop waited for the queue's thread to record four ends
    /// and claim four starts, then the queue's thread waited for the loop to run them (200 × 64
    /// KiB on tmpfs: each thread busy half of the time). A fleet's store keeps the one step:
    /// its claims count the host's active rows, which must not still include the runs that
    /// ended.
    private func drainInbox() {
        dispatchPrecondition(condition: .onQueue(self.work))
        // Off the CPU the transfer loop last reported: a drain does not take the loop's core
        // (unless large bodies run on a loop per core: then none is the loop's alone).
        if self.core.isSpreading { self.core.transferLoop.releaseCaller() } else { self.core.transferLoop.keepCallerOffLoopCPU() }
        let events = self.inbox.withLock { inbox -> [WorkEvent] in
            inbox.drainScheduled = false
            defer { inbox.events.removeAll(keepingCapacity: true) }
            return inbox.events
        }
        guard !events.isEmpty else { return self.recordEnds(all: true) }
        guard !self.store.isShared else {
            self.handleInBatch(events)
            return
        }
        var starts: [WorkEvent] = []
        var ends: [WorkEvent] = []
        var freed: [TransferID] = []
        var admitted: [Int64] = []
        for event in events {
            switch event {
            case .start:
                starts.append(event)
            case .ended(let id, let outcome):
                ends.append(event)
                if self.freesSlotBeforeRecording(id, outcome) { freed.append(TransferID(.queue, id)) }
            case .admitted(let id):
                admitted.append(id)
            }
        }
        // Only admissions: nothing to free, start or record (each admitted run's end comes with
        // a drain of its own, which records what waits).
        guard !starts.isEmpty || !ends.isEmpty else { return self.admitted(admitted) }
        // When the end is recorded, its slot is given back again: the scheduler ignores a
        // transfer it no longer runs.
        if !freed.isEmpty { starts += self.core.endedAndReady(freed, [], startingFor: .queue).map { .start($0) } }
        // Subscribers hear of the ends before the starts that took their slots, as the core
        // decided them (a list of what is active never shows more than the limits allow).
        let held = starts.isEmpty ? [] : self.handleInBatch(starts, holdingChanges: !ends.isEmpty)
        // While more events are on their way and nobody listens to every change (a subscriber
        // of finishes hears them when recorded), the ends wait for the drain
        // that finds the inbox quiet: one commit records the ends of many small files, where
        // each drain's few ends had one of their own (its fixed cost was a sixth of a small
        // file's CPU). A timer instead (record every 2 ms) saved as much CPU and let new runs
        // wait behind each big batch.
        // Admissions in the inbox are not events on their way: their ends come later.
        let quiet = self.inbox.withLock { $0.isQuiet }
        let (recordNow, listened) = self.state.withLock { state -> (Bool, Bool) in
            state.unrecordedEnds += ends
            let listened = state.hearsEveryChange
            return (quiet || listened || state.unrecordedEnds.count >= Self.unrecordedEndsLimit, listened)
        }
        // Subscribers hear of every waiting end before the starts that took their slots.
        if recordNow { self.recordEnds(all: listened) }
        for change in held { self.publish(change) }
        // A run admitted took the slot of an end above (its end was posted first).
        self.admitted(admitted)
    }

    /// Runs have their slots now: listed and counted as active from now on. One whose run is over
    /// already (its end handled) is left as its end made it.
    private func admitted(_ ids: [Int64]) {
        guard !ids.isEmpty else { return }
        let changed = self.state.withLock { state -> [Running] in
            var changed: [Running] = []
            let listened = state.hearsEveryChange
            for id in ids {
                guard state.running[id]?.isAdmitted == false else { continue }
                state.running[id]!.isAdmitted = true
                // Its row is as it was (the claim says active): only the listed state changes.
                if state.running[id]!.stored.state == .active { state.index.setState(.active, id: id) }
                if listened { changed.append(state.running[id]!) }
            }
            return changed
        }
        for running in changed {
            let info = Self.overlay(running.stored.info, live: running)
            // A small body already all on disk: its end, which follows, is what is heard.
            if !Self.saysNothingNew(info) { self.publish(.changed(info)) }
        }
    }

    /// How many ends a busy queue lets wait for one commit.
    static let unrecordedEndsLimit = 256

    /// How many waiting ends one batch records before the drains queued meanwhile have their
    /// turn (recording 50 at once kept new runs from starting for two milliseconds).
    static let endsPerBatch = 32

    /// Records the ends that wait (on `work`): their files are verified and placed, their
    /// rows saved, `endsPerBatch` at a time. What is queued on `work` meanwhile (drains that
    /// start runs) goes before the rest, unless `all` are recorded now.
    func recordEnds(all: Bool = false) {
        dispatchPrecondition(condition: .onQueue(self.work))
        while true {
            let (ends, more) = self.state.withLock { state -> ([WorkEvent], Bool) in
                let ends = Array(state.unrecordedEnds.prefix(Self.endsPerBatch))
                state.unrecordedEnds.removeFirst(ends.count)
                return (ends, !state.unrecordedEnds.isEmpty)
            }
            guard !ends.isEmpty else { return }
            self.recordPlacements(ends)
            self.handleInBatch(ends)
            guard more else { return }
            guard all else { return self.work.async { self.recordEnds() } }
        }
    }

    /// Whether the slot of run `id`, which ended with `outcome`, is given back before its end
    /// is recorded: yes, unless its file is still to be checked against a checksum (reading it
    /// keeps the slot, so that no more files are hashed at once than run at once).
    private func freesSlotBeforeRecording(_ id: Int64, _ outcome: TransferOutcome) -> Bool {
        self.state.withLock { state in
            guard let running = state.running[id] else { return false }
            if case .completed(let response, _) = outcome, (200..<300).contains(response.statusCode), running.stored.checksum != nil {
                return false
            }
            return true
        }
    }

    /// Handles `events` in one store batch, then starts their runs and publishes their changes,
    /// or, `holdingChanges`, returns those changes for the caller to publish (once saved).
    ///
    /// The slots the events free are refilled inside the same batch: the core decides on this
    /// thread (``TransferCore/endedAndReady(_:_:startingFor:)``) and the downloads it starts are
    /// claimed at once, so a slot that frees and the next download's start cost one commit and
    /// no hop to the core's queue and back.
    @discardableResult
    private func handleInBatch(_ events: [WorkEvent], holdingChanges: Bool = false) -> [QueueChange] {
        var events = events
        self.state.withLock { $0.effects = DrainEffects() }
        var handled: [WorkEvent] = []
        var saved = true
        // Starts whose rows the queue keeps read nothing and write nothing (their claims are
        // held): no transaction, which was half of what such a drain cost.
        let touchesStore = self.soleWriter == nil || !self.state.withLock { state in
            events.allSatisfy { if case .start(let entry) = $0 { state.waitingRows.contains(entry.id.number) } else { false } }
        }
        do {
            try self.batchIf(touchesStore) {
                while !events.isEmpty {
                    for event in events { self.handle(event) }
                    handled += events
                    let (freed, ready) = self.state.withLock { state in
                        defer {
                            state.effects!.freedSlots = []
                            state.effects!.ready = []
                        }
                        return (state.effects!.freedSlots, state.effects!.ready)
                    }
                    events = self.core.endedAndReady(freed, ready, startingFor: .queue).map { .start($0) }
                }
            }
        } catch {
            saved = false
            self.logger.error("cannot save what \(handled.count) downloads did (the store refused the batch): \(error)")
        }
        let effects = self.state.withLock { state -> DrainEffects in
            defer { state.effects = nil }
            return state.effects ?? DrainEffects()
        }
        guard saved else {
            self.recover(effects, handled: Set(handled.map(\.downloadID)))
            return []
        }
        self.launch(effects.runs)
        if holdingChanges { return effects.changes }
        for change in effects.changes { self.publish(change) }
        return []
    }

    /// `body` in one store batch, or as it is (each store call its own transaction).
    private func batchIf(_ batched: Bool, _ body: () throws -> Void) throws {
        if batched { try self.store.batch(body) } else { try body() }
    }

    private func handle(_ event: WorkEvent) {
        switch event {
        case .start(let entry):
            let id = entry.id.number
            guard !self.state.withLock({ $0.isShuttingDown }) else {
                self.freeSlot(id)
                return
            }
            switch self.startRun(entry) {
            case .started:
                break
            case .notStarted(let slot):
                self.freeSlot(slot)
            case .retry(let entry):
                self.freeSlot(id)
                self.makeReady(entry)
            }
        case .ended(let id, let outcome):
            self.transferEnded(id, outcome: outcome)
        case .admitted(let id):
            // A fleet's core starts nothing ahead; were it to, the download is active now.
            self.admitted([id])
        }
    }

    /// The batch was not saved (its commit failed: a full disk, an I/O error): its writes are
    /// made again one by one, in order, each its own transaction as they were before batches.
    /// A download whose write still fails (or whose claim no longer holds) loses what came
    /// after it in the batch: its run does not start, and it is read back from the store, so
    /// lists and the scheduler follow the durable row; nobody hears of the lost change. So is
    /// every download of the drain left active in the store with nothing running it (a write
    /// that failed inside the batch, whose handler gave up on it).
    private func recover(_ effects: DrainEffects, handled: Set<Int64>) {
        var lost: Set<Int64> = []
        for replay in effects.replays where lost.isDisjoint(with: replay.ids) {
            do {
                if try !replay.redo() { lost.formUnion(replay.ids) }
            } catch {
                self.logger.error("cannot save the change of download \(replay.ids.map(String.init).joined(separator: ", ")) on its own either: \(error)")
                lost.formUnion(replay.ids)
            }
        }
        for change in effects.changes {
            if case .changed(let info) = change, lost.contains(info.id) { continue }
            self.publish(change)
        }
        var freed: [TransferID] = []
        for (id, run) in effects.runs {
            if lost.contains(id) {
                if let lost = self.state.withLock({ $0.running.removeValue(forKey: id) }), let lane = lost.lane {
                    self.core.runEnded(host: lost.host, lane: lane)
                }
                freed.append(TransferID(.queue, id))
            } else {
                self.launch(id, run)
            }
        }
        var ready: [TransferScheduler.Entry] = []
        for id in handled.union(lost).sorted() {
            guard var row = try? self.store.download(id: id) else {
                if lost.contains(id) { self.state.withLock { $0.index.remove(id: id) } }
                continue
            }
            let running = self.state.withLock { $0.running[id] != nil }
            let stranded = row.state == .active && !running
            guard lost.contains(id) || stranded else { continue }
            if stranded, row.runner == nil || row.runner == self.configuration.daemonName {
                // Its run ended and how was not saved: it waits again rather than stay active
                // with nothing running it (a file it had placed stays, the next gets a number).
                if let waiting = try? self.store.updateDownload(id: id, { if $0.state == .active { $0.state = .waiting } }) { row = waiting }
            }
            self.state.withLock { $0.saved(row) }
            self.publish(.changed(self.info(for: row)))
            if row.state == .waiting, row.runner == nil, !running { ready.append(Self.entry(for: row)) }
        }
        self.core.ended(freed)
        self.core.enqueue(ready)
    }

    /// Starts `run` of download `id` (``launch(_:)``); its end comes back through the inbox.
    func launch(_ id: Int64, _ run: QueueRun) {
        self.launch([(id, run)])
    }

    /// Starts runs from their engines' event loops, in the order given, with one wake-up of
    /// each loop for all of its runs (each run's task, started from its own loop, is queued
    /// there without another). Every launch goes this way: a run's task created off the loop
    /// would be queued there ahead of the runs an earlier hop still carries (a download started
    /// ahead then reached the gate, and took the slot, before one the scheduler had started in
    /// it).
    private func launch(_ runs: [(id: Int64, run: QueueRun)]) {
        guard !runs.isEmpty else { return }
        var byLoop: [(engine: TransferEngine, items: [LaunchItem])] = []
        // A host run's members go to it together (it starts them on its loop).
        var members: [(host: HostRun, members: [HostRun.Member])] = []
        for (id, run) in runs {
            if case .member(let member, let host) = run {
                if let index = members.firstIndex(where: { $0.host === host }) { members[index].members.append(member) } else { members.append((host, [member])) }
                continue
            }
            let engine = run.engine
            if let index = byLoop.firstIndex(where: { $0.engine === engine }) {
                byLoop[index].items.append(LaunchItem(id: id, run: run))
            } else {
                byLoop.append((engine, [LaunchItem(id: id, run: run)]))
            }
        }
        for (host, batch) in members { host.handOver(batch) }
        for (engine, items) in byLoop {
            engine.eventLoop.execute {
                for item in items { item.run.start { outcome in self.post([.ended(item.id, outcome)]) } }
            }
        }
    }

    private struct LaunchItem: Sendable {
        var id: Int64
        var run: QueueRun
    }

    /// Starts the run now, or after the drain's batch is saved when one is open.
    func launchWhenSaved(_ id: Int64, _ run: QueueRun) {
        let deferred = self.state.withLock { state -> Bool in
            guard state.effects != nil else { return false }
            state.effects!.runs.append((id, run))
            return true
        }
        if !deferred { self.launch(id, run) }
    }

    /// Download `id`'s slot in the core is free: at once, or, during a drain, when the drain's
    /// round of events is handled (the core refills it in the same batch). A slot given back
    /// already as the run ended (``drainInbox()``) is ignored by the core.
    func freeSlot(_ id: Int64) {
        let deferred = self.state.withLock { state -> Bool in
            guard state.effects != nil else { return false }
            state.effects!.freedSlots.append(TransferID(.queue, id))
            return true
        }
        if !deferred { self.core.ended(TransferID(.queue, id)) }
    }

    /// `entry` waits for a slot again: at once, or, during a drain, with the round's freed slots.
    func makeReady(_ entry: TransferScheduler.Entry) {
        let deferred = self.state.withLock { state -> Bool in
            guard state.effects != nil else { return false }
            state.effects!.ready.append(entry)
            return true
        }
        if !deferred { self.core.enqueue(entry) }
    }
}
