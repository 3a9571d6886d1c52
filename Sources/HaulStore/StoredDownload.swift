import Foundation
import GRDB
import GRDBSQLite
import HaulCore

/// One download of the download manager's queue, as the store records it. Its `id` is the id
/// users see (`haul show 7`).
public struct StoredDownload: Codable, Sendable, Hashable, TableRecord {
    public static let databaseTableName = "queuedDownload"

    /// The fields live in one reference-counted box that copies share until one of them
    /// changes (copy on write). A download's row is handed around a lot on the queue's
    /// thread (the waiting rows kept, a held claim, a drain's replays, the run's end): ~30
    /// copies a small queued file, each retaining ~15 strings and arrays and releasing them
    /// again. With the box, a copy is one retain: 383 → 353 K instructions a queued file
    /// (callgrind, hauld).
    private var storage: Storage

    private final class Storage: @unchecked Sendable {
        // Changed only through `uniqueStorage`, so never while another copy can read it; no
        // dynamic exclusivity check on every field read.
        @exclusivity(unchecked) var fields: Fields

        init(_ fields: Fields) { self.fields = fields }
    }

    /// The box, first copied when another download shares it.
    private var uniqueStorage: Storage {
        mutating get {
            if !isKnownUniquelyReferenced(&self.storage) { self.storage = Storage(self.storage.fields) }
            return self.storage
        }
    }

    /// Whether `other` is this row's copy, not changed since (they share their columns): known
    /// equal without comparing them.
    package func sharesColumns(with other: StoredDownload) -> Bool {
        self.storage === other.storage
    }

    /// The stored fields, one value behind ``storage``.
    struct Fields: Codable, Sendable, Hashable {
        var id: Int64?
        var gid: String = ""
        var urls: [URL]
        var urlIndex: Int = 0
        var currentURL: URL?
        var directory: String
        var requestedName: String?
        var fileName: String?
        var partialPath: String?
        var finalPath: String?
        var state: QueuedDownloadState
        var bytesDone: Int64 = 0
        var totalBytes: Int64?
        var entityTag: String?
        var lastModified: String?
        var segments: ByteRangeSet?
        var connections: Int?
        var errorMessage: String?
        var errorCode: Int?
        var checksum: String?
        var priority: Int = 0
        var speedLimit: Int64 = 0
        var requestHeaders: [String] = []
        var options: [String: String] = [:]
        var queueRank: Double?
        var failedAttempts: Int = 0
        var notBefore: Date?
        var createdAt: Date
        var startedAt: Date?
        var finishedAt: Date?
        var runner: String?
        var lastRunner: String?
        var fileCount: Int?
    }

    public var id: Int64? {
        get { self.storage.fields.id }
        _modify { yield &self.uniqueStorage.fields.id }
    }

    /// The RPC's id (16 hex digits), unique, stable across restarts.
    public var gid: String {
        get { self.storage.fields.gid }
        _modify { yield &self.uniqueStorage.fields.gid }
    }

    /// The primary URL first, then mirrors (JSON).
    public var urls: [URL] {
        get { self.storage.fields.urls }
        _modify { yield &self.uniqueStorage.fields.urls }
    }

    /// Which of `urls` the next attempt uses.
    public var urlIndex: Int {
        get { self.storage.fields.urlIndex }
        _modify { yield &self.uniqueStorage.fields.urlIndex }
    }

    /// The URL that last answered (after redirects).
    public var currentURL: URL? {
        get { self.storage.fields.currentURL }
        _modify { yield &self.uniqueStorage.fields.currentURL }
    }

    public var directory: String {
        get { self.storage.fields.directory }
        _modify { yield &self.uniqueStorage.fields.directory }
    }

    /// Chosen by the user (`--out`); else `nil` until the server's answer names it.
    public var requestedName: String? {
        get { self.storage.fields.requestedName }
        _modify { yield &self.uniqueStorage.fields.requestedName }
    }

    /// The name the file will get (or got): `requestedName`, else from the response.
    public var fileName: String? {
        get { self.storage.fields.fileName }
        _modify { yield &self.uniqueStorage.fields.fileName }
    }

    /// Where the bytes live until the download is complete and verified.
    public var partialPath: String? {
        get { self.storage.fields.partialPath }
        _modify { yield &self.uniqueStorage.fields.partialPath }
    }

