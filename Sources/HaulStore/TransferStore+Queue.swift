import Foundation
import GRDB
import GRDBSQLite
import HaulCore
import Synchronization

/// The download manager's part of the store: queued downloads (kept as history until purged)
/// and the global settings.
extension TransferStore {
    static func registerQueueMigrations(_ migrator: inout DatabaseMigrator) {
        migrator.registerMigration("v2: download queue and settings") { db in
            try db.create(table: StoredDownload.databaseTableName) { table in
                table.autoIncrementedPrimaryKey("id")
                table.column("urls", .jsonText).notNull()
                table.column("urlIndex", .integer).notNull()
                table.column("currentURL", .text)
                table.column("directory", .text).notNull()
                table.column("requestedName", .text)
                table.column("fileName", .text)
                table.column("partialPath", .text)
                table.column("finalPath", .text)
                table.column("state", .text).notNull().indexed()
                table.column("bytesDone", .integer).notNull()
                table.column("totalBytes", .integer)
                table.column("entityTag", .text)
                table.column("lastModified", .text)
                table.column("errorMessage", .text)
                table.column("checksum", .text)
                table.column("priority", .integer).notNull()
                table.column("speedLimit", .integer).notNull()
                table.column("failedAttempts", .integer).notNull()
                table.column("notBefore", .datetime)
                table.column("createdAt", .datetime).notNull()
                table.column("startedAt", .datetime)
                table.column("finishedAt", .datetime)
            }
            try db.create(table: "queueSettings") { table in
                table.primaryKey("id", .integer)
                table.column("json", .text).notNull()
            }
        }
        migrator.registerMigration("v3: RPC ids, queue order, request headers and options") { db in
            try db.alter(table: StoredDownload.databaseTableName) { table in
                table.add(column: "gid", .text).notNull().defaults(to: "")
                table.add(column: "errorCode", .integer)
                table.add(column: "requestHeaders", .jsonText)
                table.add(column: "options", .jsonText)
                table.add(column: "queueRank", .double)
            }
            // Downloads from before the RPC get their id in hex: unique, and stable from now on.
            try db.execute(sql: "UPDATE queuedDownload SET gid = printf('%016x', id)")
            try db.create(index: "queuedDownload_gid", on: StoredDownload.databaseTableName, columns: ["gid"], unique: true)
        }
        migrator.registerMigration("v4: segmented downloads (map of ranges on disk, connections per download)") { db in
            try db.alter(table: StoredDownload.databaseTableName) { table in
                table.add(column: "segments", .jsonText)
                table.add(column: "connections", .integer)
            }
        }
    }

    // MARK: - Downloads

    public func download(id: Int64) throws -> StoredDownload? {
        try self.read { db in try Self.fetchDownload(db, id: id) }
    }

    /// Calls `body` with every download, oldest first, one row at a time (a restart with
    /// 10,000 downloads never holds them all at once).
    public func forEachDownload(_ body: (StoredDownload) throws -> Void) throws {
        try self.read { db in
            let statement = try db.makeStatement(sql: "SELECT \(StoredDownload.selectedColumns) FROM \(StoredDownload.databaseTableName) ORDER BY id")
            try Self.forEachRow(of: statement, db) { try body($0) }
        }
    }

    /// Up to `limit` waiting downloads from id `id` on, in id order, among the next
    /// ``waitingWindow(limit:)`` ids: the read walks rows by id (no index of states), so a
    /// stretch of finished or paused downloads costs it a bounded number of rows, not the rest
    /// of the table.
    public func waitingDownloads(from id: Int64, limit: Int) throws -> [StoredDownload] {
        try self.read { db in
            let statement = try db.cachedStatement(sql: "SELECT \(StoredDownload.selectedColumns) FROM \(StoredDownload.databaseTableName) WHERE id >= ? AND id < ? AND state = 'waiting' ORDER BY id LIMIT ?")
            let window = Self.waitingWindow(limit: limit)
            try statement.setArguments([id, id > Int64.max - window ? Int64.max : id + window, limit])
            var rows: [StoredDownload] = []
            try Self.forEachRow(of: statement, db) { rows.append($0) }
            return rows
        }
    }

    /// How many ids a read of `limit` waiting rows looks at.
    public static func waitingWindow(limit: Int) -> Int64 { Int64(max(limit, 1)) * 4 }

    /// Changes a download under the write lock: `change` sees the stored row, not a stale copy.
    /// Returns the saved row, or `nil` when there is no such download.
    @discardableResult
    public func updateDownload(id: Int64, _ change: @Sendable (inout StoredDownload) throws -> Void) throws -> StoredDownload? {
        try self.write(oneStatement: true) { db in
            guard var download = try Self.fetchDownload(db, id: id) else { return nil }
            let original = download
            try change(&download)
            try Self.saveDownload(db, download, original: original)
            return download
        }
    }

