import Foundation
import GRDB
import HaulCore

/// The daemon's durable state: tasks and the events owed to clients, in one SQLite database.
///
/// Wraps a GRDB writer, migrates it when opened, and offers intention-named methods. Shipped
/// migrations are never edited; new ones are appended.
public struct TransferStore: Sendable {
    private let writer: any DatabaseWriter
    /// `sqlite:PATH` (`sqlite::memory:` for a store in memory).
    public let storeDescription: String

    /// Opens (creating if needed) the store at `path`, in WAL mode.
    ///
    /// - Throws: GRDB's error when the file cannot be opened or migrated.
    public static func open(path: String) throws -> TransferStore {
        var configuration = Configuration()
        configuration.busyMode = .timeout(5)
        // Statement journals in memory: a statement of a batch that may abort half-way (an
        // insert of many rows, checked against the unique gid index) keeps the pages it changes
        // in one, and past 64 KiB SQLite spills it to a file in the temporary directory — on
        // the disk even when the store is not (a batch add of 1,000 into a queue of 15,000 wrote
        // such a file a statement: 28 % of the add's CPU in ext4 writes, 12.3-14.9 → 10.4-11.5
        // ms an add), and a failed add when that directory is not writable.
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA temp_store = MEMORY") }
        let pool = try DatabasePool(path: path, configuration: configuration)
        return try TransferStore(writer: pool, description: "sqlite:\(path)")
    }

    /// A store in memory, for tests.
    public static func inMemory() throws -> TransferStore {
        try TransferStore(writer: DatabaseQueue(), description: "sqlite::memory:")
    }

