/// The download manager's global settings, changeable while it runs (`haul set KEY VALUE`).
public struct QueueSettings: Codable, Sendable, Hashable {
    /// Downloads transferring at once.
    public var maximumConcurrentDownloads: Int = 5
    /// Downloads transferring at once from one host (scheme, host and port).
    public var maximumConnectionsPerHost: Int = 4
    /// Connections one download may use at once (segmented downloads), within the per-host
    /// limit; `nil`: ``defaultConnectionsPerDownload``.
    public var connectionsPerDownload: Int?
    /// Adaptive by default: a download uses as many connections as the per-host limit leaves
    /// it (segments only where the server allows and the file is large enough).
    public static let defaultConnectionsPerDownload = 16
    /// All downloads together, in bytes per second; 0 is unlimited.
    public var globalSpeedLimit: Int64 = 0
    /// Where downloads go when `add` names no directory.
    public var defaultDirectory: String
    /// aria2 global options set through the RPC that Haul records (`split`, `user-agent` …):
    /// answered by `getGlobalOption` and the defaults of downloads added through the RPC.
    public var rpcOptions: [String: String]?

    public init(defaultDirectory: String) {
        self.defaultDirectory = defaultDirectory
    }

    /// The keys `set` accepts, with what each means.
    public static let keys: [(key: String, help: String)] = [
        ("max-concurrent", "downloads at once (1-64)"),
        ("max-per-host", "downloads at once from one host (1-64)"),
        ("connections", "connections one download may use at once, within max-per-host (1-64, default 16; 1: no segments)"),
        ("speed-limit", "global limit, e.g. 2M or 500K per second; 0 for none"),
        ("dir", "default download directory (absolute path)"),
    ]

    public enum SettingError: Error, Sendable, Hashable, CustomStringConvertible {
        case unknownKey(String)
        case badValue(key: String, value: String, expected: String)

        public var description: String {
            switch self {
            case .unknownKey(let key):
                "unknown setting '\(key)'; settings are: \(QueueSettings.keys.map(\.key).joined(separator: ", "))"
            case .badValue(let key, let value, let expected):
                "'\(value)' is not a valid value for \(key): expected \(expected)"
            }
        }
    }

    /// Applies `key = value` as typed by a user.
    public mutating func set(_ key: String, to value: String) throws(SettingError) {
        switch key {
        case "max-concurrent", "max-per-host":
            guard let number = Int(value), (1...64).contains(number) else {
                throw .badValue(key: key, value: value, expected: "a whole number from 1 to 64")
            }
            if key == "max-concurrent" { self.maximumConcurrentDownloads = number } else { self.maximumConnectionsPerHost = number }
        case "connections":
            guard let number = Int(value), (1...64).contains(number) else {
                throw .badValue(key: key, value: value, expected: "a whole number from 1 to 64")
            }
            self.connectionsPerDownload = number
        case "speed-limit":
            guard let rate = SpeedLimit.parse(value) else {
                throw .badValue(key: key, value: value, expected: "a rate such as 2M, 500K or 0")
            }
            self.globalSpeedLimit = rate
        case "dir":
            guard value.hasPrefix("/") else { throw .badValue(key: key, value: value, expected: "an absolute path") }
            self.defaultDirectory = value
        default:
            throw .unknownKey(key)
        }
    }
}

/// Speed limits as users write them: `2M`, `500K`, `1.5MiB/s`, `0` (none).
public enum SpeedLimit {
    /// Bytes per second, or `nil` when `text` is not a rate. `0` means unlimited.
    public static func parse(_ text: String) -> Int64? {
        var trimmed = text.trimmingASCIIWhitespace()
        for suffix in ["/s", "ps"] where trimmed.lowercased().hasSuffix(suffix) {
            trimmed = String(trimmed.dropLast(suffix.count))
        }
        return ByteCountFormatting.parseSize(trimmed)
    }
}

extension QueueSettings {
    /// The settings as an answer carries them, read from Haul's JSON reader (for
    /// ``DaemonServerLine/downloadList(line:)``); `nil` for anything `JSONDecoder` might read
    /// otherwise, left to it.
    init?(member: JSONValue) {
        guard let members = member.objectValue, members.hasUniqueMemberNames else { return nil }
        var maximumConcurrent: Int?
        var maximumPerHost: Int?
        var globalSpeedLimit: Int64?
        var defaultDirectory: String?
        var connections: Int?
        var rpcOptions: [String: String]?
        for (name, value) in members {
            // Exhaustive over the members `JSONDecoder` reads: one added here does not compile
            // until this reader takes it too.
            guard let key = CodingKeys(stringValue: name) else { return nil }
            let taken: Bool
            switch key {
            case .maximumConcurrentDownloads: taken = value != .null && value.read(into: &maximumConcurrent)
            case .maximumConnectionsPerHost: taken = value != .null && value.read(into: &maximumPerHost)
            case .globalSpeedLimit: taken = value != .null && value.read(into: &globalSpeedLimit)
            case .defaultDirectory: taken = value != .null && value.read(into: &defaultDirectory)
            case .connectionsPerDownload: taken = value.read(into: &connections)
            case .rpcOptions: taken = value.read(into: &rpcOptions)
            }
            guard taken else { return nil }
        }
        guard let maximumConcurrent, let maximumPerHost, let globalSpeedLimit, let defaultDirectory else { return nil }
        self.init(defaultDirectory: defaultDirectory)
        self.maximumConcurrentDownloads = maximumConcurrent
        self.maximumConnectionsPerHost = maximumPerHost
        self.globalSpeedLimit = globalSpeedLimit
        self.connectionsPerDownload = connections
        self.rpcOptions = rpcOptions
    }
}
