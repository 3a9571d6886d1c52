import Foundation

/// A client's request: the `id` its answer repeats, and one ``Command`` carrying exactly the
/// fields that command takes.
///
/// On the wire it is one flat JSON object: `"id"`, `"method"` (the command's name) and the
/// command's fields beside them, e.g. `{"id":3,"method":"resume","session":"app","taskID":7}`
/// (see `docs/daemon.md`). Decoding fails, with the field at fault, when the method is unknown
/// or a field it needs is missing or of the wrong type; the daemon answers such a line with an
/// error and keeps the connection.
public struct DaemonRequest: Codable, Sendable, Hashable {
    public var id: Int
    public var command: Command

    public init(id: Int = 0, _ command: Command) {
        self.id = id
        self.command = command
    }

    /// What a request asks for, one case per method, each with its payload.
    public enum Command: Sendable, Hashable {
        // Background sessions.

        /// Attach this connection to a session; refused while another connection is attached
        /// to it. Answers with the session's live tasks; queued events follow, then
        /// `eventsDrained`.
        case attach(Attach)
        /// Create a download task, suspended; answers with `taskID`.
        case createDownload(CreateDownload)
        /// Create an upload task, suspended; answers with `taskID`. The file is read when the
        /// transfer starts; the response body comes with the `completed` event.
        case createUpload(CreateUpload)
        /// Start or continue a task. Durable once answered.
        case resume(TaskReference)
        /// Pause a task, keeping its bytes.
        case suspend(TaskReference)
        /// Cancel a task; with `produceResumeData`, the answer carries resume data.
        case cancel(Cancel)
        /// The client handled a durable event; the daemon forgets it (and its held file).
        case acknowledge(Acknowledge)
        /// The session's live tasks.
        case listTasks(SessionReference)
        /// Liveness check; answers with the daemon's process id.
        case ping

        // The download manager's queue.

        /// Queue one download (answers with `download`) or a batch in one transaction, all or
        /// none (answers with `downloads`).
        case queueAdd(QueueAdd)
        /// A page of the downloads not purged, oldest first; answers with `downloads`, `total`
        /// and `settings`.
        case queueList(QueuePage)
        /// One download; answers with `download`.
        case queueGet(DownloadReference)
        /// Pause downloads; answers with `count`.
        case queuePause(DownloadSelection)
        /// Resume paused or failed downloads; answers with `count`.
        case queueResume(DownloadSelection)
        /// Stop a download for good, deleting its partial file; it stays listed as removed.
        case queueCancel(DownloadReference)
        /// Drop downloads from the list (cancelling them first if in progress); answers with
        /// `count`. `all` is refused: purge is the bulk form.
        case queueRemove(DownloadSelection)
        /// Drop every finished, failed and removed download; answers with `count`.
        case queuePurge
        /// Replace the URL of a waiting, paused or failed download; answers with `download`.
        case queueSetURL(SetURL)
        /// The global settings, after changing one when a change is given.
        case queueSettings(SettingChange?)
        /// Change a download's speed limit, at once when it runs; answers with `download`.
        case queueSetSpeedLimit(SetSpeedLimit)
        /// Receive `downloadChanged` / `downloadRemoved` / `settingsChanged` events from now on:
        /// all of them, or only finishes (``QueueSubscription``).
        case queueSubscribe(QueueSubscription)
        /// A page of a list download's files, with how many are done, failed and waiting;
        /// answers with `files`, `total` (of those matching) and `fileCounts`.
        case queueFiles(FilesPage)
        /// The web UI's address with its token (`webURL`).
        case webUI
        /// The aria2 RPC's endpoint and secret (`rpcURL`, `rpcSecret`).
        case rpcInfo
        /// The daemons sharing this daemon's queue and what each runs (`haul daemon status`).
        case fleetStatus
    }

    /// The method names of the wire format, one per ``Command`` case.
    public enum Method: String, Codable, Sendable, Hashable, CaseIterable {
        case attach, createDownload, createUpload, resume, suspend, cancel, acknowledge, listTasks, ping
        case queueAdd, queueList, queueGet, queuePause, queueResume, queueCancel, queueRemove, queuePurge
        case queueSetURL, queueSettings, queueSetSpeedLimit, queueSubscribe, queueFiles, webUI, rpcInfo, fleetStatus
    }

    /// The method of ``command``.
    public var method: Method { self.command.method }

    // MARK: - Payloads