    /// After a restart: downloads that were active go back to waiting (they resume).
    public func reviveInterruptedDownloads() throws {
        try self.write { db in
            try db.execute(sql: "UPDATE queuedDownload SET state = 'waiting', notBefore = NULL WHERE state = 'active'")
        }
    }

    /// Deletes finished, failed and removed downloads from the history; returns how many.
    public func purgeFinishedDownloads() throws -> Int {
        try self.write { db in
            try db.execute(sql: "DELETE FROM queuedDownload WHERE state IN ('complete', 'error', 'removed')")
            return db.changesCount
        }
    }

    public func deleteDownload(id: Int64) throws {
        try self.write { db in _ = try StoredDownload.deleteOne(db, key: id) }
    }

    // MARK: - Settings

    /// The saved settings, or `nil` before the first change.
    public func queueSettings() throws -> QueueSettings? {
        try self.read { db in
            guard let json = try String.fetchOne(db, sql: "SELECT json FROM queueSettings WHERE id = 1") else { return nil }
            return try JSONDecoder().decode(QueueSettings.self, from: Data(json.utf8))
        }
    }

    public func save(_ settings: QueueSettings) throws {
        let json = String(decoding: try JSONEncoder().encode(settings), as: UTF8.self)
        try self.write { db in
            try db.execute(sql: "INSERT OR REPLACE INTO queueSettings (id, json) VALUES (1, ?)", arguments: [json])
        }
    }
}

extension TransferStore {
    /// Records many new downloads in one transaction (all or none), with their ids. A gid that
    /// is taken fails the batch (the queue checks client-chosen ones first).
    ///
    /// Up to ``rowsPerInsert`` rows go in one statement (`INSERT … VALUES (…), (…), …`):
    /// SQLite's work for a statement (its cursors, the AUTOINCREMENT counter read and written
    /// back) is then done once for them, not once a row (callgrind of SQLite alone, 1,000 rows
    /// of the queue's table: 22.3 K → 15.1 K instructions a row with 32 a statement). Batches
    /// take the largest power of two that fits, so a connection prepares at most six of these.
    public func insert(_ downloads: [StoredDownload]) throws -> [StoredDownload] {
        guard !downloads.isEmpty else { return [] }
        return try self.write { db in
            var inserted: [StoredDownload] = []
            inserted.reserveCapacity(downloads.count)
            while inserted.count < downloads.count {
                var rows = Self.rowsPerInsert
                while rows > downloads.count - inserted.count { rows /= 2 }
                let statement = try db.cachedStatement(sql: Self.insertDownloadSQL(rows: rows))
                let first = inserted.count
                for offset in 0..<rows {
                    var download = downloads[first + offset]
                    // Every download has an RPC id; the queue picks them, a bare insert gets a random one.
                    if download.gid.isEmpty { download.gid = DownloadGID.random() }
                    try download.bind(.all, to: statement.sqliteStatement, from: CInt(offset * StoredDownload.columns.count) + 1)
                    inserted.append(download)
                }
                try Self.step(statement, db)
                // One statement's rows get consecutive ids, in the order of its VALUES: each new
                // row's is one more than the largest the table has had (AUTOINCREMENT). Checked on
                // the first row all the same: a wrong id would point at another download's file.
                let last = db.lastInsertedRowID
                let firstID = last - Int64(rows) + 1
                guard db.changesCount == rows, try Self.gid(db, id: firstID) == inserted[first].gid else {
                    throw DatabaseError(message: "the rows of one insert did not get consecutive ids (last \(last), \(rows) rows)")
                }
                for offset in 0..<rows { inserted[first + offset].id = firstID + Int64(offset) }
            }
            return inserted
        }
    }

    /// The most rows one insert statement writes (29 parameters each, well below SQLite's limit).
    static let rowsPerInsert = 32

    private static func gid(_ db: Database, id: Int64) throws -> String? {
        let statement = try db.cachedStatement(sql: "SELECT gid FROM \(StoredDownload.databaseTableName) WHERE id = ?")
        try StoredValue.integer(id).bind(to: statement.sqliteStatement, at: 1)
        defer { sqlite3_reset(statement.sqliteStatement) }
        guard sqlite3_step(statement.sqliteStatement) == SQLITE_ROW, let text = sqlite3_column_text(statement.sqliteStatement, 0) else { return nil }
        return String(cString: text)
    }

