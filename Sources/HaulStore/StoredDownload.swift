import Foundation
import GRDB
import HaulCore

/// One download of the download manager's queue, as the store records it. Its `id` is the id
/// users see (`haul show 7`).
public struct StoredDownload: Codable, Sendable, Hashable, FetchableRecord, MutablePersistableRecord {
    public static let databaseTableName = "queuedDownload"

    public var id: Int64?
    /// The RPC's id (16 hex digits), unique, stable across restarts.
    public var gid: String = ""
    /// The primary URL first, then mirrors (JSON).
    public var urls: [URL]
    /// Which of `urls` the next attempt uses.
    public var urlIndex: Int = 0
    /// The URL that last answered (after redirects).
    public var currentURL: URL?
    public var directory: String
    /// Chosen by the user (`--out`); else `nil` until the server's answer names it.
    public var requestedName: String?
    /// The name the file will get (or got): `requestedName`, else from the response.
    public var fileName: String?
    /// Where the bytes live until the download is complete and verified.
    public var partialPath: String?
    /// Where the verified file was placed.
    public var finalPath: String?
    public var state: QueuedDownloadState
    /// Bytes of the entity known to be on disk at the last checkpoint.
    public var bytesDone: Int64 = 0
    public var totalBytes: Int64?
    public var entityTag: String?
    public var lastModified: String?
    /// Ranges of the entity on disk beyond `bytesDone` (a segmented download), synced before
    /// they were recorded.
    public var segments: ByteRangeSet?
    /// Connections this download may use; `nil`: the queue's setting.
    public var connections: Int?
    public var errorMessage: String?
    /// aria2's error code for `errorMessage`.
    public var errorCode: Int?
    /// `sha256=…`, `sha1=…` or `md5=…`.
    public var checksum: String?
    public var priority: Int = 0
    /// Bytes per second; 0 is unlimited.
    public var speedLimit: Int64 = 0
    /// Extra request headers, `Name: value` each.
    public var requestHeaders: [String] = []
    /// Options given through the RPC, as aria2 spells them.
    public var options: [String: String] = [:]
    /// The waiting queue's order when moved (`nil`: by id).
    public var queueRank: Double?
    public var failedAttempts: Int = 0
    public var notBefore: Date?
    public var createdAt: Date
    public var startedAt: Date?
    public var finishedAt: Date?
    /// The daemon holding a live lease on it (a shared store fills it in when reading; it is
    /// not one of the row's columns and never written from here).
    public var runner: String?
    /// The daemon that claimed it last (a shared store's JSON only): who had it before a
    /// takeover.
    public var lastRunner: String?

    public enum Columns {
        public static let id = Column(CodingKeys.id)
        public static let state = Column(CodingKeys.state)
    }

    public init(urls: [URL], directory: String, requestedName: String?, checksum: String?, priority: Int, speedLimit: Int64, createdAt: Date = Date()) {
        self.urls = urls
        self.directory = directory
        self.requestedName = requestedName
        self.fileName = requestedName
        self.state = .waiting
        self.checksum = checksum
        self.priority = priority
        self.speedLimit = speedLimit
        self.createdAt = createdAt
    }

