import Foundation
import HaulCore
import HaulStore

/// Every write of a download goes through here: the store first (the durable copy), then the
/// in-memory ``DownloadIndex`` that lists and counts are answered from. Called on `work`.
///
/// Inside a drain of the inbox the writes join its batch, and each is also remembered: should
/// the store refuse the batch's commit, they are written again one by one, in order
/// (`DownloadQueue+Inbox`), which is what they were before batches.
extension DownloadQueue {
    /// A store write that succeeded inside a drain's batch, to write again on its own if the
    /// batch is not saved. `redo` answers whether the write still holds (a claim can find the
    /// download taken meanwhile).
    struct Replay {
        var ids: [Int64]
        var redo: @Sendable () throws -> Bool
    }

    /// Runs `write` now and, inside a drain's batch, remembers it for a replay.
    func recorded<T>(
        _ ids: [Int64],
        holds: @escaping @Sendable (T) -> Bool = { _ in true },
        _ write: @escaping @Sendable () throws -> T
    ) throws -> T {
        let result = try write()
        self.state.withLock { state in
            state.effects?.replays.append(Replay(ids: ids, redo: { holds(try write()) }))
        }
        return result
    }

    /// Inserts `rows` and indexes them; returns them with their ids, and each as the index has
    /// it (made once, before the queue's state is locked: an add held the lock that every
    /// transfer's end takes for ~5.9 K instructions a row, ~2 K of it making the row's info,
    /// which the add's answer then made again; now ~3.5 K).
    func insertDownloads(_ rows: [StoredDownload], files: [Int: [URL]] = [:]) throws -> (rows: [StoredDownload], infos: [QueuedDownloadInfo]) {
        // New rows have no ids yet: a failed replay of an insert loses no other download's.
        try self.recorded([]) {
            let inserted: [StoredDownload]
            if files.isEmpty {
                inserted = try self.store.insert(rows)
            } else {
                guard let lists = self.store as? TransferStore else { throw DaemonError("list downloads need hauld's own store") }
                inserted = try lists.insert(rows, files: files)
            }
            let infos = inserted.map(\.info)
            self.state.withLock { state in
                for (row, info) in zip(inserted, infos) {
                    state.index.put(info)
                    state.waitingRows.saved(row)
                }
            }
            return (inserted, infos)
        }
    }

    /// Changes one download under the store's write lock; `nil` when there is none.
    @discardableResult
    func updateDownload(id: Int64, _ change: @escaping @Sendable (inout StoredDownload) throws -> Void) throws -> StoredDownload? {
        let held = self.heldClaim(id)
        return try self.recorded([id]) {
            let updated = try held.map { try $0.store.updateDownload($0.claim.claimed, stored: $0.claim.stored, change) } ?? self.store.updateDownload(id: id, change)
            if let updated { self.saved(updated, claimWritten: held != nil) }
            return updated
        }
    }

    /// Changes a download this daemon runs, under its lease (refused with ``QueueLeaseLost``
    /// when another daemon of the fleet holds it now); with `release`, the lease goes too.
    @discardableResult
    func updateDownload(
        id: Int64,
        lease: QueueLease,
        release: Bool = false,
        last known: StoredDownload? = nil,
        _ change: @escaping @Sendable (inout StoredDownload) throws -> Void
    ) throws -> StoredDownload? {
        let held = self.heldClaim(id)
        // The row as this queue last saved it (or read it, when another daemon changed it): the
        // caller's, else its run's. A shared store writes over it without reading it first while
        // it is still so.
        let last = self.store.isShared ? known ?? self.state.withLock { $0.running[id]?.stored } : nil
        return try self.recorded([id]) {
            let updated = try held.map { try $0.store.updateDownload($0.claim.claimed, stored: $0.claim.stored, change) }
                ?? self.store.updateDownload(id: id, lease: lease, release: release, last: last, change)
            if let updated { self.saved(updated, claimWritten: held != nil) }
            return updated
        }
    }

    /// The claim of download `id` held in memory (``State/heldClaims``), for the next write
    /// to save with its own change. Taken before the write (not inside it), so that a replay
    /// of the write saves the claim again.
    private func heldClaim(_ id: Int64) -> (store: any SoleWriterQueueStore, claim: HeldClaim)? {
        guard let soleWriter = self.soleWriter, let claim = self.state.withLock({ $0.heldClaims[id] }) else { return nil }
        return (soleWriter, claim)
    }

