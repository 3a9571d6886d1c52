import Foundation
import HaulCore
import HaulStore

/// Every write of a download goes through here: the store first (the durable copy), then the
/// in-memory ``DownloadIndex`` that lists and counts are answered from. Called on `work`.
extension DownloadQueue {
    func insertDownloads(_ rows: [StoredDownload]) throws -> [StoredDownload] {
        let inserted = try self.store.insert(rows)
        self.state.withLock { state in
            for row in inserted { state.index.put(row.info) }
        }
        return inserted
    }

    /// Changes one download under the store's write lock; `nil` when there is none.
    @discardableResult
    func updateDownload(id: Int64, _ change: @Sendable (inout StoredDownload) throws -> Void) throws -> StoredDownload? {
        let updated = try self.store.updateDownload(id: id, change)
        if let updated { self.state.withLock { $0.saved(updated) } }
        return updated
    }

    /// Changes a download this daemon runs, under its lease (refused with ``QueueLeaseLost``
    /// when another daemon of the fleet holds it now); with `release`, the lease goes too.
    @discardableResult
    func updateDownload(id: Int64, lease: QueueLease, release: Bool = false, _ change: @Sendable (inout StoredDownload) throws -> Void) throws -> StoredDownload? {
        let updated = try self.store.updateDownload(id: id, lease: lease, release: release, change)
        if let updated { self.state.withLock { $0.saved(updated) } }
        return updated
    }

    /// Changes many downloads in one transaction; `change` says whether it changed the row.
    func updateDownloads(ids: [Int64], _ change: (inout StoredDownload) throws -> Bool) throws -> [StoredDownload] {
        let changed = try self.store.updateDownloads(ids: ids, change)
        self.state.withLock { state in
            for row in changed { state.saved(row) }
        }
        return changed
    }

    func deleteDownload(id: Int64) throws {
        try self.store.deleteDownload(id: id)
        self.state.withLock { $0.index.remove(id: id) }
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
    /// A saved row replaces the index's entry and a running download's copy.
    mutating func saved(_ row: StoredDownload) {
        self.index.put(row.info)
        if let id = row.id, self.running[id] != nil { self.running[id]!.stored = row }
    }
}
