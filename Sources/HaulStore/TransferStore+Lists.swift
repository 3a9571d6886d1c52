import Foundation
import GRDB
import GRDBSQLite
import HaulCore

/// The files of list downloads (``StoredDownload/fileCount``): one narrow row each, in their own
/// table, deleted with their download.
extension TransferStore {
    /// Inserts `downloads` as ``insert(_:)`` does and, in the same transaction, the URLs of
    /// those that are lists (`files[i]`: the URLs of `downloads[i]`, in order) as one row each.
    /// All or none.
    public func insert(_ downloads: [StoredDownload], files: [Int: [URL]]) throws -> [StoredDownload] {
        try self.batch {
            let inserted = try self.insert(downloads)
            guard !files.isEmpty else { return inserted }
            try self.write(oneStatement: true) { db in
                let statement = try db.cachedStatement(sql: "INSERT INTO \(StoredListFile.listTableName) (download, urls) VALUES (?, ?)")
                for (index, urls) in files.sorted(by: { $0.key < $1.key }) {
                    guard let id = inserted[index].id else { continue }
                    // A URL holds no line break (it would not have parsed as one).
                    var text = ""
                    text.reserveCapacity(urls.count * 64)
                    for url in urls {
                        text += url.absoluteString
                        text += "\n"
                    }
                    try StoredValue.integer(id).bind(to: statement.sqliteStatement, at: 1)
                    try StoredValue.text(text).bind(to: statement.sqliteStatement, at: 2)
                    try Self.step(statement, db)
                }
            }
            return inserted
        }
    }

    /// The files of list download `download`, in their order: each file's URL, and how its last
    /// fetch ended (`waiting` while none has).
    public func files(of download: Int64) throws -> [StoredListFile] {
        try self.read { db in
            guard let text = try String.fetchOne(db, sql: "SELECT urls FROM \(StoredListFile.listTableName) WHERE download = ?", arguments: [download]) else { return [] }
            var files: [StoredListFile] = []
            for line in text.split(separator: "\n", omittingEmptySubsequences: true) {
                guard let url = URL(string: String(line)) else {
                    throw DatabaseError(message: "download \(download): unreadable URL of file \(files.count + 1)")
                }
                files.append(StoredListFile(position: files.count, url: url))
            }
            let statement = try db.cachedStatement(sql: "SELECT position, state, path, bytes, error FROM \(StoredListFile.databaseTableName) WHERE download = ?")
            try statement.setArguments([download])
            let sqlite = statement.sqliteStatement
            defer { sqlite3_reset(sqlite) }
            while true {
                let code = sqlite3_step(sqlite)
                if code == SQLITE_DONE { break }
                guard code == SQLITE_ROW else {
                    throw DatabaseError(resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(db.sqliteConnection)), sql: statement.sql)
                }
                let text = { (index: CInt) -> String? in
                    sqlite3_column_type(sqlite, index) == SQLITE_NULL ? nil : String(sqliteStatement: sqlite, index: index)
                }
                let position = Int(sqlite3_column_int64(sqlite, 0))
                guard files.indices.contains(position), let state = text(1).flatMap(StoredListFile.State.init(rawValue:)) else {
                    throw DatabaseError(message: "download \(download): unreadable row of file \(position + 1)")
                }
                files[position].state = state
                files[position].path = text(2)
                files[position].bytes = sqlite3_column_type(sqlite, 3) == SQLITE_NULL ? nil : sqlite3_column_int64(sqlite, 3)
                files[position].error = text(4)
            }
            return files
        }
    }

    /// Saves how `files` of list download `download` stand now (state, path, length, error),
    /// in one transaction.
    public func recordFiles(of download: Int64, _ files: [StoredListFile.End]) throws {
        guard !files.isEmpty else { return }
        try self.batch {
            try self.write(oneStatement: true) { db in
                // Rows of many values a statement (chunks of 32, 16 … 1 rows, each statement
                // prepared once): a statement's own cost (its start, its end's checks) was most
                // of what a row cost one at a time (callgrind, 1,000 files: 18.6 K instructions
                // a file for this method).
                var rest = files[...]
                while !rest.isEmpty {
                    let size = Self.recordFilesChunks.first { $0 <= rest.count }!
                    let statement = try db.cachedStatement(sql: Self.recordFilesSQL[size]!)
                    let sqlite = statement.sqliteStatement
                    var index: Int32 = 0
                    for file in rest.prefix(size) {
                        try StoredValue.text(file.state.rawValue).bind(to: sqlite, at: index + 1)
                        try (file.path.map(StoredValue.text) ?? .null).bind(to: sqlite, at: index + 2)
                        try (file.bytes.map(StoredValue.integer) ?? .null).bind(to: sqlite, at: index + 3)
                        try (file.error.map(StoredValue.text) ?? .null).bind(to: sqlite, at: index + 4)
                        try StoredValue.integer(download).bind(to: sqlite, at: index + 5)
                        try StoredValue.integer(Int64(file.position)).bind(to: sqlite, at: index + 6)
                        index += 6
                    }
                    try Self.step(statement, db)
                    rest = rest.dropFirst(size)
                }
            }
        }
    }

    /// The rows one statement of ``recordFiles(of:_:)`` writes, largest first.
    private static let recordFilesChunks = [32, 16, 8, 4, 2, 1]

    /// The statement of ``recordFiles(of:_:)`` for each chunk's number of rows: a file's row
    /// replaces the one it had (a failure saved by an earlier run, a path saved again).
    private static let recordFilesSQL: [Int: String] = Dictionary(uniqueKeysWithValues: recordFilesChunks.map { size in
        let values = Array(repeating: "(?, ?, ?, ?, ?, ?)", count: size).joined(separator: ", ")
        return (size, """
            INSERT INTO \(StoredListFile.databaseTableName) (state, path, bytes, error, download, position) VALUES \(values) \
            ON CONFLICT (download, position) DO UPDATE SET state = excluded.state, path = excluded.path, bytes = excluded.bytes, error = excluded.error
            """)
    })
}
