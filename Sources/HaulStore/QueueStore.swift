import Foundation
import HaulCore

/// Where the download queue keeps its downloads and settings, whatever engine holds them: the
/// embedded SQLite store (``TransferStore``, the default) or a PostgreSQL database
/// (``PostgresQueueStore``). The queue does not know which one it talks to.
///
/// Calls are synchronous and may block (the queue makes them from its own serial dispatch
/// queue, never from an event loop). Each method is one transaction: a change is all or
/// nothing.
public protocol QueueStore: Sendable {
    /// For the start-up log: the engine and where it is (`sqlite:/path`, `postgres://user@host:port/db`).
    var storeDescription: String { get }

    func download(id: Int64) throws -> StoredDownload?

    /// Calls `body` with every download, oldest first, without holding them all at once.
    func forEachDownload(_ body: (StoredDownload) throws -> Void) throws

    /// Changes a download under the store's write lock (`change` sees the stored row, not a
    /// stale copy); the saved row, or `nil` when there is no such download.
    @discardableResult
    func updateDownload(id: Int64, _ change: @Sendable (inout StoredDownload) throws -> Void) throws -> StoredDownload?

    /// Changes many downloads in one transaction: `change` says whether it changed the row.
    /// Returns the changed rows.
    func updateDownloads(ids: [Int64], _ change: (inout StoredDownload) throws -> Bool) throws -> [StoredDownload]

    /// Records new downloads in one transaction (all or none), with their ids; a download
    /// without a gid gets a random one. A gid that is taken fails the batch.
    func insert(_ downloads: [StoredDownload]) throws -> [StoredDownload]

    /// After a restart: downloads that were active go back to waiting (they resume).
    func reviveInterruptedDownloads() throws

    /// Deletes finished, failed and removed downloads; returns how many.
    func purgeFinishedDownloads() throws -> Int

    func deleteDownload(id: Int64) throws

    /// The saved settings, or `nil` before the first change.
    func queueSettings() throws -> QueueSettings?

    func save(_ settings: QueueSettings) throws
}

extension TransferStore: QueueStore {}
