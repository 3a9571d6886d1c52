import Foundation
import GRDB
import HaulCore

/// One background transfer as the daemon records it. Its `id` is the task identifier clients see.
public struct StoredTask: Codable, Sendable, Hashable, FetchableRecord, MutablePersistableRecord {
    public static let databaseTableName = "transferTask"

    /// Where a task is in its life; stored as a string.
    public enum State: String, Codable, Sendable, Hashable, DatabaseValueConvertible {
        /// Waiting for a transfer slot (new, or between retries).
        case waiting
        /// A transfer is running.
        case running
        /// Suspended by its client.
        case suspended
        /// Ended (success or final failure); its events say how.
        case completed
    }

    public var id: Int64?
    public var sessionIdentifier: String
    public var state: State
    public var originalURL: URL
    public var currentURL: URL
    /// Request header fields as JSON (`HTTPHeaderFields`).
    public var requestHeaders: HTTPHeaderFields
    public var taskDescription: String?
    public var isDiscretionary: Bool
    /// Uploads send the file at `uploadFilePath` with `method`; downloads GET into the partial file.
    public var isUpload: Bool = false
    public var method: String = "GET"
    public var uploadFilePath: String?
    public var partialFilePath: String
    /// Bytes of the entity known to be on disk at the last checkpoint.
    public var bytesOnDisk: Int64
    public var entityLength: Int64?
    public var entityTag: String?
    public var lastModified: String?
    /// Failed attempts so far (for backoff).
    public var failedAttempts: Int
    public var lastError: String?
    public var createdAt: Date
    /// The task fails with a timeout if not complete by then (`timeoutIntervalForResource`).
    public var resourceDeadline: Date
    /// The earliest time the next attempt may start (backoff, `Retry-After`).
    public var notBefore: Date?
    /// Connections the download may use at once (`haulMaximumConnectionsPerDownload`);
    /// `nil`: one.
    public var connections: Int?
    /// Which bytes are on disk, when they are not one prefix (a segmented download); with it,
    /// `bytesOnDisk` is the prefix only.
    public var segments: ByteRangeSet?

    public enum Columns {
        public static let id = Column(CodingKeys.id)
        public static let sessionIdentifier = Column(CodingKeys.sessionIdentifier)
        public static let state = Column(CodingKeys.state)
        public static let isDiscretionary = Column(CodingKeys.isDiscretionary)
        public static let createdAt = Column(CodingKeys.createdAt)
    }

    public init(
        sessionIdentifier: String,
        url: URL,
        requestHeaders: HTTPHeaderFields,
        taskDescription: String?,
        isDiscretionary: Bool,
        partialFilePath: String,
        resourceDeadline: Date,
        createdAt: Date = Date()
    ) {
        self.sessionIdentifier = sessionIdentifier
        self.state = .suspended
        self.originalURL = url
        self.currentURL = url
        self.requestHeaders = requestHeaders
        self.taskDescription = taskDescription
        self.isDiscretionary = isDiscretionary
        self.partialFilePath = partialFilePath
        self.bytesOnDisk = 0
        self.failedAttempts = 0
        self.createdAt = createdAt
        self.resourceDeadline = resourceDeadline
    }

    public mutating func didInsert(_ inserted: InsertionSuccess) {
        self.id = inserted.rowID
    }

    /// Where the transfer can continue from, if anything useful is on disk.
    public var resumePoint: ResumePoint? {
        let validators = EntityValidators(entityTag: self.entityTag, lastModified: self.lastModified)
        guard validators.ifRangeValue != nil else { return nil }
        if let segments, !segments.isEmpty, let length = self.entityLength {
            var done = segments
            if self.bytesOnDisk > 0 { done.insert(0..<self.bytesOnDisk) }
            return ResumePoint(done: done, validators: validators, entityLength: length)
        }
        guard self.bytesOnDisk > 0 else { return nil }
        return ResumePoint(offset: self.bytesOnDisk, validators: validators, entityLength: self.entityLength)
    }
}

/// An event the daemon owes a session's client, kept until the client acknowledges it.
public struct PendingEvent: Codable, Sendable, Hashable, FetchableRecord, MutablePersistableRecord {
    public static let databaseTableName = "pendingEvent"

    /// What happened; stored as a string.
    public enum Kind: String, Codable, Sendable, Hashable, DatabaseValueConvertible {
        /// The download finished; `heldFilePath` holds the file until the client takes it.
        case finishedDownloading
        /// The task completed; `errorCode` is nil on success.
        case completed
    }

    /// The delivery order within the daemon.
    public var id: Int64?
    public var sessionIdentifier: String
    public var taskID: Int64
    public var kind: Kind
    public var heldFilePath: String?
    public var statusCode: Int?
    /// Response header fields of the final response.
    public var responseHeaders: HTTPHeaderFields?
    public var responseURL: URL?
    /// A `URLError.Code` raw value, for failed completions.
    public var errorCode: Int?
    public var errorMessage: String?
    /// Resume data for a failed download that can continue.
    public var resumeData: Data?
    /// An upload's response body (at most 1 MiB).
    public var responseBody: Data?
    public var createdAt: Date

    public enum Columns {
        public static let id = Column(CodingKeys.id)
        public static let sessionIdentifier = Column(CodingKeys.sessionIdentifier)
        public static let taskID = Column(CodingKeys.taskID)
    }

    public init(sessionIdentifier: String, taskID: Int64, kind: Kind, createdAt: Date = Date()) {
        self.sessionIdentifier = sessionIdentifier
        self.taskID = taskID
        self.kind = kind
        self.createdAt = createdAt
    }

    public mutating func didInsert(_ inserted: InsertionSuccess) {
        self.id = inserted.rowID
    }
}

/// What the daemon remembers of a background session between client connections.
public struct StoredSession: Codable, Sendable, Hashable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "backgroundSession"

    public var identifier: String
    /// Run when events are pending and no client is attached; `nil` when the session does not
    /// send launch events.
    public var launchCommand: [String]?

    public init(identifier: String, launchCommand: [String]?) {
        self.identifier = identifier
        self.launchCommand = launchCommand
    }
}