    /// Where the verified file was placed.
    public var finalPath: String? {
        get { self.storage.fields.finalPath }
        _modify { yield &self.uniqueStorage.fields.finalPath }
    }

    public var state: QueuedDownloadState {
        get { self.storage.fields.state }
        _modify { yield &self.uniqueStorage.fields.state }
    }

    /// Bytes of the entity known to be on disk at the last checkpoint.
    public var bytesDone: Int64 {
        get { self.storage.fields.bytesDone }
        _modify { yield &self.uniqueStorage.fields.bytesDone }
    }

    public var totalBytes: Int64? {
        get { self.storage.fields.totalBytes }
        _modify { yield &self.uniqueStorage.fields.totalBytes }
    }

    public var entityTag: String? {
        get { self.storage.fields.entityTag }
        _modify { yield &self.uniqueStorage.fields.entityTag }
    }

    public var lastModified: String? {
        get { self.storage.fields.lastModified }
        _modify { yield &self.uniqueStorage.fields.lastModified }
    }

    /// Ranges of the entity on disk beyond `bytesDone` (a segmented download), synced before
    /// they were recorded.
    public var segments: ByteRangeSet? {
        get { self.storage.fields.segments }
        _modify { yield &self.uniqueStorage.fields.segments }
    }

    /// Connections this download may use; `nil`: the queue's setting.
    public var connections: Int? {
        get { self.storage.fields.connections }
        _modify { yield &self.uniqueStorage.fields.connections }
    }

    public var errorMessage: String? {
        get { self.storage.fields.errorMessage }
        _modify { yield &self.uniqueStorage.fields.errorMessage }
    }

    /// aria2's error code for `errorMessage`.
    public var errorCode: Int? {
        get { self.storage.fields.errorCode }
        _modify { yield &self.uniqueStorage.fields.errorCode }
    }

    /// `sha256=…`, `sha1=…` or `md5=…`.
    public var checksum: String? {
        get { self.storage.fields.checksum }
        _modify { yield &self.uniqueStorage.fields.checksum }
    }

    public var priority: Int {
        get { self.storage.fields.priority }
        _modify { yield &self.uniqueStorage.fields.priority }
    }

    /// Bytes per second; 0 is unlimited.
    public var speedLimit: Int64 {
        get { self.storage.fields.speedLimit }
        _modify { yield &self.uniqueStorage.fields.speedLimit }
    }

    /// Extra request headers, `Name: value` each.
    public var requestHeaders: [String] {
        get { self.storage.fields.requestHeaders }
        _modify { yield &self.uniqueStorage.fields.requestHeaders }
    }

    /// Options given through the RPC, as aria2 spells them.
    public var options: [String: String] {
        get { self.storage.fields.options }
        _modify { yield &self.uniqueStorage.fields.options }
    }

    /// The waiting queue's order when moved (`nil`: by id).
    public var queueRank: Double? {
        get { self.storage.fields.queueRank }
        _modify { yield &self.uniqueStorage.fields.queueRank }
    }

    public var failedAttempts: Int {
        get { self.storage.fields.failedAttempts }
        _modify { yield &self.uniqueStorage.fields.failedAttempts }
    }

    public var notBefore: Date? {
        get { self.storage.fields.notBefore }
        _modify { yield &self.uniqueStorage.fields.notBefore }
    }

    public var createdAt: Date {
        get { self.storage.fields.createdAt }
        _modify { yield &self.uniqueStorage.fields.createdAt }
    }

    public var startedAt: Date? {
        get { self.storage.fields.startedAt }
        _modify { yield &self.uniqueStorage.fields.startedAt }
    }

    public var finishedAt: Date? {
        get { self.storage.fields.finishedAt }
        _modify { yield &self.uniqueStorage.fields.finishedAt }
    }

    /// The daemon holding a live lease on it (a shared store fills it in when reading; it is
    /// not one of the row's columns and never written from here).
    public var runner: String? {
        get { self.storage.fields.runner }
        _modify { yield &self.uniqueStorage.fields.runner }
    }

    /// The daemon that claimed it last (a shared store's JSON only): who had it before a
    /// takeover.
    public var lastRunner: String? {
        get { self.storage.fields.lastRunner }
        _modify { yield &self.uniqueStorage.fields.lastRunner }
    }
    /// A list download's number of files (``TransferStore/files(of:)``); `nil`: one file,
    /// fetched from `urls` (the primary and its mirrors).
    public var fileCount: Int? {
        get { self.storage.fields.fileCount }
        _modify { yield &self.uniqueStorage.fields.fileCount }
    }