    private func saved(_ row: StoredDownload, claimWritten: Bool) {
        let info = row.info
        self.state.withLock { state in
            if claimWritten, let id = row.id { state.heldClaims[id] = nil }
            state.saved(row, as: info)
        }
    }

    /// Writes the claim of running download `id` if it is still held in memory: before a step
    /// that reads the download's row from the store.
    func saveHeldClaim(_ id: Int64) throws {
        dispatchPrecondition(condition: .onQueue(self.work))
        guard self.heldClaim(id) != nil else { return }
        try self.updateDownload(id: id) { _ in }
    }

    /// Changes many downloads in one transaction; `change` says whether it changed the row.
    func updateDownloads(ids: [Int64], _ change: @escaping @Sendable (inout StoredDownload) throws -> Bool) throws -> [StoredDownload] {
        // `change` sees the rows as stored: claims held in memory are written first.
        for id in ids { try self.saveHeldClaim(id) }
        return try self.recorded(ids) {
            let changed = try self.store.updateDownloads(ids: ids, change)
            self.state.withLock { state in
                for row in changed { state.saved(row) }
            }
            return changed
        }
    }

    /// Claims waiting download `claim.downloadID` for this daemon (see ``QueueStore/claim(_:_:)``).
    /// A sole-writer store's claim is decided and held in memory (``State/heldClaims``), not
    /// written: the download's next write saves it.
    func claimDownload(_ claim: QueueClaim, _ change: @escaping @Sendable (inout StoredDownload) throws -> Void) throws -> QueueClaimOutcome {
        if let soleWriter = self.soleWriter {
            var row = self.state.withLock { $0.waitingRows.take(claim.downloadID) }
            if row == nil {
                // Not kept: the rows of the downloads after it are read with its own, for the
                // claims that follow (a queue starts them in id order unless told otherwise).
                let rows = try soleWriter.waitingDownloads(from: claim.downloadID, limit: Self.waitingRowsRead)
                row = rows.first { $0.id == claim.downloadID }
                self.state.withLock { state in
                    for other in rows where other.id != claim.downloadID { state.waitingRows.saved(other) }
                }
            }
            let outcome = try claim.decided(on: row, change)
            if case .claimed(let claimed, _, _) = outcome, let row {
                self.state.withLock { $0.heldClaims[claim.downloadID] = HeldClaim(claimed: claimed, stored: row) }
            }
            return outcome
        }
        return try self.recorded([claim.downloadID], holds: { if case .claimed = $0 { true } else { false } }) {
            try self.store.claim(claim, change)
        }
    }

    func deleteDownload(id: Int64) throws {
        try self.recorded([id]) {
            try self.store.deleteDownload(id: id)
            self.state.withLock { state in
                state.index.remove(id: id)
                state.heldClaims[id] = nil
                state.waitingRows.remove(id)
            }
        }
    }

    /// Deletes finished, failed and removed downloads; returns their ids. The bytes a failed
    /// download kept for a resume go with it (a complete file stays).
    func purgeFinishedDownloads() throws -> [Int64] {
        let kept = self.state.withLock { state in
            state.index.entries.filter { $0.state == .error }.compactMap(\.info.path)
        }
        _ = try self.store.purgeFinishedDownloads()
        for path in kept where path.hasSuffix(".haul-part") { unlink(path) }
        return self.state.withLock { $0.index.removeAll(in: [.complete, .error, .removed]) }
    }
}

extension DownloadQueue.State {
    /// A saved row (or one read from the store) replaces the index's entry, a running
    /// download's copy and the kept row of a waiting one. A running download's entry is put
    /// without its record (lists show its live numbers); the row saved as it stops running is
    /// put with one. A claimed row held in memory (not written yet) is not waiting: it only
    /// drops the kept one.
    mutating func saved(_ row: StoredDownload) {
        self.saved(row, as: row.info)
    }

    /// ``saved(_:)`` with the row's info made by the caller (`row.info`) before it took the
    /// lock: on the paths every download takes, the lock is held for the index's update only.
    mutating func saved(_ row: StoredDownload, as info: QueuedDownloadInfo) {
        self.waitingRows.saved(row)
        guard let id = row.id, self.running[id] != nil else { return self.index.put(info) }
        // Listed (and counted) as waiting until its run has its slot.
        self.index.put(DownloadQueue.listed(info, admitted: self.running[id]!.isAdmitted), prepared: false)
        self.running[id]!.stored = row
    }
}
