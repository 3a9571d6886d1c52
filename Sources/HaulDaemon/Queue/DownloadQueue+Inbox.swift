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
        var runs: [(id: Int64, run: TransferRun)] = []
    }

    /// Adds `events` to the inbox; the first to find it empty schedules a drain on `work`.
    func post(_ events: [WorkEvent]) {
        let schedule = self.state.withLock { state -> Bool in
            state.inbox.append(contentsOf: events)
            defer { state.drainScheduled = true }
            return !state.drainScheduled
        }
        if schedule { self.work.async { self.drainInbox() } }
    }

    /// Handles everything in the inbox in one store batch, then applies what it owes (on `work`).
    ///
    /// The slots the events free are refilled inside the same batch: the core decides on this
    /// thread (``TransferCore/endedAndReady(_:_:startingFor:)``) and the downloads it starts are
    /// claimed at once, so a small file's end and the next one's start cost one commit and no
    /// hop to the core's queue and back.
    private func drainInbox() {
        dispatchPrecondition(condition: .onQueue(self.work))
        var events = self.state.withLock { state -> [WorkEvent] in
            state.drainScheduled = false
            state.effects = DrainEffects()
            defer { state.inbox.removeAll(keepingCapacity: true) }
            return state.inbox
        }
        guard !events.isEmpty else {
            self.state.withLock { $0.effects = nil }
            return
        }
        var handled: [WorkEvent] = []
        var saved = true
        do {
            try self.store.batch {
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
        if saved {
            for change in effects.changes { self.publish(change) }
            for (id, run) in effects.runs { self.launch(id, run) }
        } else {
            self.recover(handled, effects)
        }
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
            case .notStarted:
                self.freeSlot(id)
            case .retry(let entry):
                self.freeSlot(id)
                self.makeReady(entry)
            }
        case .ended(let id, let outcome):
            self.transferEnded(id, outcome: outcome)
        }
    }

    /// The batch was not saved: nothing it wrote holds. Claimed runs do not start; every
    /// download the events named is read back from the store (lists and the scheduler follow
    /// the durable rows, not what the batch meant to write).
    private func recover(_ events: [WorkEvent], _ effects: DrainEffects) {
        var freed = effects.freedSlots
        for (id, _) in effects.runs {
            self.state.withLock { _ = $0.running.removeValue(forKey: id) }
            freed.append(TransferID(.queue, id))
        }
        var ready: [TransferScheduler.Entry] = []
        for event in events {
            let id: Int64
            switch event {
            case .start(let entry): id = entry.id.number
            case .ended(let number, _): id = number
            }
            guard let row = try? self.store.download(id: id) else { continue }
            let running = self.state.withLock { state -> Bool in
                state.saved(row)
                return state.running[id] != nil
            }
            self.publish(.changed(self.info(for: row)))
            if row.state == .waiting, row.runner == nil, !running { ready.append(Self.entry(for: row)) }
        }
        self.core.ended(freed)
        self.core.enqueue(ready)
    }

    /// Starts `run` of download `id`; its end comes back through the inbox.
    func launch(_ id: Int64, _ run: TransferRun) {
        run.start { outcome in self.post([.ended(id, outcome)]) }
    }

    /// Starts the run now, or after the drain's batch is saved when one is open.
    func launchWhenSaved(_ id: Int64, _ run: TransferRun) {
        let deferred = self.state.withLock { state -> Bool in
            guard state.effects != nil else { return false }
            state.effects!.runs.append((id, run))
            return true
        }
        if !deferred { self.launch(id, run) }
    }

    /// Download `id`'s slot in the core is free (now, or once the drain's batch is saved).
    func freeSlot(_ id: Int64) {
        let deferred = self.state.withLock { state -> Bool in
            guard state.effects != nil else { return false }
            state.effects!.freedSlots.append(TransferID(.queue, id))
            return true
        }
        if !deferred { self.core.ended(TransferID(.queue, id)) }
    }

    /// `entry` waits for a slot again (now, or once the drain's batch is saved).
    func makeReady(_ entry: TransferScheduler.Entry) {
        let deferred = self.state.withLock { state -> Bool in
            guard state.effects != nil else { return false }
            state.effects!.ready.append(entry)
            return true
        }
        if !deferred { self.core.enqueue(entry) }
    }
}