    /// Whether this download is a list of files (``fileCount``), each fetched from its own URL.
    public var isList: Bool { self.storage.fields.fileCount != nil }

    public init(urls: [URL], directory: String, requestedName: String?, checksum: String?, priority: Int, speedLimit: Int64, createdAt: Date = Date()) {
        self.storage = Storage(Fields(
            urls: urls,
            directory: directory,
            requestedName: requestedName,
            fileName: requestedName,
            state: .waiting,
            checksum: checksum,
            priority: priority,
            speedLimit: speedLimit,
            createdAt: createdAt
        ))
    }

    private init(fields: Fields) { self.storage = Storage(fields) }

    public init(from decoder: any Decoder) throws { self.init(fields: try Fields(from: decoder)) }

    public func encode(to encoder: any Encoder) throws { try self.storage.fields.encode(to: encoder) }

    public static func == (lhs: StoredDownload, rhs: StoredDownload) -> Bool {
        lhs.storage === rhs.storage || lhs.storage.fields == rhs.storage.fields
    }

    public func hash(into hasher: inout Hasher) { self.storage.fields.hash(into: &hasher) }

    /// Whether `self` and `other` are copies of one value that neither has changed since (then
    /// they are equal without comparing a field).
    func sharesStorage(with other: StoredDownload) -> Bool { self.storage === other.storage }

    /// The columns every query of downloads selects, in the order ``init(statement:)`` reads
    /// them: `id`, then ``columnNames``.
    public static let selectedColumns = (["id"] + Self.columnNames).joined(separator: ", ")

    /// Reads the row `statement` stands on (after a step that answered `SQLITE_ROW`), column by
    /// column by position (``selectedColumns``' order), straight off SQLite: several times
    /// faster than the `Decodable` path, which matters when the queue reloads 10,000
    /// downloads, and than a GRDB `Row`, which lowercases and hashes all 30 column names for
    /// each row it is made for (twice per download a queue runs). ``columns`` is the
    /// writing side; the two must agree on the columns (the store tests read back what they
    /// wrote).
    init(statement: SQLiteStatement) throws {
        let row = ColumnReader(statement: statement)
        var fields = Fields(urls: [], directory: "", state: .waiting, createdAt: Date(timeIntervalSince1970: 0))
        fields.id = row.int64(0)
        fields.gid = row.text(1) ?? ""
        fields.urls = try Self.urls(fromJSON: row.text(2) ?? "", id: fields.id)
        fields.urlIndex = row.int(3) ?? 0
        fields.currentURL = row.text(4).flatMap(URL.init(string:))
        fields.directory = row.text(5) ?? ""
        fields.requestedName = row.text(6)
        fields.fileName = row.text(7)
        fields.partialPath = row.text(8)
        fields.finalPath = row.text(9)
        guard let state = row.text(10).flatMap(QueuedDownloadState.init(rawValue:)) else {
            throw DatabaseError(message: "download \(fields.id ?? 0): unknown state \(row.text(10) ?? "NULL")")
        }
        fields.state = state
        fields.bytesDone = row.int64(11) ?? 0
        fields.totalBytes = row.int64(12)
        fields.entityTag = row.text(13)
        fields.lastModified = row.text(14)
        if let segments = row.text(15) {
            fields.segments = try? JSONDecoder().decode(ByteRangeSet.self, from: Data(segments.utf8))
        }
        fields.connections = row.int(16)
        fields.errorMessage = row.text(17)
        fields.errorCode = row.int(18)
        fields.checksum = row.text(19)
        fields.priority = row.int(20) ?? 0
        fields.speedLimit = row.int64(21) ?? 0
        if let headers = row.text(22) {
            fields.requestHeaders = (try? JSONDecoder().decode([String].self, from: Data(headers.utf8))) ?? []
        }
        if let options = row.text(23) {
            fields.options = (try? JSONDecoder().decode([String: String].self, from: Data(options.utf8))) ?? [:]
        }
        fields.queueRank = row.double(24)
        fields.failedAttempts = row.int(25) ?? 0
        fields.notBefore = row.date(26)
        guard let createdAt = row.date(27) else { throw DatabaseError(message: "download \(fields.id ?? 0): no creation date") }
        fields.createdAt = createdAt
        fields.startedAt = row.date(28)
        fields.finishedAt = row.date(29)
        fields.fileCount = row.int(30)
        self.init(fields: fields)
    }

