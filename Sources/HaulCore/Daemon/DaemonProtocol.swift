import Foundation

/// The protocol between `hauld` and its clients: one JSON object per line (JSON Lines) over a
/// Unix domain socket in a directory only the user can open.
///
/// A client sends ``DaemonRequest`` lines; the daemon answers each with a ``DaemonResponse``
/// carrying the same `id`, and pushes ``DaemonEvent`` lines for the session the connection is
/// attached to. Every line the daemon sends is a ``DaemonServerLine``. A line that is not a valid
/// request is answered with an error response (`id` 0 when unknown); the connection stays open.
public enum DaemonProtocol {
    /// The protocol version; `attach` fails when client and daemon disagree.
    public static let version = 1
    /// Longest line accepted, in bytes.
    public static let maximumLineLength = 1 << 20
}

/// A snapshot of a task, as `attach` and `listTasks` report it.
public struct DaemonTaskSnapshot: Codable, Sendable, Hashable {
    public var taskID: Int64
    public var originalURL: URL
    public var currentURL: URL
    /// `waiting`, `running` or `suspended`.
    public var state: String
    public var bytesOnDisk: Int64
    public var entityLength: Int64?
    public var taskDescription: String?
    /// Whether the task is an upload (else a download).
    public var isUpload: Bool?

    public init(
        taskID: Int64,
        originalURL: URL,
        currentURL: URL,
        state: String,
        bytesOnDisk: Int64,
        entityLength: Int64?,
        taskDescription: String?,
        isUpload: Bool? = nil
    ) {
        self.taskID = taskID
        self.originalURL = originalURL
        self.currentURL = currentURL
        self.state = state
        self.bytesOnDisk = bytesOnDisk
        self.entityLength = entityLength
        self.taskDescription = taskDescription
        self.isUpload = isUpload
    }
}

/// The daemon's answer to one request.
public struct DaemonResponse: Codable, Sendable, Hashable {
    public var id: Int
    /// Set when the request failed; the other fields are then absent.
    public var error: String?
    public var taskID: Int64?
    public var tasks: [DaemonTaskSnapshot]?
    public var resumeData: Data?
    public var processID: Int32?
    public var download: QueuedDownloadInfo?
    public var downloads: [QueuedDownloadInfo]?
    /// The ids of `downloads` when they came projected to some fields (`queueAdd` with
    /// `fields`, e.g. `["id"]`), not whole: then `downloads` is `nil`, unless Haul's reader took
    /// projections of more than the id (``downloadFields``). Read, never sent.
    public var downloadIDs: [Int64]?
    /// When `downloads` came projected to more than their ids (`queueList` with `fields`, read
    /// by Haul's reader): the members that came; the others hold zero values, not the
    /// downloads'. `downloadIDs` has their ids then too. `nil`: whole. Read, never sent.
    public var downloadFields: [DownloadField]?
    public var settings: QueueSettings?
    public var count: Int?
    /// With `queueList`: how many downloads match the filter (all pages).
    public var total: Int?
    public var webURL: String?
    /// With `rpcInfo`: the aria2 RPC's endpoint and its secret (`nil`: none required).
    public var rpcURL: String?
    public var rpcSecret: String?
    /// With `fleetStatus`: the daemons sharing the queue, this daemon's name and its store.
    public var fleet: [DaemonPresence]?
    public var daemonName: String?
    public var store: String?
    /// With `queueFiles`: a page of a list download's files, and how many are in each state.
    public var files: [ListFileInfo]?
    public var fileCounts: ListFileCounts?
    /// The daemon's side of a long `downloads`: a JSON array written from ``DownloadRecord``s,
    /// sent as `downloads` (see ``DaemonServerLine/encoded()``). Never decoded.
    public var encodedDownloads: [UInt8]?

    public init(id: Int, error: String? = nil) {
        self.id = id
        self.error = error
    }

