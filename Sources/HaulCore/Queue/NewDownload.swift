import Foundation

/// One download to add to the queue (`queueAdd`, alone or in a batch).
public struct NewDownload: Codable, Sendable, Hashable {
    /// The primary URL first, then mirrors.
    public var urls: [URL]
    /// An absolute directory; `nil`: the queue's default.
    public var directory: String?
    /// A plain file name; `nil`: from the server's answer.
    public var fileName: String?
    /// `sha256=…`, `sha1=…` or `md5=…`.
    public var checksum: String?
    /// Bytes per second; `nil` or 0: unlimited.
    public var speedLimit: Int64?
    public var priority: Int?
    /// Added paused instead of waiting.
    public var paused: Bool
    /// The RPC id the client chose (16 hex digits); `nil`: the daemon picks one.
    public var gid: String?
    /// Extra request headers, `Name: value` each.
    public var requestHeaders: [String]?
    /// aria2 options as given through the RPC, kept for `getOption`.
    public var options: [String: String]?
    /// Connections this download may use at once (`haul add -x N`); `nil`: the queue's setting.
    public var connections: Int?
    /// A list download: these files, each from its own URL, into `directory` as one download
    /// (`haul add --list`); `urls` is then empty. `nil`: one file from `urls`.
    public var list: [URL]?

    public init(
        urls: [URL],
        directory: String? = nil,
        fileName: String? = nil,
        checksum: String? = nil,
        speedLimit: Int64? = nil,
        priority: Int? = nil,
        paused: Bool = false,
        gid: String? = nil,
        requestHeaders: [String]? = nil,
        options: [String: String]? = nil,
        connections: Int? = nil,
        list: [URL]? = nil
    ) {
        self.urls = urls
        self.directory = directory
        self.fileName = fileName
        self.checksum = checksum
        self.speedLimit = speedLimit
        self.priority = priority
        self.paused = paused
        self.gid = gid
        self.requestHeaders = requestHeaders
        self.options = options
        self.connections = connections
        self.list = list
    }

    enum CodingKeys: String, CodingKey {
        case urls, directory, fileName, checksum, speedLimit, priority, paused, gid, requestHeaders, options, connections, list
    }

    public init(from decoder: any Decoder) throws {
        try self.init(optionsFrom: decoder)
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.list = try container.decodeIfPresent([URL].self, forKey: .list)
        // A list download's files are its URLs: `urls` is then left out (or empty).
        self.urls = try self.list == nil ? container.decode([URL].self, forKey: .urls) : container.decodeIfPresent([URL].self, forKey: .urls) ?? []
    }

    /// Everything but the URLs (left empty), for requests that give them another way.
    package init(optionsFrom decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.urls = []
        self.directory = try container.decodeIfPresent(String.self, forKey: .directory)
        self.fileName = try container.decodeIfPresent(String.self, forKey: .fileName)
        self.checksum = try container.decodeIfPresent(String.self, forKey: .checksum)
        self.speedLimit = try container.decodeIfPresent(Int64.self, forKey: .speedLimit)
        self.priority = try container.decodeIfPresent(Int.self, forKey: .priority)
        self.paused = try container.decodeIfPresent(Bool.self, forKey: .paused) ?? false
        self.gid = try container.decodeIfPresent(String.self, forKey: .gid)
        self.requestHeaders = try container.decodeIfPresent([String].self, forKey: .requestHeaders)
        self.options = try container.decodeIfPresent([String: String].self, forKey: .options)
        self.connections = try container.decodeIfPresent(Int.self, forKey: .connections)
        self.list = nil
    }
}

/// A window of the queue's list: `offset` and `limit` over the downloads that match `states`
/// and `search`, oldest first.
public struct QueuePage: Codable, Sendable, Hashable {
    public var offset: Int
    /// At most this many; `nil`: all from `offset`.
    public var limit: Int?
    /// Only downloads in these states; `nil`: every state but `removed`.
    public var states: [QueuedDownloadState]?
    /// Only downloads whose file name or URL contains this text (case-insensitive).
    public var search: String?
    /// Only these members of each download (as aria2's `keys`); `nil`: all of them.
    public var fields: [DownloadField]?

    public init(
        offset: Int = 0,
        limit: Int? = nil,
        states: [QueuedDownloadState]? = nil,
        search: String? = nil,
        fields: [DownloadField]? = nil
    ) {
        self.offset = max(0, offset)
        self.limit = limit.map { max(0, $0) }
        self.states = states
        self.search = search
        self.fields = fields
    }

    enum CodingKeys: String, CodingKey { case offset, limit, states, search, fields }

    /// A page's `offset` (0 when left out) and `limit` (`nil`) read from `container`; a negative
    /// one is an error, not a guess. Shared by the requests that page (`queueList`, `queueFiles`).
    package static func window<Key: CodingKey>(in container: KeyedDecodingContainer<Key>, offset: Key, limit: Key) throws -> (offset: Int, limit: Int?) {
        let start = try container.decodeIfPresent(Int.self, forKey: offset) ?? 0
        let count = try container.decodeIfPresent(Int.self, forKey: limit)
        if start < 0 { throw DecodingError.dataCorruptedError(forKey: offset, in: container, debugDescription: "'offset' cannot be negative") }
        if let count, count < 0 { throw DecodingError.dataCorruptedError(forKey: limit, in: container, debugDescription: "'limit' cannot be negative") }
        return (start, count)
    }

    /// Every field may be left out; a negative `offset` or `limit` is an error, not a guess.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let (offset, limit) = try Self.window(in: container, offset: .offset, limit: .limit)
        var fields: [DownloadField]?
        if let names = try container.decodeIfPresent([String].self, forKey: .fields) {
            do { fields = try DownloadField.parse(names) } catch {
                throw DecodingError.dataCorruptedError(forKey: .fields, in: container, debugDescription: "\(error)")
            }
        }
        self.init(
            offset: offset,
            limit: limit,
            states: try container.decodeIfPresent([QueuedDownloadState].self, forKey: .states),
            search: try container.decodeIfPresent(String.self, forKey: .search),
            fields: fields
        )
    }
}