    /// One row's columns, as the types the store wrote them in (`NULL` is `nil`).
    private struct ColumnReader {
        let statement: SQLiteStatement

        func isNull(_ index: CInt) -> Bool { sqlite3_column_type(self.statement, index) == SQLITE_NULL }

        func text(_ index: CInt) -> String? {
            self.isNull(index) ? nil : String(sqliteStatement: self.statement, index: index)
        }

        func int64(_ index: CInt) -> Int64? {
            self.isNull(index) ? nil : sqlite3_column_int64(self.statement, index)
        }

        func int(_ index: CInt) -> Int? { self.int64(index).map { Int($0) } }

        func double(_ index: CInt) -> Double? {
            self.isNull(index) ? nil : sqlite3_column_double(self.statement, index)
        }

        /// Dates as the store writes them (`yyyy-MM-dd HH:mm:ss.SSS`, UTC), read without a
        /// calendar; any other form GRDB reads as a date is read by GRDB.
        func date(_ index: CInt) -> Date? {
            guard !self.isNull(index) else { return nil }
            if sqlite3_column_type(self.statement, index) == SQLITE_TEXT, let text = sqlite3_column_text(self.statement, index) {
                let length = Int(sqlite3_column_bytes(self.statement, index))
                if let date = UTCTimestamp.parseStored(UnsafeBufferPointer(start: text, count: length)) { return date }
            }
            return Date.fromDatabaseValue(DatabaseValue(sqliteStatement: self.statement, index: index))
        }
    }

    /// The `urls` column: a JSON array of URL strings, read with HaulCore's JSON reader
    /// (`JSONDecoder` cost more than the rest of the row).
    static func urls(fromJSON text: String, id: Int64?) throws -> [URL] {
        let value: JSONValue
        do { value = try JSONValue(parsing: text.utf8) } catch {
            throw DatabaseError(message: "download \(id ?? 0): unreadable urls column: \(error)")
        }
        guard let items = value.arrayValue else {
            throw DatabaseError(message: "download \(id ?? 0): unreadable urls column: not an array")
        }
        return try items.map { item in
            guard let string = item.stringValue, let url = URL(string: string) else {
                throw DatabaseError(message: "download \(id ?? 0): unreadable urls column: \(item.bytes.count > 200 ? "a long value" : String(decoding: item.bytes, as: UTF8.self)) is not a URL")
            }
            return url
        }
    }

    /// One column of the row (every column but `id`): its name, the value written for a
    /// download, and whether two downloads differ in it, told from their fields (an update
    /// writes only the columns that changed, without making the values of the others).
    struct Column: Sendable {
        let name: String
        let stored: @Sendable (StoredDownload) -> StoredValue
        let differs: @Sendable (StoredDownload, StoredDownload) -> Bool

        /// A column written from the field `field` reads, converted by `written`.
        init<Field: Equatable, Written: StoredValueConvertible>(
            _ name: String,
            _ field: @escaping @Sendable (StoredDownload) -> Field,
            written: @escaping @Sendable (Field) -> Written
        ) {
            self.name = name
            self.stored = { written(field($0)).storedValue }
            self.differs = { field($0) != field($1) }
        }
    }

