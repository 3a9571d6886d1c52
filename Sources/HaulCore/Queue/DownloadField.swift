/// A member of a download's JSON (``QueuedDownloadInfo``), for lists that ask for some of
/// them only (`queueList` with `fields`, as aria2's `keys`). The order of the cases is the order
/// of the members in a record.
public enum DownloadField: String, Codable, Sendable, Hashable, CaseIterable {
    case id
    case gid
    case urls
    case directory
    case fileName
    case path
    case state
    case bytesDone
    case totalBytes
    case speed
    case secondsRemaining
    case errorMessage
    case errorCode
    case checksum
    case priority
    case speedLimit
    case requestHeaders
    case options
    case queueRank
    case connections
    case maximumConnections
    case segments
    case runner
    case fileCount
    case createdAt
    case startedAt
    case finishedAt

    /// The field named `name` (its raw value), or `nil`. One hash of the name where
    /// `init(rawValue:)` compares it with each case's in turn: a client reading a projected
    /// record of four members spent ~3 K instructions on the names (callgrind).
    public static func named(_ name: String) -> DownloadField? {
        Self.byName[name]
    }

    private static let byName: [String: DownloadField] = Dictionary(uniqueKeysWithValues: Self.allCases.map { ($0.rawValue, $0) })

    /// The fields named in `names`, or an error that names the unknown one and the known ones.
    public static func parse(_ names: [String]) throws -> [DownloadField] {
        try names.map { name in
            guard let field = DownloadField.named(name) else {
                throw UnknownDownloadField(name: name)
            }
            return field
        }
    }
}

/// A `fields` entry that is not a member of a download.
public struct UnknownDownloadField: Error, CustomStringConvertible, Sendable {
    public var name: String

    public init(name: String) {
        self.name = name
    }

    public var description: String {
        "unknown field '\(self.name)' (known: \(DownloadField.allCases.map(\.rawValue).joined(separator: ", ")))"
    }
}