    /// Changes many downloads in one transaction: `change` says whether it changed the row.
    /// Returns the changed rows.
    public func updateDownloads(ids: [Int64], _ change: (inout StoredDownload) throws -> Bool) throws -> [StoredDownload] {
        try self.write { db in
            var changed: [StoredDownload] = []
            for id in ids {
                guard var download = try Self.fetchDownload(db, id: id) else { continue }
                let original = download
                guard try change(&download) else { continue }
                try Self.saveDownload(db, download, original: original)
                changed.append(download)
            }
            return changed
        }
    }

    // One download by id, through a statement prepared once per connection (the query
    // interface builds and authorizes its SQL on every call: a tenth of a busy queue's CPU).
    static func fetchDownload(_ db: Database, id: Int64) throws -> StoredDownload? {
        let statement = try db.cachedStatement(sql: "SELECT \(StoredDownload.selectedColumns) FROM \(StoredDownload.databaseTableName) WHERE id = ?")
        try statement.setArguments([id])
        var found: StoredDownload?
        try Self.forEachRow(of: statement, db) { found = $0 }
        return found
    }

    /// Steps `statement` (its arguments set) over its rows of downloads, read off SQLite
    /// (``StoredDownload/init(statement:)``), and resets it.
    static func forEachRow(of statement: Statement, _ db: Database, _ body: (StoredDownload) throws -> Void) throws {
        let sqlite = statement.sqliteStatement
        defer { sqlite3_reset(sqlite) }
        while true {
            switch sqlite3_step(sqlite) {
            case SQLITE_ROW:
                try body(StoredDownload(statement: sqlite))
            case SQLITE_DONE:
                return
            case let code:
                throw DatabaseError(resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(db.sqliteConnection)), sql: statement.sql)
            }
        }
    }

    /// Saves the columns of a download (that has an id) that differ from `original`, the row as
    /// the store has it, through a statement prepared once per set of columns. Rewriting all 29
    /// made SQLite rewrite the entries of every index too (state, gid) for a change of one
    /// number; the sets that occur are few (a claim's, a checkpoint's, an end's).
    static func saveDownload(_ db: Database, _ download: StoredDownload, original: StoredDownload) throws {
        guard let id = download.id else { throw DatabaseError(message: "a download without an id cannot be updated") }
        let changed = download.changedColumns(since: original)
        guard !changed.isEmpty else { return }
        let statement = try db.cachedStatement(sql: Self.updateSQL(changed))
        try download.bind(changed, to: statement.sqliteStatement)
        try StoredValue.integer(id).bind(to: statement.sqliteStatement, at: CInt(changed.bits.nonzeroBitCount) + 1)
        try Self.step(statement, db)
    }

    /// Runs `statement` (a change, its parameters bound) to its end and resets it: straight
    /// on SQLite, as ``forEachRow(of:_:_:)`` reads.
    static func step(_ statement: Statement, _ db: Database) throws {
        let sqlite = statement.sqliteStatement
        defer { sqlite3_reset(sqlite) }
        let code = sqlite3_step(sqlite)
        guard code == SQLITE_DONE else {
            throw DatabaseError(resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(db.sqliteConnection)), sql: statement.sql)
        }
    }

    /// `UPDATE … SET a = ?, b = ? WHERE id = ?` for the columns in `changed`, made once per set.
    private static func updateSQL(_ changed: StoredDownload.ColumnSet) -> String {
        if let sql = Self.updateSQLCache.withLock({ $0[changed] }) { return sql }
        let assignments = changed.map { StoredDownload.columns[$0].name + " = ?" }.joined(separator: ", ")
        let sql = "UPDATE \(StoredDownload.databaseTableName) SET \(assignments) WHERE id = ?"
        Self.updateSQLCache.withLock { $0[changed] = sql }
        return sql
    }

    private static let updateSQLCache = Mutex<[StoredDownload.ColumnSet: String]>([:])

    /// `INSERT` of `rows` downloads (every column but `id`), made once per size.
    private static func insertDownloadSQL(rows: Int) -> String {
        if let sql = Self.insertSQLCache.withLock({ $0[rows] }) { return sql }
        let values = "(" + Array(repeating: "?", count: StoredDownload.columnNames.count).joined(separator: ", ") + ")"
        let sql = "INSERT INTO \(StoredDownload.databaseTableName) (\(StoredDownload.columnNames.joined(separator: ", "))) VALUES "
            + Array(repeating: values, count: rows).joined(separator: ", ")
        Self.insertSQLCache.withLock { $0[rows] = sql }
        return sql
    }

    private static let insertSQLCache = Mutex<[Int: String]>([:])
}