    /// Reads a row column by column: several times faster than the `Decodable` path, which
    /// matters when the queue reloads 10,000 downloads. ``columnValues`` is the writing side;
    /// the two must agree on the columns (the store tests read back what they wrote).
    public init(row: Row) throws {
        self.id = row["id"]
        self.gid = row["gid"]
        let urls: String = row["urls"]
        do {
            self.urls = try JSONDecoder().decode([URL].self, from: Data(urls.utf8))
        } catch {
            throw DatabaseError(message: "download \(self.id ?? 0): unreadable urls column: \(error)")
        }
        self.urlIndex = row["urlIndex"]
        self.currentURL = (row["currentURL"] as String?).flatMap(URL.init(string:))
        self.directory = row["directory"]
        self.requestedName = row["requestedName"]
        self.fileName = row["fileName"]
        self.partialPath = row["partialPath"]
        self.finalPath = row["finalPath"]
        self.state = row["state"]
        self.bytesDone = row["bytesDone"]
        self.totalBytes = row["totalBytes"]
        self.entityTag = row["entityTag"]
        self.lastModified = row["lastModified"]
        if let segments = row["segments"] as String? {
            self.segments = try? JSONDecoder().decode(ByteRangeSet.self, from: Data(segments.utf8))
        }
        self.connections = row["connections"]
        self.errorMessage = row["errorMessage"]
        self.errorCode = row["errorCode"]
        self.checksum = row["checksum"]
        self.priority = row["priority"]
        self.speedLimit = row["speedLimit"]
        if let headers = row["requestHeaders"] as String? {
            self.requestHeaders = (try? JSONDecoder().decode([String].self, from: Data(headers.utf8))) ?? []
        }
        if let options = row["options"] as String? {
            self.options = (try? JSONDecoder().decode([String: String].self, from: Data(options.utf8))) ?? [:]
        }
        self.queueRank = row["queueRank"]
        self.failedAttempts = row["failedAttempts"]
        self.notBefore = row["notBefore"]
        self.createdAt = row["createdAt"]
        self.startedAt = row["startedAt"]
        self.finishedAt = row["finishedAt"]
    }

    public mutating func didInsert(_ inserted: InsertionSuccess) {
        self.id = inserted.rowID
    }

    /// Every column but `id`, with its value: what ``encode(to:)`` and the store's batch insert
    /// write (column by column, not through `Encodable`, which was half the cost of adding
    /// 10,000 downloads). `urls` is a JSON array of strings.
    public var columnValues: [(name: String, value: (any DatabaseValueConvertible)?)] {
        var urls = JSONWriter(capacity: 64 * self.urls.count)
        urls.append(UInt8(ascii: "["))
        for (index, url) in self.urls.enumerated() {
            if index > 0 { urls.append(UInt8(ascii: ",")) }
            urls.append(string: url.absoluteString)
        }
        urls.append(UInt8(ascii: "]"))
        return [
            ("gid", self.gid),
            ("urls", String(decoding: urls.bytes, as: UTF8.self)),
            ("urlIndex", self.urlIndex),
            ("currentURL", self.currentURL?.absoluteString),
            ("directory", self.directory),
            ("requestedName", self.requestedName),
            ("fileName", self.fileName),
            ("partialPath", self.partialPath),
            ("finalPath", self.finalPath),
            ("state", self.state.rawValue),
            ("bytesDone", self.bytesDone),
            ("totalBytes", self.totalBytes),
            ("entityTag", self.entityTag),
            ("lastModified", self.lastModified),
            ("segments", self.segments.map(Self.jsonText)),
            ("connections", self.connections),
            ("errorMessage", self.errorMessage),
            ("errorCode", self.errorCode),
            ("checksum", self.checksum),
            ("priority", self.priority),
            ("speedLimit", self.speedLimit),
            ("requestHeaders", self.requestHeaders.isEmpty ? nil : Self.jsonText(self.requestHeaders)),
            ("options", self.options.isEmpty ? nil : Self.jsonText(self.options)),
            ("queueRank", self.queueRank),
            ("failedAttempts", self.failedAttempts),
            ("notBefore", self.notBefore.map(StoredDate.text)),
            ("createdAt", StoredDate.text(self.createdAt)),
            ("startedAt", self.startedAt.map(StoredDate.text)),
            ("finishedAt", self.finishedAt.map(StoredDate.text)),
        ]
    }

    private static func jsonText(_ value: some Encodable) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return String(decoding: (try? encoder.encode(value)) ?? Data("null".utf8), as: UTF8.self)
    }

    /// The names of ``columnValues``, in their order.
    public static let columnNames: [String] = StoredDownload(
        urls: [], directory: "", requestedName: nil, checksum: nil, priority: 0, speedLimit: 0
    ).columnValues.map(\.name)

    public func encode(to container: inout PersistenceContainer) throws {
        container["id"] = self.id
        for (name, value) in self.columnValues { container[name] = value }
    }

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
        if self.segments != nil, self.state != .complete { info.segments = self.resumePoint?.done }
        return info
    }
}

extension QueuedDownloadState: DatabaseValueConvertible {}
