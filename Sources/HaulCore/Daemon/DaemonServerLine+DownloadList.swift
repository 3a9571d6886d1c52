import Foundation

extension DaemonServerLine {
    /// Reads one line from the daemon (newline excluded): a long answer that lists downloads
    /// through ``downloadList(line:)``, anything else (and every line that reader does not take)
    /// through `JSONDecoder`, as before. `nil` for a line that is neither.
    public static func decode(line bytes: UnsafeRawBufferPointer) -> DaemonServerLine? {
        if bytes.count >= DaemonRequest.batchLineBytes, let line = Self.downloadList(line: bytes) { return line }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return try? decoder.decode(DaemonServerLine.self, from: Data(bytes), maximumNesting: JSONNesting.limit)
    }

    /// An answer that lists downloads (`queueAdd` of a batch, `queueList`), read with Haul's JSON
    /// reader instead of `JSONDecoder`; `nil` when the line is anything else or holds anything
    /// this reader does not take exactly as `JSONDecoder` would (the caller then decodes it the
    /// usual way). `JSONDecoder` spent ~8 µs a download on Codable's keyed containers and its
    /// date parser: `haul add` of 1,000 URLs decoded its answer in ~8 ms of its ~22 ms of CPU,
    /// on the two cores the first of those downloads were fetched on.
    ///
    /// Taken: `{"response":{...}}` whose response has an integer `id`, a `downloads` array of
    /// objects as ``DownloadRecord`` writes them (``QueuedDownloadInfo/init(record:)``), and
    /// optionally integer `total` and `count`. Not taken: any other member, a member named
    /// twice, a value of another type.
    public static func downloadList(line bytes: some Collection<UInt8>) -> DaemonServerLine? {
        guard let value = try? JSONValue(parsing: bytes), let outer = value.objectValue, outer.count == 1, outer[0].0 == "response",
            let members = outer[0].1.objectValue, members.hasUniqueMemberNames
        else { return nil }
        var id: Int?
        var downloads: [QueuedDownloadInfo]?
        var total: Int?
        var count: Int?
        for (name, member) in members {
            switch name {
            case "id":
                guard case .integer(let number) = member, let exact = Int(exactly: number) else { return nil }
                id = exact
            case "total":
                guard case .integer(let number) = member, let exact = Int(exactly: number) else { return nil }
                total = exact
            case "count":
                guard case .integer(let number) = member, let exact = Int(exactly: number) else { return nil }
                count = exact
            case "downloads":
                guard let entries = member.arrayValue else { return nil }
                var list: [QueuedDownloadInfo] = []
                list.reserveCapacity(entries.count)
                for entry in entries {
                    guard let info = QueuedDownloadInfo(record: entry) else { return nil }
                    list.append(info)
                }
                downloads = list
            default:
                return nil
            }
        }
        guard let id, let downloads else { return nil }
        var response = DaemonResponse(id: id)
        response.downloads = downloads
        response.total = total
        response.count = count
        return DaemonServerLine(response: response)
    }
}