    /// Every column but `id`, in the order of ``columnNames`` and of ``init(statement:)``'s
    /// positions after `id`: the one list the insert, the update and the reading agree on.
    /// `urls` is a JSON array of strings.
    static let columns: [Column] = [
        Column("gid", { $0.gid }, written: { $0 }),
        Column("urls", { $0.urls }, written: Self.urlsJSON),
        Column("urlIndex", { $0.urlIndex }, written: { $0 }),
        Column("currentURL", { $0.currentURL }, written: { $0?.absoluteString }),
        Column("directory", { $0.directory }, written: { $0 }),
        Column("requestedName", { $0.requestedName }, written: { $0 }),
        Column("fileName", { $0.fileName }, written: { $0 }),
        Column("partialPath", { $0.partialPath }, written: { $0 }),
        Column("finalPath", { $0.finalPath }, written: { $0 }),
        Column("state", { $0.state }, written: { $0.rawValue }),
        Column("bytesDone", { $0.bytesDone }, written: { $0 }),
        Column("totalBytes", { $0.totalBytes }, written: { $0 }),
        Column("entityTag", { $0.entityTag }, written: { $0 }),
        Column("lastModified", { $0.lastModified }, written: { $0 }),
        Column("segments", { $0.segments }, written: { $0.map(Self.jsonText) }),
        Column("connections", { $0.connections }, written: { $0 }),
        Column("errorMessage", { $0.errorMessage }, written: { $0 }),
        Column("errorCode", { $0.errorCode }, written: { $0 }),
        Column("checksum", { $0.checksum }, written: { $0 }),
        Column("priority", { $0.priority }, written: { $0 }),
        Column("speedLimit", { $0.speedLimit }, written: { $0 }),
        Column("requestHeaders", { $0.requestHeaders }, written: { $0.isEmpty ? nil : Self.jsonText($0) }),
        Column("options", { $0.options }, written: { $0.isEmpty ? nil : Self.jsonText($0) }),
        Column("queueRank", { $0.queueRank }, written: { $0 }),
        Column("failedAttempts", { $0.failedAttempts }, written: { $0 }),
        Column("notBefore", { $0.notBefore }, written: { $0.map(StoredDate.text) }),
        Column("createdAt", { $0.createdAt }, written: { StoredDate.text($0) }),
        Column("startedAt", { $0.startedAt }, written: { $0.map(StoredDate.text) }),
        Column("finishedAt", { $0.finishedAt }, written: { $0.map(StoredDate.text) }),
        Column("fileCount", { $0.fileCount }, written: { $0 }),
    ]

    /// The columns (positions in ``columns``) in which `self` differs from `original`.
    func changedColumns(since original: StoredDownload) -> ColumnSet {
        var changed = ColumnSet()
        guard !self.sharesStorage(with: original) else { return changed }
        for (position, column) in Self.columns.enumerated() where column.differs(self, original) { changed.insert(position) }
        return changed
    }

    /// Binds the values of `columns` in `self` to `statement`'s parameters, from `first` on, in
    /// the columns' order: straight to SQLite, without GRDB's `StatementArguments` (a box per
    /// value; half the cost of an update that saves a small file's end).
    func bind(_ columns: ColumnSet, to statement: SQLiteStatement, from first: CInt = 1) throws {
        var parameter = first
        for position in columns {
            try Self.columns[position].stored(self).bind(to: statement, at: parameter)
            parameter += 1
        }
    }

    /// A set of columns by their positions in ``columns`` (there are fewer than 64).
    struct ColumnSet: Sequence, Hashable, Sendable {
        private(set) var bits: UInt64 = 0

        static var all: ColumnSet { ColumnSet(bits: (1 << UInt64(StoredDownload.columns.count)) - 1) }

        var isEmpty: Bool { self.bits == 0 }

        mutating func insert(_ position: Int) { self.bits |= 1 << UInt64(position) }

        func makeIterator() -> AnyIterator<Int> {
            var rest = self.bits
            return AnyIterator {
                guard rest != 0 else { return nil }
                let position = rest.trailingZeroBitCount
                rest &= rest - 1
                return position
            }
        }
    }

    /// The `urls` column: a JSON array of the URLs' strings.
    private static func urlsJSON(_ urls: [URL]) -> String {
        var json = JSONWriter(capacity: 64 * urls.count)
        json.append(UInt8(ascii: "["))
        for (index, url) in urls.enumerated() {
            if index > 0 { json.append(UInt8(ascii: ",")) }
            json.append(string: url.absoluteString)
        }
        json.append(UInt8(ascii: "]"))
        return String(decoding: json.bytes, as: UTF8.self)
    }

