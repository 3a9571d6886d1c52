import Foundation
import GRDB
import HaulCore
import Synchronization

/// Where the download queue keeps its downloads and settings, whatever engine holds them: the
/// embedded SQLite store (``TransferStore``, the default) or a PostgreSQL database
/// (``PostgresQueueStore``). The queue does not know which one it talks to.
///
/// Calls are synchronous and may block (the queue makes them from its own serial dispatch
/// queue, never from an event loop). Each method is one transaction: a change is all or
/// nothing.
///
/// A shared store (``isShared``) is one queue for a fleet of daemons: a daemon starts a
/// download only after ``claim(_:_:)`` granted it a lease, renews its leases while it
/// transfers (``renewLeases(_:seconds:)``), writes checkpoints under the lease (a stale one is
/// refused with ``QueueLeaseLost``), and any daemon hands downloads whose lease expired back to
/// the waiting queue (``reclaimExpiredLeases()``). The embedded store has one daemon: its claims
/// always succeed and its leases never expire.
public protocol QueueStore: Sendable {
    /// For the start-up log: the engine and where it is (`sqlite:/path`, `postgres://user@host:port/db`).
    var storeDescription: String { get }

    /// Whether other daemons may share this queue.
    var isShared: Bool { get }

    func download(id: Int64) throws -> StoredDownload?

    /// The downloads among `ids` that exist (any order; one missing was deleted), read together:
    /// a fleet's daemon reads what other daemons changed this way, however many changes the
    /// notifications brought since it last looked (one query where a row each was one).
    func downloads(ids: [Int64]) throws -> [StoredDownload]

    /// Calls `body` with every download, oldest first, without holding them all at once.
    func forEachDownload(_ body: (StoredDownload) throws -> Void) throws

    /// Changes a download under the store's write lock (`change` sees the stored row, not a
    /// stale copy); the saved row, or `nil` when there is no such download.
    @discardableResult
    func updateDownload(id: Int64, _ change: @Sendable (inout StoredDownload) throws -> Void) throws -> StoredDownload?

    /// As ``updateDownload(id:_:)``, by the holder of `lease`: refused with ``QueueLeaseLost``
    /// (nothing written) when the lease is no longer current. With `release`, the lease is
    /// given up by the same write. `last`: the row as the caller last saw it stored, if it
    /// knows it; a shared store writes the change over it without a read when the row is still
    /// that (else it reads). `change` may run more than once (a shared store reads again when
    /// the row changed between its read and its write).
    @discardableResult
    func updateDownload(id: Int64, lease: QueueLease, release: Bool, last: StoredDownload?, _ change: @Sendable (inout StoredDownload) throws -> Void) throws -> StoredDownload?

    /// Refused with ``QueueLeaseLost`` when `lease` is no longer current for download `id`;
    /// writes nothing. For steps that may happen only while the download is this daemon's
    /// (placing its finished file).
    func confirmLease(id: Int64, lease: QueueLease) throws

    /// Claims a waiting download that no live lease holds; `change` is applied to the row
    /// and saved with the claim, all or nothing (the queue marks it active). Never waits for
    /// another daemon's claim in progress. `change` may run more than once, on each row read
    /// (a shared store reads again when it loses a race for the row).
    func claim(_ claim: QueueClaim, _ change: @Sendable (inout StoredDownload) throws -> Void) throws -> QueueClaimOutcome

    /// Extends `leases` by `seconds` from now (the store's clock); the ids whose lease is still
    /// this daemon's — a download missing from the answer was lost and must not be written.
    func renewLeases(_ leases: [Int64: QueueLease], seconds: Double) throws -> Set<Int64>

    /// Downloads whose lease expired (their daemon died or was cut off) lose it; active ones
    /// wait again. Returns them, each with the daemon that held it.
    func reclaimExpiredLeases() throws -> [(download: StoredDownload, previousHolder: String)]

    /// Records that `daemon` is alive (a heartbeat) and answers the daemons seen within
    /// `liveSeconds`, with the downloads each holds.
    func heartbeat(daemon: String, pid: Int32, startedAt: Date, liveSeconds: Double) throws -> [DaemonPresence]

    /// `daemon` stops: its presence goes (its leases were released or expire on their own).
    func leave(daemon: String) throws

    /// Calls `handler` (on any thread, in order) with what other daemons change; `nil` when
    /// nobody else can change this store.
    func observeChanges(_ handler: @escaping @Sendable (QueueStoreChange) -> Void) -> (any QueueStoreObservation)?