extension QueuedDownloadInfo {
    /// One download as ``DownloadRecord`` writes it, read from Haul's JSON reader; `nil` for
    /// anything `JSONDecoder` might read otherwise (a member this reader does not know, `null`
    /// where a value is required, a number or date in another form), left to it.
    init?(record: JSONValue) {
        guard let members = record.objectValue, members.hasUniqueMemberNames else { return nil }
        var id: Int64?
        var gid: String?
        var urls: [URL]?
        var directory: String?
        var state: QueuedDownloadState?
        var bytesDone: Int64?
        var priority: Int?
        var createdAt: Date?
        var info = QueuedDownloadInfo(
            id: 0, urls: [], directory: "", fileName: nil, path: nil, state: .waiting, bytesDone: 0, totalBytes: nil,
            errorMessage: nil, checksum: nil, priority: 0, speedLimit: nil, createdAt: Date(timeIntervalSince1970: 0),
            startedAt: nil, finishedAt: nil
        )
        for (name, value) in members {
            // Exhaustive over the fields a record holds: a field added to ``DownloadField`` (and
            // so to records) does not compile here until this reader takes it too. A member that
            // is not a field (`sources`, written only by `JSONEncoder`): `JSONDecoder`'s.
            guard let field = DownloadField(rawValue: name) else { return nil }
            switch field {
            case .id: guard let number = Self.required(value, as: Int64.self) else { return nil }; id = number
            case .gid: guard case .string(let text) = value else { return nil }; gid = text
            case .urls:
                guard let strings = value.arrayValue else { return nil }
                var list: [URL] = []
                list.reserveCapacity(strings.count)
                for string in strings {
                    guard let text = string.stringValue, let url = URL(string: text) else { return nil }
                    list.append(url)
                }
                urls = list
            case .directory: guard case .string(let text) = value else { return nil }; directory = text
            case .fileName: guard Self.read(value, into: &info.fileName) else { return nil }
            case .path: guard Self.read(value, into: &info.path) else { return nil }
            case .state:
                guard case .string(let text) = value, let parsed = QueuedDownloadState(rawValue: text) else { return nil }
                state = parsed
            case .bytesDone: guard let number = Self.required(value, as: Int64.self) else { return nil }; bytesDone = number
            case .totalBytes: guard Self.read(value, into: &info.totalBytes) else { return nil }
            case .speed: guard Self.read(value, into: &info.speed) else { return nil }
            case .secondsRemaining: guard Self.read(value, into: &info.secondsRemaining) else { return nil }
            case .errorMessage: guard Self.read(value, into: &info.errorMessage) else { return nil }
            case .errorCode: guard Self.read(value, into: &info.errorCode) else { return nil }
            case .checksum: guard Self.read(value, into: &info.checksum) else { return nil }
            case .priority: guard let number = Self.required(value, as: Int.self) else { return nil }; priority = number
            case .speedLimit: guard Self.read(value, into: &info.speedLimit) else { return nil }
            case .requestHeaders:
                switch value {
                case .null: info.requestHeaders = nil
                case .array(let lines):
                    var headers: [String] = []
                    for line in lines {
                        guard let text = line.stringValue else { return nil }
                        headers.append(text)
                    }
                    info.requestHeaders = headers
                default: return nil
                }
            case .options:
                switch value {
                case .null: info.options = nil
                case .object(let pairs):
                    guard pairs.hasUniqueMemberNames else { return nil }
                    var options: [String: String] = [:]
                    for (key, option) in pairs {
                        guard let text = option.stringValue else { return nil }
                        options[key] = text
                    }
                    info.options = options
                default: return nil
                }
            case .queueRank: guard Self.read(value, into: &info.queueRank) else { return nil }
            case .connections: guard Self.read(value, into: &info.connections) else { return nil }
            case .maximumConnections: guard Self.read(value, into: &info.maximumConnections) else { return nil }
            case .segments:
                switch value {
                case .null: info.segments = nil
                case .array(let pairs):
                    // As ``ByteRangeSet``'s decoder takes them: pairs [lower, upper], 0 <= lower <= upper.
                    var ranges: [Range<Int64>] = []
                    for pair in pairs {
                        guard case .array(let bounds) = pair, bounds.count == 2, case .integer(let lower) = bounds[0],
                            case .integer(let upper) = bounds[1], lower >= 0, lower <= upper
                        else { return nil }
                        ranges.append(lower..<upper)
                    }
                    info.segments = ByteRangeSet(ranges)
                default: return nil
                }
            case .runner: guard Self.read(value, into: &info.runner) else { return nil }
            case .createdAt:
                var date: Date?
                guard Self.read(value, into: &date), let date else { return nil }
                createdAt = date
            case .startedAt: guard Self.read(value, into: &info.startedAt) else { return nil }
            case .finishedAt: guard Self.read(value, into: &info.finishedAt) else { return nil }
            }
        }
        guard let id, let gid, let urls, let directory, let state, let bytesDone, let priority, let createdAt else { return nil }
        info.id = id
        info.gid = gid
        info.urls = urls
        info.directory = directory
        info.state = state
        info.bytesDone = bytesDone
        info.priority = priority
        info.createdAt = createdAt
        self = info
    }

    /// A whole number that fits `Number` (not `null`).
    private static func required<Number: FixedWidthInteger>(_ value: JSONValue, as type: Number.Type) -> Number? {
        guard case .integer(let number) = value else { return nil }
        return Number(exactly: number)
    }

    /// A string member (or `null`); `false` for a value of another type.
    private static func read(_ value: JSONValue, into field: inout String?) -> Bool {
        switch value {
        case .null: field = nil
        case .string(let text): field = text
        default: return false
        }
        return true
    }

    /// A whole-number member that fits `Number` (or `null`); `false` otherwise.
    private static func read<Number: FixedWidthInteger>(_ value: JSONValue, into field: inout Number?) -> Bool {
        switch value {
        case .null: field = nil
        case .integer(let number):
            guard let exact = Number(exactly: number) else { return false }
            field = exact
        default: return false
        }
        return true
    }

    /// A number member (or `null`); a whole one is read as `JSONDecoder` reads it into a `Double`.
    private static func read(_ value: JSONValue, into field: inout Double?) -> Bool {
        switch value {
        case .null: field = nil
        case .double(let number): field = number
        case .integer(let number): field = Double(number)
        default: return false
        }
        return true
    }

    /// A date member as `JSONEncoder`'s `.iso8601` writes it (`2026-11-23T10:15:00Z`, or `null`).
    private static func read(_ value: JSONValue, into field: inout Date?) -> Bool {
        switch value {
        case .null: field = nil
        case .string(let text):
            // A leap second (`:60`) and a date before 1970 (where calendars may part from plain
            // arithmetic) are left to `JSONDecoder`'s date parser.
            guard !text.utf8.dropFirst(17).starts(with: "60".utf8), let date = UTCTimestamp.parseISO8601(text), date.timeIntervalSince1970 >= 0
            else { return false }
            field = date
        default: return false
        }
        return true
    }
}

extension Array where Element == (String, JSONValue) {
    /// No member named twice (what `JSONDecoder` does then is its own affair).
    var hasUniqueMemberNames: Bool {
        guard self.count > 1 else { return true }
        if self.count <= 32 {
            for index in self.indices.dropFirst() where self[..<index].contains(where: { $0.0 == self[index].0 }) { return false }
            return true
        }
        var seen = Set<String>(minimumCapacity: self.count)
        return self.allSatisfy { seen.insert($0.0).inserted }
    }
}