    enum CodingKeys: String, CodingKey {
        case id, error, taskID, tasks, resumeData, processID, download, downloads, settings, count, total, webURL
        case rpcURL, rpcSecret, fleet, daemonName, store, files, fileCounts
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.id = try container.decode(Int.self, forKey: .id)
        self.error = try container.decodeIfPresent(String.self, forKey: .error)
        self.taskID = try container.decodeIfPresent(Int64.self, forKey: .taskID)
        self.tasks = try container.decodeIfPresent([DaemonTaskSnapshot].self, forKey: .tasks)
        self.resumeData = try container.decodeIfPresent(Data.self, forKey: .resumeData)
        self.processID = try container.decodeIfPresent(Int32.self, forKey: .processID)
        self.download = try container.decodeIfPresent(QueuedDownloadInfo.self, forKey: .download)
        do {
            self.downloads = try container.decodeIfPresent([QueuedDownloadInfo].self, forKey: .downloads)
        } catch {
            // Projected records (an answer asked with `fields`): their ids. Whole ones that do
            // not read (or ones without an id) keep their error.
            guard let projected = try? container.decode([ProjectedDownload].self, forKey: .downloads),
                !projected.contains(where: \.isWhole)
            else { throw error }
            self.downloadIDs = projected.map(\.id)
        }
        self.settings = try container.decodeIfPresent(QueueSettings.self, forKey: .settings)
        self.count = try container.decodeIfPresent(Int.self, forKey: .count)
        self.total = try container.decodeIfPresent(Int.self, forKey: .total)
        self.webURL = try container.decodeIfPresent(String.self, forKey: .webURL)
        self.rpcURL = try container.decodeIfPresent(String.self, forKey: .rpcURL)
        self.rpcSecret = try container.decodeIfPresent(String.self, forKey: .rpcSecret)
        self.fleet = try container.decodeIfPresent([DaemonPresence].self, forKey: .fleet)
        self.daemonName = try container.decodeIfPresent(String.self, forKey: .daemonName)
        self.store = try container.decodeIfPresent(String.self, forKey: .store)
        self.files = try container.decodeIfPresent([ListFileInfo].self, forKey: .files)
        self.fileCounts = try container.decodeIfPresent(ListFileCounts.self, forKey: .fileCounts)
    }

    /// A download of an answer asked with `fields` that include `id`.
    private struct ProjectedDownload: Decodable {
        var id: Int64
        /// Members every whole download has (``QueuedDownloadInfo``): both present, it is one.
        private var urls: [String]?
        private var state: String?

        var isWhole: Bool { self.urls != nil && self.state != nil }
    }
}

/// Something that happened to a task of the attached session.
public struct DaemonEvent: Codable, Sendable, Hashable {
    public enum Kind: String, Codable, Sendable, Hashable {
        /// Live only: bytes on disk changed.
        case progress
        /// Live only: a request continued at `offset` (0: the server sent the whole entity).
        case resumed
        /// Durable: the download's file is at `heldFilePath` until acknowledged.
        case finishedDownloading
        /// Durable: the task completed (`errorCode` nil on success).
        case completed
        /// Every durable event queued before the attach has been sent.
        case eventsDrained
        /// Queue subscribers: `download` was added or changed.
        case downloadChanged
        /// Queue subscribers: `downloadID` left the list.
        case downloadRemoved
        /// Queue subscribers: the global `settings` changed.
        case settingsChanged
    }

    public var kind: Kind
    public var taskID: Int64?
    /// For durable events: acknowledge it with this id once handled.
    public var eventID: Int64?
    public var bytesOnDisk: Int64?
    public var bytesWritten: Int64?
    public var expectedTotal: Int64?
    public var offset: Int64?
    public var heldFilePath: String?
    public var statusCode: Int?
    public var responseHeaders: HTTPHeaderFields?
    public var responseURL: URL?
    public var originalURL: URL?
    public var errorCode: Int?
    public var errorMessage: String?
    public var resumeData: Data?
    /// For uploads: the response body (at most 1 MiB).
    public var responseBody: Data?
    public var isUpload: Bool?
    public var download: QueuedDownloadInfo?
    public var downloadID: Int64?
    public var settings: QueueSettings?
    /// The members `download` came with when it is a projection (a subscription with
    /// `fields`): the rest of it holds zero values, not the download's. `nil`: whole. Read,
    /// never sent.
    public var downloadFields: [DownloadField]?

    public init(kind: Kind, taskID: Int64? = nil) {
        self.kind = kind
        self.taskID = taskID
    }

    enum CodingKeys: String, CodingKey {
        case kind, taskID, eventID, bytesOnDisk, bytesWritten, expectedTotal, offset, heldFilePath, statusCode
        case responseHeaders, responseURL, originalURL, errorCode, errorMessage, resumeData, responseBody, isUpload
        case download, downloadID, settings
    }
}

/// One line from the daemon: either a response or an event.
public struct DaemonServerLine: Codable, Sendable, Hashable {
    public var response: DaemonResponse?
    public var event: DaemonEvent?

    public init(response: DaemonResponse) {
        self.response = response
    }

    public init(event: DaemonEvent) {
        self.event = event
    }

    /// The line as sent, newline included; a response's ``DaemonResponse/encodedDownloads``
    /// goes in as its `downloads` member, copied as is.
    public func encoded() throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        var line: [UInt8]
        if let response = self.response, let downloads = response.encodedDownloads {
            line = Array(#"{"response":"#.utf8)
            line.append(contentsOf: JSONWriter.inserting(member: "downloads", raw: downloads, into: Array(try encoder.encode(response))))
            line.append(UInt8(ascii: "}"))
        } else {
            line = Array(try encoder.encode(self))
        }
        line.append(UInt8(ascii: "\n"))
        return line
    }
}