    /// The store calls in flight for longer than `limit` ("lease connection: running 'UPDATE
    /// haul_queued_download SET …', for 12.3 s"), for a daemon's log when its lease keeper stops
    /// coming back. Empty for a store of one daemon.
    func callsInFlight(longerThan limit: Duration) -> [String]

    /// Changes many downloads in one transaction: `change` says whether it changed the row.
    /// Returns the changed rows.
    func updateDownloads(ids: [Int64], _ change: (inout StoredDownload) throws -> Bool) throws -> [StoredDownload]

    /// Records new downloads in one transaction (all or none), with their ids; a download
    /// without a gid gets a random one. A gid that is taken fails the batch.
    func insert(_ downloads: [StoredDownload]) throws -> [StoredDownload]

    /// After a restart of `daemon`: the downloads it held (and active ones nobody holds any
    /// more) go back to waiting; they resume.
    func reviveInterruptedDownloads(of daemon: String) throws

    /// Runs `body`, whose calls to this store on the calling thread join one transaction where
    /// the engine allows it (the embedded store: one SQLite transaction, each call of more than
    /// one statement a savepoint in it). Every call keeps its own all-or-nothing; the batch's commit saves them together.
    /// A store without batches runs `body` as it is: each call its own transaction.
    ///
    /// - Throws: the commit's error, when nothing of the batch was saved.
    func batch<T>(_ body: () throws -> T) throws -> T

    /// Deletes finished, failed and removed downloads; returns how many.
    func purgeFinishedDownloads() throws -> Int

    func deleteDownload(id: Int64) throws

    /// The saved settings, or `nil` before the first change.
    func queueSettings() throws -> QueueSettings?

    func save(_ settings: QueueSettings) throws
}

/// A queue store that only this daemon writes (the embedded SQLite file, never a fleet's): the
/// queue may hold a claim in memory and save it with the download's next write.
///
/// A claim written at once cost a small file one of its two row writes, and a commit before its
/// run could start. Held back, nothing is lost by a crash: a restart makes every active row
/// wait again (``QueueStore/reviveInterruptedDownloads(of:)``), and a claim not yet written
/// leaves the row waiting already.
public protocol SoleWriterQueueStore: QueueStore {
    /// Applies `change` to `current`, the queue's copy of a download that has changes not yet
    /// written, and saves the columns that differ from `stored`, the row as the store has it.
    /// No read: nothing but this daemon writes the row. Returns the row as saved.
    func updateDownload(_ current: StoredDownload, stored: StoredDownload, _ change: (inout StoredDownload) throws -> Void) throws -> StoredDownload

    /// Up to `limit` waiting downloads from id `id` on, in id order, among the next few ids
    /// (``TransferStore/waitingWindow(limit:)``): one read for the rows of the next claims (the
    /// queue keeps them, see `WaitingRowCache`).
    func waitingDownloads(from id: Int64, limit: Int) throws -> [StoredDownload]

    /// Saves, in one transaction, where each download's finished file is about to be placed
    /// (`finalPath`) and its length (`totalBytes`), and nothing else of the row: the download
    /// stays as it is stored (waiting, or active under a claim already saved) until its end is
    /// saved. What a restart finds such a file by.
    func promisePlacements(_ promises: [PlacementPromise]) throws
}

/// Where a download's finished file is about to be placed (``SoleWriterQueueStore/promisePlacements(_:)``).
public struct PlacementPromise: Sendable, Hashable {
    public var id: Int64
    public var path: String
    public var totalBytes: Int64

    public init(id: Int64, path: String, totalBytes: Int64) {
        self.id = id
        self.path = path
        self.totalBytes = totalBytes
    }
}

extension QueueClaim {
    /// The claim decided on `stored`, the download's row as a sole-writer store has it (`nil`:
    /// there is none), as ``QueueStore/claim(_:_:)`` decides it, and written nowhere: the write
    /// that saves it later is ``SoleWriterQueueStore/updateDownload(_:stored:_:)``.
    public func decided(on stored: StoredDownload?, _ change: (inout StoredDownload) throws -> Void) throws -> QueueClaimOutcome {
        guard var claimed = stored, claimed.state == .waiting else { return .notWaiting(stored) }
        try change(&claimed)
        return .claimed(claimed, QueueLease(daemon: self.daemon, generation: 0), connections: self.connections)
    }
}