    public init(writer: any DatabaseWriter, description: String = "sqlite") throws {
        self.writer = writer
        self.storeDescription = description
        try Self.migrator.migrate(writer)
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1: tasks and pending events") { db in
            try db.create(table: StoredTask.databaseTableName) { table in
                table.autoIncrementedPrimaryKey("id")
                table.column("sessionIdentifier", .text).notNull().indexed()
                table.column("state", .text).notNull()
                table.column("originalURL", .text).notNull()
                table.column("currentURL", .text).notNull()
                table.column("requestHeaders", .jsonText).notNull()
                table.column("taskDescription", .text)
                table.column("isDiscretionary", .boolean).notNull()
                table.column("isUpload", .boolean).notNull()
                table.column("method", .text).notNull()
                table.column("uploadFilePath", .text)
                table.column("partialFilePath", .text).notNull()
                table.column("bytesOnDisk", .integer).notNull()
                table.column("entityLength", .integer)
                table.column("entityTag", .text)
                table.column("lastModified", .text)
                table.column("failedAttempts", .integer).notNull()
                table.column("lastError", .text)
                table.column("createdAt", .datetime).notNull()
                table.column("resourceDeadline", .datetime).notNull()
                table.column("notBefore", .datetime)
            }
            try db.create(table: PendingEvent.databaseTableName) { table in
                table.autoIncrementedPrimaryKey("id")
                table.column("sessionIdentifier", .text).notNull().indexed()
                table.column("taskID", .integer).notNull()
                table.column("kind", .text).notNull()
                table.column("heldFilePath", .text)
                table.column("statusCode", .integer)
                table.column("responseHeaders", .jsonText)
                table.column("responseURL", .text)
                table.column("errorCode", .integer)
                table.column("errorMessage", .text)
                table.column("resumeData", .blob)
                table.column("responseBody", .blob)
                table.column("createdAt", .datetime).notNull()
            }
            try db.create(table: StoredSession.databaseTableName) { table in
                table.primaryKey("identifier", .text)
                table.column("launchCommand", .jsonText)
            }
        }
        Self.registerQueueMigrations(&migrator)
        migrator.registerMigration("v5: segmented background downloads (connections, map of ranges on disk)") { db in
            try db.alter(table: StoredTask.databaseTableName) { table in
                table.add(column: "connections", .integer)
                table.add(column: "segments", .jsonText)
            }
        }
        migrator.registerMigration("v6: no index of the queue's states") { db in
            // Every download wrote it twice (its insert as waiting, its end's update: one entry
            // out, one in), ~10 K of SQLite's instructions a small file (callgrind, SQLite alone:
            // 44.6 → 34.3 K for an insert and an end). Nothing reads through it any more: the
            // queue keeps the states in memory, the read-ahead of waiting rows walks a window
            // of ids (``waitingDownloads(from:limit:)``), and the start-up's revive and a purge
            // scan the table.
            try db.execute(sql: "DROP INDEX IF EXISTS queuedDownload_on_state")
        }
        migrator.registerMigration("v7: list downloads (one download, many files)") { db in
            try db.alter(table: StoredDownload.databaseTableName) { table in
                table.add(column: "fileCount", .integer)
            }
            // The list's URLs, one per line, in one row written once with the list; a narrow row
            // per file only once it has ended, written in batches as files finish. A small file
            // costs a few K of SQLite's instructions instead of a queued download's insert,
            // promise and end (~70 K, with the queue's bookkeeping around them ~220 K); a row per
            // file written with the list made the add of 1,000 take ~9 ms before the first
            // could start.
            try db.execute(sql: """
                CREATE TABLE \(StoredListFile.listTableName) (
                    download INTEGER PRIMARY KEY REFERENCES \(StoredDownload.databaseTableName)(id) ON DELETE CASCADE,
                    urls TEXT NOT NULL
                )
                """)
            try db.execute(sql: """
                CREATE TABLE \(StoredListFile.databaseTableName) (
                    download INTEGER NOT NULL REFERENCES \(StoredDownload.databaseTableName)(id) ON DELETE CASCADE,
                    position INTEGER NOT NULL,
                    state TEXT NOT NULL,
                    path TEXT,
                    bytes INTEGER,
                    error TEXT,
                    PRIMARY KEY (download, position)
                ) WITHOUT ROWID
                """)
        }
        return migrator
    }

    /// A read of the queue's rows: inside a ``batch(_:)`` of this thread, on its transaction
    /// (it sees the batch's own writes); otherwise a read transaction of its own.
    package func read<T>(_ body: (Database) throws -> T) throws -> T {
        if let db = try self.intactBatch() { return try body(db) }
        return try self.writer.read(body)
    }

    /// A change of the queue's rows, all or nothing: inside a ``batch(_:)`` of this thread, a
    /// savepoint of its transaction; otherwise a transaction of its own.
    ///
    /// `oneStatement`: `body` writes with a single statement (after any reads), which SQLite
    /// applies whole or not at all by itself: inside a batch it needs no savepoint (two more
    /// statements, parsed each time, per change).
    func write<T>(oneStatement: Bool = false, _ body: (Database) throws -> T) throws -> T {
        guard let db = try self.intactBatch() else { return try self.writer.write(body) }
        if oneStatement { return try body(db) }
        var result: T?
        try db.inSavepoint {
            result = try body(db)
            return .commit
        }
        return result!
    }

    // MARK: - Batches

    /// Runs `body` with every call it makes to this store's queue methods (reads and changes of
    /// downloads) on the calling thread inside one write transaction, committed when `body`
    /// returns: one commit (one WAL append, one lock round) for many downloads that start or
    /// end together, where each used to be a transaction of its own. Each change stays all or
    /// nothing (a savepoint, or its one statement) and sees the batch's earlier changes. A
    /// batch inside a batch joins it.
    ///
    /// The batch belongs to the thread: `body` must not reach the store from a block it runs
    /// synchronously on another dispatch queue (`sync` runs it on this same thread, where GRDB
    /// refuses the batch's connection), nor from another thread (that call waits for the
    /// batch's commit).
    ///
    /// - Throws: the commit's error (nothing of the batch is saved), or what `body` threw
    ///   (everything is rolled back).
    public func batch<T>(_ body: () throws -> T) throws -> T {
        if self.openBatch != nil { return try body() }
        return try self.writer.writeWithoutTransaction { db in
            // GRDB's own transactions parse BEGIN and COMMIT anew each time (`execute(sql:)`):
            // with a busy queue of small files committing every few ends, BEGIN alone was a
            // third of what a batch cost beyond its own changes (perf, 1,000 × 16 KiB). These
            // two are prepared once per connection; the rollback (rare) is GRDB's.
            try db.cachedStatement(sql: "BEGIN IMMEDIATE TRANSACTION").execute()
            do {
                let result = try Self.$currentBatch.withValue(OpenBatch(writer: ObjectIdentifier(self.writer), database: db)) {
                    try body()
                }
                try db.cachedStatement(sql: "COMMIT TRANSACTION").execute()
                return result
            } catch {
                // What `body` threw, or the commit's error (SQLite may keep the transaction
                // open after a failed commit, or have rolled it back already).
                try db.rollback()
                throw error
            }
        }
    }

    /// The transaction of a batch open on this thread for this store's database, if any.
    ///
    /// - Throws: when SQLite rolled that transaction back on its own (it may, on a full disk or
    ///   an I/O error): later calls would otherwise write outside of it, each saved at once,
    ///   while the batch's commit fails and its writes are made again.
    private func intactBatch() throws -> Database? {
        guard let db = self.openBatch else { return nil }
        guard db.isInsideTransaction else {
            throw DatabaseError(message: "the batch's transaction was rolled back after an earlier error; nothing more is written in it")
        }
        return db
    }

    /// The transaction of a batch open on this thread for this store's database, if any.
    private var openBatch: Database? {
        guard let batch = Self.currentBatch, batch.writer == ObjectIdentifier(self.writer) else { return nil }
        return batch.database
    }

    /// A batch's transaction, bound to the thread (a task-local outside of any task) that runs
    /// it: GRDB hands its connection to that thread only, for the batch's duration.
    private struct OpenBatch: @unchecked Sendable {
        var writer: ObjectIdentifier
        var database: Database
    }

    @TaskLocal private static var currentBatch: OpenBatch?

    // MARK: - Tasks

    /// Records a new task and returns it with its identifier.
    public func insert(_ task: StoredTask) throws -> StoredTask {
        try self.writer.write { db in
            var task = task
            try task.insert(db)
            return task
        }
    }

    /// The task with `id`, if it exists.
    public func task(id: Int64) throws -> StoredTask? {
        try self.writer.read { db in try StoredTask.fetchOne(db, key: id) }
    }

    /// A session's tasks that have not completed, oldest first.
    public func liveTasks(session: String) throws -> [StoredTask] {
        try self.writer.read { db in
            try StoredTask
                .filter(StoredTask.Columns.sessionIdentifier == session)
                .filter(StoredTask.Columns.state != StoredTask.State.completed.rawValue)
                .order(StoredTask.Columns.id)
                .fetchAll(db)
        }
    }

    /// Every task that should be transferring or waiting to (after a daemon restart, the
    /// `running` ones were interrupted and go back to `waiting`).
    public func reviveInterruptedTasks() throws -> [StoredTask] {
        try self.writer.write { db in
            try db.execute(sql: "UPDATE transferTask SET state = 'waiting' WHERE state = 'running'")
            return try StoredTask
                .filter(StoredTask.Columns.state == StoredTask.State.waiting.rawValue)
                .order(StoredTask.Columns.id)
                .fetchAll(db)
        }
    }

    /// Tasks waiting for a transfer slot, oldest first.
    public func waitingTasks() throws -> [StoredTask] {
        try self.writer.read { db in
            try StoredTask
                .filter(StoredTask.Columns.state == StoredTask.State.waiting.rawValue)
                .order(StoredTask.Columns.id)
                .fetchAll(db)
        }
    }

    /// Saves every column of `task`.
    public func update(_ task: StoredTask) throws {
        try self.writer.write { db in try task.update(db) }
    }

    /// Records progress: the bytes safely on disk and the entity they belong to.
    public func checkpoint(taskID: Int64, point: ResumePoint?, currentURL: URL) throws {
        try self.writer.write { db in
            try db.execute(
                sql: """
                    UPDATE transferTask SET bytesOnDisk = ?, entityLength = ?, entityTag = ?, lastModified = ?,
                    currentURL = ?, segments = ? WHERE id = ?
                    """,
                arguments: [
                    point?.offset ?? 0, point?.entityLength, point?.validators.entityTag,
                    point?.validators.lastModified, currentURL.absoluteString,
                    point?.segments.flatMap { try? String(decoding: JSONEncoder().encode($0), as: UTF8.self) }, taskID,
                ]
            )
        }
    }

    /// Marks the task completed and queues its events, atomically.
    public func complete(taskID: Int64, events: [PendingEvent]) throws -> [PendingEvent] {
        try self.writer.write { db in
            try db.execute(sql: "UPDATE transferTask SET state = 'completed' WHERE id = ?", arguments: [taskID])
            return try events.map { event in
                var event = event
                try event.insert(db)
                return event
            }
        }
    }

    // MARK: - Sessions

    /// Records what a session's client asked for on attach.
    public func save(_ session: StoredSession) throws {
        try self.writer.write { db in try session.save(db) }
    }

    /// The recorded settings of the session `identifier`.
    public func session(identifier: String) throws -> StoredSession? {
        try self.writer.read { db in try StoredSession.fetchOne(db, key: identifier) }
    }

    // MARK: - Events

    /// The events owed to `session`, in order.
    public func pendingEvents(session: String) throws -> [PendingEvent] {
        try self.writer.read { db in
            try PendingEvent
                .filter(PendingEvent.Columns.sessionIdentifier == session)
                .order(PendingEvent.Columns.id)
                .fetchAll(db)
        }
    }

    /// Sessions with events no client has taken yet.
    public func sessionsWithPendingEvents() throws -> [String] {
        try self.writer.read { db in
            try String.fetchAll(db, sql: "SELECT DISTINCT sessionIdentifier FROM pendingEvent")
        }
    }

    /// Forgets an event the client has handled. Returns the removed event, if it existed.
    @discardableResult
    public func acknowledge(eventID: Int64, session: String) throws -> PendingEvent? {
        try self.writer.write { db in
            guard let event = try PendingEvent.fetchOne(db, key: eventID), event.sessionIdentifier == session else {
                return nil
            }
            _ = try event.delete(db)
            return event
        }
    }
}
