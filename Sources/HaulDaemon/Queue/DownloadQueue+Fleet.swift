import Foundation
import HaulCore
import HaulEngine
import HaulStore
import Synchronization

/// A fleet of daemons on one shared store: leases kept alive, fencing, takeovers and a live
/// view of what the other daemons change.
///
/// - Every quarter of the lease (on `leaseWork`): renew the leases of the running downloads
///   (one statement); a download whose lease is not renewed was taken by another daemon and
///   stops at once, writing nothing. Then hand downloads whose lease expired (a daemon died or
///   was cut off) back to the waiting queue, and send a heartbeat (the live daemons, for
///   `haul daemon status` and the fleet's share of the speed limit).
/// - Every tenth of the lease (on its own timer, never behind a store call that hangs): a
///   download whose lease was not renewed for 60 % of its length stops, writing nothing, so
///   that it has stopped before the lease can expire and another daemon take it over; and a
///   keeper round that has not come back for a whole lease is logged once, with the store
///   calls in flight (they are bounded, so that is a bug to report).
/// - Changes of other daemons arrive as notifications and are applied on `work`, as many as
///   arrived since the last turn together (``StoreChangeBacklog``: one read for their rows): the
///   index is updated, downloads that wait again are handed to the scheduler, and a download
///   running here that another door paused or removed stops.
extension DownloadQueue {
    /// Starts the duties above when the store is shared (nothing otherwise).
    func startFleet() {
        guard self.store.isShared else { return }
        let lease = self.configuration.leaseSeconds
        let observation = self.store.observeChanges { [weak self] change in self?.note(change) }
        let keeper = DispatchSource.makeTimerSource(queue: self.leaseWork)
        keeper.schedule(deadline: .now(), repeating: lease / 4, leeway: .milliseconds(20))
        keeper.setEventHandler { [weak self] in self?.keepLeases() }
        let fence = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "hauld.fence"))
        fence.schedule(deadline: .now() + lease / 10, repeating: lease / 10, leeway: .milliseconds(10))
        fence.setEventHandler { [weak self] in self?.fenceExpiringLeases() }
        self.fleetDuties.start(observation: observation, timers: [keeper, fence])
        self.logger.info("fleet: this daemon is \(self.configuration.daemonName), leases of \(lease) s")
    }

    /// Stops the duties and tells the store this daemon left (its downloads were handed back
    /// by the shutdown).
    public func leaveFleet() {
        guard self.store.isShared, self.fleetDuties.stop() else { return }
        self.leaseWork.sync {
            do { try self.store.leave(daemon: self.configuration.daemonName) } catch { self.logger.notice("fleet: cannot say goodbye: \(error)") }
        }
    }

    /// The fleet's live daemons and what each runs (one daemon alone with a local store).
    public func fleet() -> [DaemonPresence] {
        self.state.withLock { state in
            if self.store.isShared { return state.fleet }
            return [
                DaemonPresence(
                    name: self.configuration.daemonName, pid: getpid(), startedAt: Self.startedAt, seenAt: Date(),
                    downloads: state.running.keys.sorted()
                )
            ]
        }
    }

    static let startedAt = Date()

    // MARK: - Leases (on leaseWork)

    private func keepLeases() {
        self.state.withLock { $0.keeperRound = (.now, false) }
        defer { self.state.withLock { $0.keeperRound = nil } }
        let seconds = self.configuration.leaseSeconds
        let leases = self.state.withLock { state in
            state.running.filter { $0.value.intent == nil }.mapValues(\.lease)
        }
        var reachable = true
        if !leases.isEmpty {
            let sentAt = TransferCore.monotonicNow()
            do {
                let held = try self.store.renewLeases(leases, seconds: seconds)
                self.state.withLock { state in
                    for id in held where state.running[id] != nil { state.running[id]!.leaseValidUntil = sentAt + seconds }
                }
                for id in leases.keys where !held.contains(id) {
                    self.fence(id, reason: "its lease \(leases[id]!) is no longer current: another daemon holds the download now")
                }
            } catch {
                reachable = false
                self.logger.warning("fleet: cannot renew \(leases.count) lease(s): \(error)")
            }
        }
        do {
            for (download, holder) in try self.store.reclaimExpiredLeases() {
                self.logger.notice("fleet: the lease of \(holder) on download \(download.id!) expired; it waits for a daemon again")
                self.note(.download(download.id!))
            }
        } catch {
            reachable = false
        }
        do {
            let fleet = try self.store.heartbeat(
                daemon: self.configuration.daemonName, pid: getpid(), startedAt: Self.startedAt, liveSeconds: seconds
            )
            let (before, wasReachable, missed) = self.state.withLock { state in
                defer {
                    state.fleet = fleet
                    state.changesMissed = false
                }
                return (state.fleet.count, state.storeReachable, state.changesMissed)
            }
            if fleet.count != before { self.core.setLimits(self.limits(for: self.settings)) }
            if !wasReachable { self.logger.notice("fleet: the store answers again") }
            if !wasReachable || missed {
                // What changed meanwhile is read again (the change listener may have missed it,
                // or a read of what it heard failed).
                self.note(.resync)
            }
        } catch {
            reachable = false
            self.logger.warning("fleet: heartbeat failed: \(error)")
        }
        self.state.withLock { $0.storeReachable = reachable }
    }

    /// Stops downloads whose lease was not renewed for 60 % of its length; logs (once a round)
    /// a lease keeper that has not come back from its round for a whole lease, with the store
    /// calls in flight — the keeper's own store calls are bounded, so that is a bug to report.
    private func fenceExpiringLeases() {
        let lease = Duration.milliseconds(Int64(self.configuration.leaseSeconds * 1000))
        let stuck = self.state.withLock { state -> Duration? in
            guard let round = state.keeperRound, !round.reported, ContinuousClock.now - round.began > lease else { return nil }
            state.keeperRound!.reported = true
            return ContinuousClock.now - round.began
        }
        if let stuck {
            let calls = self.store.callsInFlight(longerThan: .zero)
            let seconds = Double(stuck.components.seconds) + Double(stuck.components.attoseconds) * 1e-18
            self.logger.error(
                "fleet: the lease keeper has not come back from one round for \(String(format: "%.1f", seconds)) s; store calls in flight: \(calls.isEmpty ? "none" : calls.joined(separator: "; "))"
            )
        }
        let now = TransferCore.monotonicNow()
        let margin = self.configuration.leaseSeconds * 0.4
        let expiring = self.state.withLock { state in
            state.running.filter { $0.value.intent == nil && $0.value.leaseValidUntil - margin < now }.map(\.key)
        }
        for id in expiring.sorted() {
            self.fence(id, reason: "its lease could not be renewed (the store does not answer); stopped before the lease expires")
        }
    }

    /// Stops a running download at once and writes nothing more about it: another daemon may
    /// own it now.
    func fence(_ id: Int64, reason: String) {
        let run = self.state.withLock { state -> QueueRun? in
            guard state.running[id] != nil, state.running[id]!.intent == nil else { return nil }
            state.running[id]!.intent = .fenced
            return state.running[id]!.run
        }
        guard let run else { return }
        self.logger.warning("fleet: download \(id) stopped: \(reason)")
        run.stop(.pause)
    }

    // MARK: - Changes of other daemons

    /// Notes a change another daemon made (from any thread); the first since the queue last
    /// applied them schedules a turn on `work`, ``storeChangesDelay`` later, that applies all
    /// noted by then (``applyStoreChanges()``).
    func note(_ change: QueueStoreChange) {
        guard self.storeChanges.withLock({ $0.add(change) }) else { return }
        self.work.asyncAfter(deadline: .now() + Self.storeChangesDelay) { self.applyStoreChanges() }
    }

    /// How long the changes of other daemons gather before they are read: one read a turn, and
    /// a read is a round trip on the queue's thread. Without the wait, a turn came for almost
    /// every notification (two daemons, 2,000 small files: ~1.2 reads a file); what another
    /// daemon claimed meanwhile costs nothing here (a claim of it takes an alternative by the
    /// same call, ``QueueClaim/alternatives``).
    static let storeChangesDelay = DispatchTimeInterval.milliseconds(20)

    /// How many rows one read of changed downloads asks for.
    static let changedRowsPerRead = 500

    /// Applies the changes noted since the last turn (on `work`): the settings, then every
    /// changed download read again together (``QueueStore/downloads(ids:)``), or the whole list
    /// after a gap; one scheduler decision for them all. A read that fails is not tried again
    /// here (the store may be gone, and each try would hold the queue's thread for a query's
    /// time limit): the lease keeper's next heartbeat that reaches the store has the whole list
    /// read again.
    func applyStoreChanges() {
        dispatchPrecondition(condition: .onQueue(self.work))
        let turn = self.storeChanges.withLock { $0.take() }
        if turn.settings {
            do {
                if let settings = try self.store.queueSettings() {
                    self.state.withLock { $0.settings = settings }
                    self.core.setLimits(self.limits(for: settings))
                    self.publish(.settings(settings))
                }
            } catch {
                self.logger.notice("fleet: cannot read the settings another daemon changed (read again once the store answers): \(error)")
                self.noteChangesMissed()
            }
        }
        var batch = SchedulerBatch()
        defer { batch.apply(to: self.core) }
        if turn.resync {
            do {
                // One scheduler decision for the whole list (100,000 rows are one sort).
                var seen = Set<Int64>()
                try self.store.forEachDownload { row in
                    seen.insert(row.id!)
                    self.refresh(row.id!, row: row, into: &batch)
                }
                let gone = self.state.withLock { state in state.index.entries.map(\.id).filter { !seen.contains($0) } }
                for id in gone { self.refresh(id, row: nil, into: &batch) }
            } catch {
                self.logger.notice("fleet: cannot read the list again (read again once the store answers): \(error)")
                self.noteChangesMissed()
            }
            return
        }
        var start = 0
        while start < turn.ids.count {
            let ids = Array(turn.ids[start..<min(start + Self.changedRowsPerRead, turn.ids.count)])
            start += ids.count
            do {
                let rows = try self.store.downloads(ids: ids)
                let found = Dictionary(rows.map { ($0.id!, $0) }, uniquingKeysWith: { first, _ in first })
                for id in ids { self.refresh(id, row: found[id], into: &batch) }
            } catch {
                self.logger.notice("fleet: cannot read \(ids.count) download(s) another daemon changed (the list is read again once the store answers): \(error)")
                self.noteChangesMissed()
            }
        }
    }

    /// A read of other daemons' changes failed: the lease keeper's next heartbeat that reaches
    /// the store has everything read again (``keepLeases()``), as after any time the store was
    /// away.
    private func noteChangesMissed() {
        self.state.withLock { $0.changesMissed = true }
    }

    /// Brings the index, the scheduler and a run here in line with `row` as another daemon
    /// left it (`nil`: deleted).
    /// What a refresh hands the scheduler, given to it in one go.
    struct SchedulerBatch {
        var ready: [TransferScheduler.Entry] = []
        var withdrawn: [TransferID] = []
        /// Hosts other daemons gave connections back to (downloads of them stopped running),
        /// with how many: one decision a host, however many rows a list read again brings.
        var freedHosts: [String: Int] = [:]

        func apply(to core: TransferCore) {
            core.withdraw(self.withdrawn)
            core.enqueue(self.ready)
            for (host, count) in self.freedHosts { core.raiseHostCap(host, by: count) }
        }
    }

    private func refresh(_ id: Int64, row: StoredDownload?, into batch: inout SchedulerBatch) {
        let running = self.state.withLock { $0.running[id] }
        guard let row else {
            if running != nil {
                if let run = self.stopRunning(id, intent: .remove(deleteRow: true)) { run.stop(.cancel) }
            } else if self.state.withLock({ state in
                guard state.index.entry(id: id) != nil else { return false }
                state.index.remove(id: id)
                return true
            }) {
                batch.withdrawn.append(TransferID(.queue, id))
                self.publish(.removed(id: id))
            }
            return
        }
        let (changed, stoppedRunning) = self.state.withLock { state -> (Bool, Bool) in
            let before = state.index.entry(id: id)?.info
            state.saved(row)
            return (before != row.info, before?.state == .active && row.state != .active)
        }
        if let running {
            guard running.intent == nil else { return }
            switch row.state {
            case .paused:
                if let run = self.stopRunning(id, intent: .pause) { run.stop(.pause) }
            case .removed:
                if let run = self.stopRunning(id, intent: .remove(deleteRow: false)) { run.stop(.cancel) }
            default:
                break
            }
            return
        }
        if changed { self.publish(.changed(row.info)) }
        if stoppedRunning { batch.freedHosts[Self.entry(for: row).host, default: 0] += 1 }
        if row.state == .waiting, row.runner == nil {
            batch.ready.append(Self.entry(for: row))
        } else {
            batch.withdrawn.append(TransferID(.queue, id))
        }
    }
}

/// The timers and the change subscription of a fleet member; started once, stopped once.
final class FleetDuties: @unchecked Sendable {
    // @unchecked: every field is guarded by `lock`.
    private let lock = NSLock()
    private var observation: (any QueueStoreObservation)?
    private var timers: [any DispatchSourceTimer] = []
    private var started = false

    func start(observation: (any QueueStoreObservation)?, timers: [any DispatchSourceTimer]) {
        self.lock.withLock {
            self.observation = observation
            self.timers = timers
            self.started = true
        }
        for timer in timers { timer.resume() }
    }

    /// Whether it was running.
    func stop() -> Bool {
        let (observation, timers, wasStarted) = self.lock.withLock {
            defer {
                self.observation = nil
                self.timers = []
                self.started = false
            }
            return (self.observation, self.timers, self.started)
        }
        observation?.cancel()
        for timer in timers { timer.cancel() }
        return wasStarted
    }
}