    /// `attach`: the session, the client's protocol version, and the command the daemon runs
    /// when events are pending and no client is attached (`sessionSendsLaunchEvents`).
    public struct Attach: Codable, Sendable, Hashable {
        public var session: String
        public var protocolVersion: Int?
        public var launchCommand: [String]?

        public init(session: String, protocolVersion: Int? = DaemonProtocol.version, launchCommand: [String]? = nil) {
            self.session = session
            self.protocolVersion = protocolVersion
            self.launchCommand = launchCommand
        }
    }

    /// `createDownload`: from a URL, or from Haul resume data whose partial file the daemon
    /// then takes over.
    public struct CreateDownload: Codable, Sendable, Hashable {
        public enum Source: Sendable, Hashable {
            case url(URL, headers: HTTPHeaderFields)
            case resumeData(Data)
        }

        public var session: String
        public var source: Source
        public var options: TaskOptions

        public init(session: String, source: Source, options: TaskOptions = TaskOptions()) {
            self.session = session
            self.source = source
            self.options = options
        }

        enum CodingKeys: String, CodingKey { case session, url, headers, resumeData }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.session = try container.decode(String.self, forKey: .session)
            if let data = try container.decodeIfPresent(Data.self, forKey: .resumeData) {
                self.source = .resumeData(data)
            } else {
                self.source = .url(
                    try container.decode(URL.self, forKey: .url),
                    headers: try container.decodeIfPresent(HTTPHeaderFields.self, forKey: .headers) ?? HTTPHeaderFields()
                )
            }
            self.options = try TaskOptions(from: decoder)
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(self.session, forKey: .session)
            switch self.source {
            case .url(let url, let headers):
                try container.encode(url, forKey: .url)
                if !headers.fields.isEmpty { try container.encode(headers, forKey: .headers) }
            case .resumeData(let data):
                try container.encode(data, forKey: .resumeData)
            }
            try self.options.encode(to: encoder)
        }
    }

    /// `createUpload`: the file at `filePath` sent to `url` with `httpMethod` (default POST).
    public struct CreateUpload: Codable, Sendable, Hashable {
        public var session: String
        public var url: URL
        public var filePath: String
        public var httpMethod: String
        public var headers: HTTPHeaderFields
        public var options: TaskOptions

        public init(
            session: String,
            url: URL,
            filePath: String,
            httpMethod: String = "POST",
            headers: HTTPHeaderFields = HTTPHeaderFields(),
            options: TaskOptions = TaskOptions()
        ) {
            self.session = session
            self.url = url
            self.filePath = filePath
            self.httpMethod = httpMethod
            self.headers = headers
            self.options = options
        }

        enum CodingKeys: String, CodingKey { case session, url, filePath, httpMethod, headers }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.session = try container.decode(String.self, forKey: .session)
            self.url = try container.decode(URL.self, forKey: .url)
            self.filePath = try container.decode(String.self, forKey: .filePath)
            self.httpMethod = try container.decodeIfPresent(String.self, forKey: .httpMethod) ?? "POST"
            self.headers = try container.decodeIfPresent(HTTPHeaderFields.self, forKey: .headers) ?? HTTPHeaderFields()
            self.options = try TaskOptions(from: decoder)
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(self.session, forKey: .session)
            try container.encode(self.url, forKey: .url)
            try container.encode(self.filePath, forKey: .filePath)
            try container.encode(self.httpMethod, forKey: .httpMethod)
            if !self.headers.fields.isEmpty { try container.encode(self.headers, forKey: .headers) }
            try self.options.encode(to: encoder)
        }
    }

    /// What a new background task is, beside its source.
    public struct TaskOptions: Codable, Sendable, Hashable {
        public var taskDescription: String?
        public var isDiscretionary: Bool
        /// Seconds the whole transfer may take (`timeoutIntervalForResource`).
        public var resourceTimeout: Double
        /// Connections a download may use at once (`haulMaximumConnectionsPerDownload`);
        /// `nil`: one.
        public var connections: Int?

        /// A week, as `URLSessionConfiguration.timeoutIntervalForResource`.
        public static let defaultResourceTimeout: Double = 7 * 24 * 3600

        public init(taskDescription: String? = nil, isDiscretionary: Bool = false, resourceTimeout: Double = TaskOptions.defaultResourceTimeout) {
            self.taskDescription = taskDescription
            self.isDiscretionary = isDiscretionary
            self.resourceTimeout = resourceTimeout
        }

        enum CodingKeys: String, CodingKey { case taskDescription, isDiscretionary, resourceTimeout, connections }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.taskDescription = try container.decodeIfPresent(String.self, forKey: .taskDescription)
            self.isDiscretionary = try container.decodeIfPresent(Bool.self, forKey: .isDiscretionary) ?? false
            self.resourceTimeout = try container.decodeIfPresent(Double.self, forKey: .resourceTimeout) ?? Self.defaultResourceTimeout
            self.connections = try container.decodeIfPresent(Int.self, forKey: .connections).map { min(64, max(1, $0)) }
        }
    }

    /// A task of a session (`resume`, `suspend`).
    public struct TaskReference: Codable, Sendable, Hashable {
        public var session: String
        public var taskID: Int64

        public init(session: String, taskID: Int64) {
            self.session = session
            self.taskID = taskID
        }
    }

    /// `cancel`: a task, and whether to answer with resume data.
    public struct Cancel: Codable, Sendable, Hashable {
        public var session: String
        public var taskID: Int64
        public var produceResumeData: Bool

        public init(session: String, taskID: Int64, produceResumeData: Bool = false) {
            self.session = session
            self.taskID = taskID
            self.produceResumeData = produceResumeData
        }

        enum CodingKeys: String, CodingKey { case session, taskID, produceResumeData }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.session = try container.decode(String.self, forKey: .session)
            self.taskID = try container.decode(Int64.self, forKey: .taskID)
            self.produceResumeData = try container.decodeIfPresent(Bool.self, forKey: .produceResumeData) ?? false
        }
    }

    /// `acknowledge`: a durable event the client handled.
    public struct Acknowledge: Codable, Sendable, Hashable {
        public var session: String
        public var eventID: Int64

        public init(session: String, eventID: Int64) {
            self.session = session
            self.eventID = eventID
        }
    }

    /// A session (`listTasks`).
    public struct SessionReference: Codable, Sendable, Hashable {
        public var session: String

        public init(session: String) {
            self.session = session
        }
    }

    /// `queueAdd`: one download (its fields beside the method; `url` is accepted for a single
    /// URL) or a batch (`downloads`), answered with every member of each download added or,
    /// with `fields`, only those (as `queueList` takes them): `haul add` of a long list asks for
    /// the ids alone.
    public enum QueueAdd: Codable, Sendable, Hashable {
        case one(NewDownload)
        case batch([NewDownload], fields: [DownloadField]? = nil)

        enum CodingKeys: String, CodingKey { case downloads, url, urls, fields }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            if let batch = try container.decodeIfPresent([NewDownload].self, forKey: .downloads) {
                var fields: [DownloadField]?
                if let names = try container.decodeIfPresent([String].self, forKey: .fields) {
                    do { fields = try DownloadField.parse(names) } catch {
                        throw DecodingError.dataCorruptedError(forKey: .fields, in: container, debugDescription: "\(error)")
                    }
                }
                self = .batch(batch, fields: fields)
            } else if !container.contains(.urls), let url = try container.decodeIfPresent(URL.self, forKey: .url) {
                var download = try NewDownload(optionsFrom: decoder)
                download.urls = [url]
                self = .one(download)
            } else {
                self = .one(try NewDownload(from: decoder))
            }
        }

        public func encode(to encoder: any Encoder) throws {
            switch self {
            case .one(let download):
                try download.encode(to: encoder)
            case .batch(let downloads, let fields):
                var container = encoder.container(keyedBy: CodingKeys.self)
                try container.encode(downloads, forKey: .downloads)
                try container.encodeIfPresent(fields, forKey: .fields)
            }
        }
    }

    /// One download of the queue.
    public struct DownloadReference: Codable, Sendable, Hashable {
        public var downloadID: Int64

        public init(downloadID: Int64) {
            self.downloadID = downloadID
        }
    }

    /// `queueFiles`: which files of list download `downloadID`, in the list's order: those in
    /// `states` (`nil`: all), from `offset`, at most `limit` (`nil`: all).
    public struct FilesPage: Codable, Sendable, Hashable {
        public var downloadID: Int64
        public var states: [ListFileInfo.State]?
        public var offset: Int
        public var limit: Int?

        public init(downloadID: Int64, states: [ListFileInfo.State]? = nil, offset: Int = 0, limit: Int? = nil) {
            self.downloadID = downloadID
            self.states = states
            self.offset = max(0, offset)
            self.limit = limit.map { max(0, $0) }
        }

        enum CodingKeys: String, CodingKey { case downloadID, states, offset, limit }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            let (offset, limit) = try QueuePage.window(in: container, offset: .offset, limit: .limit)
            self.init(
                downloadID: try container.decode(Int64.self, forKey: .downloadID),
                states: try container.decodeIfPresent([ListFileInfo.State].self, forKey: .states),
                offset: offset,
                limit: limit
            )
        }
    }

    /// The downloads a bulk command acts on: one (`downloadID`), many (`downloadIDs`) or
    /// every one it applies to (`all: true`).
    public enum DownloadSelection: Codable, Sendable, Hashable {
        case one(Int64)
        case many([Int64])
        case all

        enum CodingKeys: String, CodingKey { case downloadID, downloadIDs, all }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            if try container.decodeIfPresent(Bool.self, forKey: .all) == true {
                self = .all
            } else if let ids = try container.decodeIfPresent([Int64].self, forKey: .downloadIDs) {
                self = .many(ids)
            } else {
                self = .one(try container.decode(Int64.self, forKey: .downloadID))
            }
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            switch self {
            case .one(let id): try container.encode(id, forKey: .downloadID)
            case .many(let ids): try container.encode(ids, forKey: .downloadIDs)
            case .all: try container.encode(true, forKey: .all)
            }
        }
    }

    /// `queueSetURL`: the download and its new URL.
    public struct SetURL: Codable, Sendable, Hashable {
        public var downloadID: Int64
        public var url: URL

        public init(downloadID: Int64, url: URL) {
            self.downloadID = downloadID
            self.url = url
        }
    }

    /// `queueSettings` with a change: one setting (`settingKey`) to a new value
    /// (`settingValue`, as `haul set` takes it).
    public struct SettingChange: Codable, Sendable, Hashable {
        public var settingKey: String
        public var settingValue: String

        public init(settingKey: String, settingValue: String) {
            self.settingKey = settingKey
            self.settingValue = settingValue
        }
    }

    /// `queueSubscribe`: which changes the connection hears from now on (`events`): every one
    /// (the default), or only the finishes — downloads that complete, fail or are cancelled, and
    /// those dropped from the list (`haul wait` without its live display). Hearing only
    /// finishes costs the daemon less: a subscriber of every change makes it record each end at
    /// once, so that starts are never heard before the ends whose slots they took.
    ///
    /// With `fields`, each change carries its download with only those members (and `id`), as
    /// `queueList` with `fields` lists them: what a subscriber that prints one line a finish
    /// needs (`haul wait -q`, `haul add --wait`), where a whole download is ~400 bytes to write
    /// and to read for each file.
    public struct QueueSubscription: Codable, Sendable, Hashable {
        public enum Events: String, Codable, Sendable, Hashable {
            case all
            case finished
        }

        public var events: Events?
        public var fields: [DownloadField]?

        public init(events: Events? = nil, fields: [DownloadField]? = nil) {
            self.events = events
            self.fields = fields
        }

        enum CodingKeys: String, CodingKey { case events, fields }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.events = try container.decodeIfPresent(Events.self, forKey: .events)
            if let names = try container.decodeIfPresent([String].self, forKey: .fields) {
                do { self.fields = try DownloadField.parse(names) } catch {
                    throw DecodingError.dataCorruptedError(forKey: .fields, in: container, debugDescription: "\(error)")
                }
            }
        }
    }

    /// `queueSetSpeedLimit`: bytes per second, 0 for none.
    public struct SetSpeedLimit: Codable, Sendable, Hashable {
        public var downloadID: Int64
        public var speedLimit: Int64

        public init(downloadID: Int64, speedLimit: Int64) {
            self.downloadID = downloadID
            self.speedLimit = speedLimit
        }
    }

    // MARK: - Wire format

    enum CodingKeys: String, CodingKey { case id, method, settingKey }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.id = try container.decode(Int.self, forKey: .id)
        let name = try container.decode(String.self, forKey: .method)
        guard let method = Method(rawValue: name) else {
            throw DecodingError.dataCorruptedError(forKey: .method, in: container, debugDescription: "unknown method '\(name)'")
        }
        switch method {
        case .attach: self.command = .attach(try Attach(from: decoder))
        case .createDownload: self.command = .createDownload(try CreateDownload(from: decoder))
        case .createUpload: self.command = .createUpload(try CreateUpload(from: decoder))
        case .resume: self.command = .resume(try TaskReference(from: decoder))
        case .suspend: self.command = .suspend(try TaskReference(from: decoder))
        case .cancel: self.command = .cancel(try Cancel(from: decoder))
        case .acknowledge: self.command = .acknowledge(try Acknowledge(from: decoder))
        case .listTasks: self.command = .listTasks(try SessionReference(from: decoder))
        case .ping: self.command = .ping
        case .queueAdd: self.command = .queueAdd(try QueueAdd(from: decoder))
        case .queueList: self.command = .queueList(try QueuePage(from: decoder))
        case .queueGet: self.command = .queueGet(try DownloadReference(from: decoder))
        case .queuePause: self.command = .queuePause(try DownloadSelection(from: decoder))
        case .queueResume: self.command = .queueResume(try DownloadSelection(from: decoder))
        case .queueCancel: self.command = .queueCancel(try DownloadReference(from: decoder))
        case .queueRemove: self.command = .queueRemove(try DownloadSelection(from: decoder))
        case .queuePurge: self.command = .queuePurge
        case .queueSetURL: self.command = .queueSetURL(try SetURL(from: decoder))
        case .queueSettings:
            self.command = .queueSettings(container.contains(.settingKey) ? try SettingChange(from: decoder) : nil)
        case .queueSetSpeedLimit: self.command = .queueSetSpeedLimit(try SetSpeedLimit(from: decoder))
        case .queueSubscribe: self.command = .queueSubscribe(try QueueSubscription(from: decoder))
        case .queueFiles: self.command = .queueFiles(try FilesPage(from: decoder))
        case .webUI: self.command = .webUI
        case .rpcInfo: self.command = .rpcInfo
        case .fleetStatus: self.command = .fleetStatus
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(self.id, forKey: .id)
        try container.encode(self.method, forKey: .method)
        // The payload's fields go beside `id` and `method`, in the same object.
        switch self.command {
        case .attach(let payload): try payload.encode(to: encoder)
        case .createDownload(let payload): try payload.encode(to: encoder)
        case .createUpload(let payload): try payload.encode(to: encoder)
        case .resume(let payload), .suspend(let payload): try payload.encode(to: encoder)
        case .cancel(let payload): try payload.encode(to: encoder)
        case .acknowledge(let payload): try payload.encode(to: encoder)
        case .listTasks(let payload): try payload.encode(to: encoder)
        case .queueAdd(let payload): try payload.encode(to: encoder)
        case .queueList(let payload): try payload.encode(to: encoder)
        case .queueGet(let payload), .queueCancel(let payload): try payload.encode(to: encoder)
        case .queuePause(let payload), .queueResume(let payload), .queueRemove(let payload): try payload.encode(to: encoder)
        case .queueSetURL(let payload): try payload.encode(to: encoder)
        case .queueSettings(let payload): try payload?.encode(to: encoder)
        case .queueSetSpeedLimit(let payload): try payload.encode(to: encoder)
        case .queueSubscribe(let payload): try payload.encode(to: encoder)
        case .queueFiles(let payload): try payload.encode(to: encoder)
        case .ping, .queuePurge, .webUI, .rpcInfo, .fleetStatus: break
        }
    }
}

extension DaemonRequest.Command {
    /// The wire name of this command.
    public var method: DaemonRequest.Method {
        switch self {
        case .attach: .attach
        case .createDownload: .createDownload
        case .createUpload: .createUpload
        case .resume: .resume
        case .suspend: .suspend
        case .cancel: .cancel
        case .acknowledge: .acknowledge
        case .listTasks: .listTasks
        case .ping: .ping
        case .queueAdd: .queueAdd
        case .queueList: .queueList
        case .queueGet: .queueGet
        case .queuePause: .queuePause
        case .queueResume: .queueResume
        case .queueCancel: .queueCancel
        case .queueRemove: .queueRemove
        case .queuePurge: .queuePurge
        case .queueSetURL: .queueSetURL
        case .queueSettings: .queueSettings
        case .queueSetSpeedLimit: .queueSetSpeedLimit
        case .queueSubscribe: .queueSubscribe
        case .queueFiles: .queueFiles
        case .webUI: .webUI
        case .rpcInfo: .rpcInfo
        case .fleetStatus: .fleetStatus
        }
    }
}
