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

/// A client's request.
public struct DaemonRequest: Codable, Sendable, Hashable {
    public enum Method: String, Codable, Sendable, Hashable {
        /// Attach this connection to a session (`session`); refused while another connection is
        /// attached to it. Answers with the session's live tasks; queued events follow, then
        /// `eventsDrained`.
        case attach
        /// Create a download task (`url`, `headers`, `taskDescription`, `isDiscretionary`,
        /// `resourceTimeout`, or `resumeData` to continue a download whose partial file the
        /// daemon then takes over); answers with `taskID`. The task starts suspended.
        case createDownload
        /// Create an upload task (`url`, `httpMethod`, `filePath`, `headers`, …); answers with
        /// `taskID`. The file is read when the transfer starts; the response body comes with
        /// the `completed` event.
        case createUpload
        /// Start or continue a task (`taskID`). Durable once answered.
        case resume
        /// Pause a task (`taskID`), keeping its bytes.
        case suspend
        /// Cancel a task (`taskID`); with `produceResumeData`, the answer carries resume data.
        case cancel
        /// The client handled the event `eventID`; the daemon forgets it (and its held file).
        case acknowledge
        /// The session's live tasks.
        case listTasks
        /// Liveness check; answers with the daemon's process id.
        case ping

        // The download manager's queue (see docs/daemon.md).

        /// Queue a download (`urls`: primary then mirrors; `directory`, `fileName`, `checksum`,
        /// `speedLimit`, `priority`, `paused`); answers with `download`. With `downloads`, many
        /// in one transaction (all or none); answers with `downloads`.
        case queueAdd
        /// Downloads not purged, oldest first; answers with `downloads`, `total` and `settings`.
        /// `offset`, `limit`, `states` and `search` choose a page.
        case queueList
        /// One download (`downloadID`); answers with `download`.
        case queueGet
        /// Pause `downloadID`, the downloads of `downloadIDs`, or every download with `all`;
        /// answers with `count`.
        case queuePause
        /// Resume `downloadID` (paused or failed), those of `downloadIDs`, or every paused one
        /// with `all`.
        case queueResume
        /// Stop `downloadID` for good, deleting its partial file; it stays listed as removed.
        case queueCancel
        /// Drop `downloadID` from the list (cancelling it first if in progress).
        case queueRemove
        /// Drop every finished, failed and removed download; answers with `count`.
        case queuePurge
        /// Replace the URL of a waiting, paused or failed `downloadID` with `url`.
        case queueSetURL
        /// The global settings; with `settingKey` and `settingValue`, change one first.
        case queueSettings
        /// Change the speed limit of `downloadID` to `speedLimit` bytes per second (0: none),
        /// at once when it runs; answers with `download`.
        case queueSetSpeedLimit
        /// Receive `downloadChanged` / `downloadRemoved` / `settingsChanged` events from now on.
        case queueSubscribe
        /// The web UI's address with its token (`webURL`).
        case webUI
    }

    public var id: Int
    public var method: Method
    public var protocolVersion: Int?
    public var session: String?
    public var url: URL?
    public var headers: HTTPHeaderFields?
    public var taskDescription: String?
    public var isDiscretionary: Bool?
    public var resourceTimeout: Double?
    public var taskID: Int64?
    public var eventID: Int64?
    public var produceResumeData: Bool?
    /// With `createDownload`: Haul resume data to continue from instead of `url`.
    public var resumeData: Data?
    /// With `createUpload`: the file to send and the method (default POST).
    public var filePath: String?
    public var httpMethod: String?
    /// With `attach`: the command the daemon runs when events are pending and no client is
    /// attached (`sessionSendsLaunchEvents`); `nil` to not be launched.
    public var launchCommand: [String]?
    /// Queue requests.
    public var urls: [URL]?
    public var directory: String?
    public var fileName: String?
    public var checksum: String?
    public var speedLimit: Int64?
    public var priority: Int?
    public var paused: Bool?
    public var downloadID: Int64?
    /// With `queuePause`, `queueResume`, `queueRemove`: many downloads at once.
    public var downloadIDs: [Int64]?
    /// With `queueAdd`: a batch of downloads.
    public var downloads: [NewDownload]?
    /// With `queueList`: the page.
    public var offset: Int?
    public var limit: Int?
    public var states: [QueuedDownloadState]?
    public var search: String?
    public var all: Bool?
    public var settingKey: String?
    public var settingValue: String?

    public init(id: Int, method: Method) {
        self.id = id
        self.method = method
    }
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
    public var settings: QueueSettings?
    public var count: Int?
    /// With `queueList`: how many downloads match the filter (all pages).
    public var total: Int?
    public var webURL: String?

    public init(id: Int, error: String? = nil) {
        self.id = id
        self.error = error
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

    public init(kind: Kind, taskID: Int64? = nil) {
        self.kind = kind
        self.taskID = taskID
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
}