    private static func jsonText(_ value: some Encodable) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return String(decoding: (try? encoder.encode(value)) ?? Data("null".utf8), as: UTF8.self)
    }

    /// The names of ``columns``, in their order.
    public static let columnNames: [String] = Self.columns.map(\.name)

    /// The URL the next attempt requests.
    public var url: URL { self.urls[min(max(0, self.urlIndex), self.urls.count - 1)] }

    /// Where the transfer can continue from, if anything useful is on disk.
    public var resumePoint: ResumePoint? {
        guard self.bytesDone > 0 else { return nil }
        let validators = EntityValidators(entityTag: self.entityTag, lastModified: self.lastModified)
        guard validators.ifRangeValue != nil else { return nil }
        guard let segments, let length = self.totalBytes else {
            return ResumePoint(offset: self.bytesDone, validators: validators, entityLength: self.totalBytes)
        }
        var done = segments
        done.insert(0..<self.bytesDone)
        return ResumePoint(done: done, validators: validators, entityLength: length)
    }

    /// Records where the transfer stands: the bytes safely on disk and the entity they belong
    /// to (`nil`: nothing resumable, so nothing counts as done).
    public mutating func record(_ point: ResumePoint?, currentURL: URL) {
        self.bytesDone = point?.offset ?? 0
        self.segments = point?.segments
        self.totalBytes = point?.entityLength ?? self.totalBytes
        self.entityTag = point?.validators.entityTag
        self.lastModified = point?.validators.lastModified
        self.currentURL = currentURL
    }

    /// The client's view of this download.
    public var info: QueuedDownloadInfo {
        var info = QueuedDownloadInfo(
            id: self.id ?? 0,
            urls: self.urls,
            directory: self.directory,
            fileName: self.fileName,
            path: self.state == .complete ? self.finalPath : self.partialPath,
            state: self.state,
            bytesDone: self.segments == nil || self.state == .complete ? self.bytesDone : (self.resumePoint?.done.byteCount ?? self.bytesDone),
            totalBytes: self.totalBytes,
            errorMessage: self.errorMessage,
            checksum: self.checksum,
            priority: self.priority,
            speedLimit: self.speedLimit == 0 ? nil : self.speedLimit,
            createdAt: self.createdAt,
            startedAt: self.startedAt,
            finishedAt: self.finishedAt,
            gid: self.gid
        )
        info.errorCode = self.errorCode
        info.requestHeaders = self.requestHeaders.isEmpty ? nil : self.requestHeaders
        info.options = self.options.isEmpty ? nil : self.options
        info.queueRank = self.queueRank
        info.maximumConnections = self.connections
        info.runner = self.runner
        info.fileCount = self.fileCount
        if self.segments != nil, self.state != .complete { info.segments = self.resumePoint?.done }
        return info
    }
}

/// Printed, dumped and shown in a failed test's message field by field, as before the fields
/// moved behind shared storage.
extension StoredDownload: CustomReflectable {
    public var customMirror: Mirror {
        Mirror(self, children: Mirror(reflecting: self.storage.fields).children, displayStyle: .struct)
    }
}

extension QueuedDownloadState: DatabaseValueConvertible {}

/// A column's value as SQLite keeps it, bound without a box (``StoredDownload/bind(_:to:from:)``).
enum StoredValue {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)

    private static let transient = unsafeBitCast(OpaquePointer(bitPattern: -1), to: sqlite3_destructor_type.self)

    func bind(to statement: SQLiteStatement, at parameter: CInt) throws {
        let code: CInt
        switch self {
        case .null: code = sqlite3_bind_null(statement, parameter)
        case .integer(let value): code = sqlite3_bind_int64(statement, parameter, value)
        case .real(let value): code = sqlite3_bind_double(statement, parameter, value)
        case .text(let value):
            // SQLite copies the bytes before the call returns (SQLITE_TRANSIENT).
            code = value.withCString { sqlite3_bind_text(statement, parameter, $0, -1, Self.transient) }
        }
        guard code == SQLITE_OK else { throw DatabaseError(resultCode: ResultCode(rawValue: code), message: "cannot bind parameter \(parameter)") }
    }
}

/// What a column of ``StoredDownload`` is written as.
protocol StoredValueConvertible {
    var storedValue: StoredValue { get }
}

extension String: StoredValueConvertible {
    var storedValue: StoredValue { .text(self) }
}

extension Int: StoredValueConvertible {
    var storedValue: StoredValue { .integer(Int64(self)) }
}

extension Int64: StoredValueConvertible {
    var storedValue: StoredValue { .integer(self) }
}

extension Double: StoredValueConvertible {
    var storedValue: StoredValue { .real(self) }
}

extension Optional: StoredValueConvertible where Wrapped: StoredValueConvertible {
    var storedValue: StoredValue { self?.storedValue ?? .null }
}