extension TransferStore: SoleWriterQueueStore {
    public func updateDownload(_ current: StoredDownload, stored: StoredDownload, _ change: (inout StoredDownload) throws -> Void) throws -> StoredDownload {
        var download = current
        try change(&download)
        try self.write(oneStatement: true) { db in try Self.saveDownload(db, download, original: stored) }
        return download
    }

    /// One transaction with prepared `BEGIN` and `COMMIT` (``batch(_:)``), its statement bound
    /// and stepped straight on SQLite: a busy queue of small files promises three or four at a
    /// time, and GRDB's transaction and argument checks cost more than SQLite's updates did
    /// (callgrind, 1,000 × 16 KiB). One `UPDATE … FROM` a list of promises cost SQLite more per
    /// row than an update each.
    public func promisePlacements(_ promises: [PlacementPromise]) throws {
        guard !promises.isEmpty else { return }
        try self.batch {
            try self.write(oneStatement: true) { db in
                let statement = try db.cachedStatement(sql: "UPDATE \(StoredDownload.databaseTableName) SET finalPath = ?, totalBytes = ? WHERE id = ?")
                for promise in promises {
                    try StoredValue.text(promise.path).bind(to: statement.sqliteStatement, at: 1)
                    try StoredValue.integer(promise.totalBytes).bind(to: statement.sqliteStatement, at: 2)
                    try StoredValue.integer(promise.id).bind(to: statement.sqliteStatement, at: 3)
                    try Self.step(statement, db)
                }
            }
        }
    }
}

extension TransferStore: QueueStore {
    public var isShared: Bool { false }

    public func reviveInterruptedDownloads(of daemon: String) throws {
        try self.reviveInterruptedDownloads()
    }

    // One daemon owns the embedded store (its socket and lock file say so): a lease is the
    // daemon's for as long as it runs, and its generation is never checked.

    @discardableResult
    public func updateDownload(id: Int64, lease: QueueLease, release: Bool, last: StoredDownload?, _ change: @Sendable (inout StoredDownload) throws -> Void) throws -> StoredDownload? {
        try self.updateDownload(id: id, change)
    }

    /// The embedded store's leases are this daemon's for as long as it runs: nothing to read or
    /// write (it was a write transaction per finished download, a quarter of a small file's
    /// bookkeeping).
    public func confirmLease(id: Int64, lease: QueueLease) throws {}

    public func claim(_ claim: QueueClaim, _ change: @Sendable (inout StoredDownload) throws -> Void) throws -> QueueClaimOutcome {
        let waiting = Mutex(true)
        let updated = try self.updateDownload(id: claim.downloadID) { download in
            guard download.state == .waiting else {
                waiting.withLock { $0 = false }
                return
            }
            try change(&download)
        }
        guard let updated, waiting.withLock({ $0 }) else { return .notWaiting(updated) }
        return .claimed(updated, QueueLease(daemon: claim.daemon, generation: 0), connections: claim.connections)
    }

    public func renewLeases(_ leases: [Int64: QueueLease], seconds: Double) throws -> Set<Int64> {
        Set(leases.keys)
    }

    public func reclaimExpiredLeases() throws -> [(download: StoredDownload, previousHolder: String)] { [] }

    public func heartbeat(daemon: String, pid: Int32, startedAt: Date, liveSeconds: Double) throws -> [DaemonPresence] {
        [DaemonPresence(name: daemon, pid: pid, startedAt: startedAt, seenAt: Date(), downloads: [])]
    }

    public func leave(daemon: String) throws {}

    public func observeChanges(_ handler: @escaping @Sendable (QueueStoreChange) -> Void) -> (any QueueStoreObservation)? { nil }
}

extension QueueStore {
    /// A store with no calls that can hang (SQLite answers or fails) reports none.
    public func callsInFlight(longerThan limit: Duration) -> [String] { [] }

    /// One read a download, for a store whose reads cost no round trip (the embedded one).
    public func downloads(ids: [Int64]) throws -> [StoredDownload] {
        try ids.compactMap { try self.download(id: $0) }
    }

    /// ``updateDownload(id:lease:release:last:_:)`` by a caller that does not know the row.
    @discardableResult
    public func updateDownload(id: Int64, lease: QueueLease, release: Bool, _ change: @Sendable (inout StoredDownload) throws -> Void) throws -> StoredDownload? {
        try self.updateDownload(id: id, lease: lease, release: release, last: nil, change)
    }
}
