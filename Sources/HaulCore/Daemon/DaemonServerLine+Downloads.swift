import Foundation

extension DaemonServerLine {
    /// Reads one line from the daemon (newline excluded): an answer that lists downloads (a long
    /// one, or one that has `downloads` at all: it may hold projections, which only that
    /// reader takes) through ``downloadList(line:)``, a download's change through
    /// ``downloadChange(line:)``, anything else (and every line those readers do not take)
    /// through `JSONDecoder`, as before. `nil` for a line that is neither.
    public static func decode(line bytes: UnsafeRawBufferPointer) -> DaemonServerLine? {
        // A change first: a subscriber hears several for every download, and none is a list.
        if bytes.starts(with: Self.changePrefix.utf8), let line = Self.downloadChange(line: bytes) { return line }
        if bytes.count >= DaemonRequest.batchLineBytes || Self.mentionsDownloads(bytes), let line = Self.downloadList(line: bytes) { return line }
        if bytes.count <= Self.bareAnswerBytes, let line = Self.bareAnswer(line: bytes) { return line }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return try? decoder.decode(DaemonServerLine.self, from: Data(bytes), maximumNesting: JSONNesting.limit)
    }

    /// Whether a short line has a `"downloads":` member somewhere (a list, perhaps projected):
    /// each quote found by the C library's `memchr`, then compared. (Foundation's generic
    /// `firstRange(of:)` on the raw bytes cost ~1 K instructions a byte: `haul add --wait`
    /// spent 124 K instructions a file on it, two thirds of its CPU.)
    static func mentionsDownloads(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let needle = Self.downloadsMember
        guard let base = bytes.baseAddress, bytes.count >= needle.count else { return false }
        return needle.withUnsafeBytes { needle in
            var offset = 0
            while bytes.count - offset >= needle.count,
                let quote = memchr(base + offset, Int32(UInt8(ascii: "\"")), bytes.count - offset - needle.count + 1)
            {
                if memcmp(quote, needle.baseAddress!, needle.count) == 0 { return true }
                offset = base.distance(to: UnsafeRawPointer(quote)) + 1
            }
            return false
        }
    }

    private static let downloadsMember = Array(#""downloads":"#.utf8)

    /// The longest line ``bareAnswer(line:)`` is tried on.
    static let bareAnswerBytes = 96

    /// `{"response":{"id":N}}`, optionally with an integer `count` (a subscription's, a pause's
    /// answer), read with Haul's JSON reader; `nil` for anything else, which `JSONDecoder`
    /// reads (and words the error of). Its first decoding of a process cost a queue command
    /// ~1.1 M instructions (the runtime's first look-ups of Codable's types).
    static func bareAnswer(line bytes: UnsafeRawBufferPointer) -> DaemonServerLine? {
        guard let value = try? JSONValue(parsing: bytes), let outer = value.objectValue, outer.count == 1, outer[0].0 == "response",
            let members = outer[0].1.objectValue, members.hasUniqueMemberNames
        else { return nil }
        var id: Int?
        var count: Int?
        for (name, member) in members {
            switch name {
            case "id": guard member != .null, member.read(into: &id) else { return nil }
            case "count": guard member.read(into: &count) else { return nil }
            default: return nil
            }
        }
        guard let id else { return nil }
        var response = DaemonResponse(id: id)
        response.count = count
        return DaemonServerLine(response: response)
    }

    /// An answer that lists downloads (`queueAdd` of a batch, `queueList`), read with Haul's JSON
    /// reader instead of `JSONDecoder`; `nil` when the line is anything else or holds anything
    /// this reader does not take exactly as `JSONDecoder` would (the caller then decodes it the
    /// usual way). `JSONDecoder` spent ~8 µs a download on Codable's keyed containers and its
    /// date parser: `haul add` of 1,000 URLs decoded its answer in ~8 ms of its ~22 ms of CPU,
    /// on the two cores the first of those downloads were fetched on.
    ///
    /// Taken: `{"response":{...}}` whose response has an integer `id`, a `downloads` array of
    /// objects as ``DownloadRecord`` writes them (``QueuedDownloadInfo/init(record:)``), all of
    /// them projected to some fields and `id` (an answer asked with `fields`: the projections,
    /// ``DaemonResponse/downloadFields``, and their ids), or each with an integer `id` alone (an
    /// answer asked for `fields` `["id"]`: its ``DaemonResponse/downloadIDs``), and
    /// optionally integer `total` and `count` and the queue's `settings` (as `queueList` answers).
    /// Not taken: any other member, a member named twice, a value of another type.
    public static func downloadList(line bytes: some Collection<UInt8>) -> DaemonServerLine? {
        guard let value = try? JSONValue(parsing: bytes), let outer = value.objectValue, outer.count == 1, outer[0].0 == "response",
            let members = outer[0].1.objectValue, members.hasUniqueMemberNames
        else { return nil }
        var id: Int?
        var downloads: [QueuedDownloadInfo]?
        var ids: [Int64]?
        var total: Int?
        var count: Int?
        var settings: QueueSettings?
        var projected: Set<DownloadField> = []
        for (name, member) in members {
            let taken: Bool
            switch name {
            case "id": taken = member != .null && member.read(into: &id)
            case "total": taken = member.read(into: &total)
            case "count": taken = member.read(into: &count)
            case "settings":
                settings = member == .null ? nil : QueueSettings(member: member)
                taken = member == .null || settings != nil
            case "downloads":
                guard let entries = member.arrayValue else { return nil }
                if let first = entries.first?.objectValue, first.count == 1 {
                    var list: [Int64] = []
                    list.reserveCapacity(entries.count)
                    for entry in entries {
                        guard let members = entry.objectValue, members.count == 1, members[0].0 == "id", case .integer(let id) = members[0].1 else { return nil }
                        list.append(id)
                    }
                    ids = list
                } else {
                    var list: [QueuedDownloadInfo] = []
                    list.reserveCapacity(entries.count)
                    var wholes = 0
                    for entry in entries {
                        // Whole, or projected (`queueList` with `fields`): which members came is
                        // said. One list is all of one kind.
                        guard let (info, fields) = QueuedDownloadInfo.read(record: entry, projection: true) else { return nil }
                        if let fields { projected.formUnion(fields) } else { wholes += 1 }
                        list.append(info)
                    }
                    guard wholes == 0 || wholes == list.count else { return nil }
                    downloads = list
                    // Projections are ids too, as `JSONDecoder`'s reading of them has it.
                    if wholes == 0, !list.isEmpty { ids = list.map(\.id) }
                }
                taken = true
            default:
                taken = false
            }
            guard taken else { return nil }
        }
        guard let id, downloads != nil || ids != nil else { return nil }
        var response = DaemonResponse(id: id)
        response.downloads = downloads
        response.downloadIDs = ids
        response.downloadFields = projected.isEmpty ? nil : DownloadField.allCases.filter(projected.contains)
        response.total = total
        response.count = count
        response.settings = settings
        return DaemonServerLine(response: response)
    }
}

extension DaemonServerLine {
    /// How every line of ``encodedChange(_:)`` starts.
    static let changePrefix = #"{"event":{"kind":"downloadChanged","#

    /// A subscriber's event that `download` was added or changed, the download written as its
    /// ``DownloadRecord`` has it (the line as `encoded()` writes it, newline included); `nil` for a download
    /// with members a record does not hold (a segmented run's `sources`), which `JSONEncoder`
    /// writes. `JSONEncoder` wrote each event, for every subscriber (`haul wait`, `haul watch`),
    /// on the daemon's thread that records the ends of small files.
    ///
    /// With `fields` (a subscription that asked for them), the download has only those members
    /// and `id`: always written here, segmented or not.
    public static func encodedChange(_ download: QueuedDownloadInfo, fields: [DownloadField]? = nil) -> [UInt8]? {
        // Written straight into the line (a record and its copy cost ~5 K instructions a
        // change; a queue of small files makes three or more a file for each subscriber).
        var writer = JSONWriter(capacity: fields == nil ? 400 : 160)
        writer.append(raw: #"{"event":{"kind":"downloadChanged","downloadID":"#)
        writer.append(integer: download.id)
        writer.append(raw: #","download":"#)
        if let fields {
            DownloadRecord.append(download, fields: fields, to: &writer)
        } else {
            guard DownloadRecord.appendWhole(download, to: &writer) else { return nil }
        }
        writer.append(raw: "}}\n")
        return writer.bytes
    }

    /// A subscriber's event that a download was added or changed (`downloadChanged` with its
    /// `download` and `downloadID`, nothing else), read with Haul's JSON reader; `nil` for
    /// anything else, or anything this reader does not take exactly as `JSONDecoder` would
    /// (which read each event through Codable's keyed containers; a subscriber hears several
    /// for every download).
    public static func downloadChange(line bytes: some Collection<UInt8>) -> DaemonServerLine? {
        guard let value = try? JSONValue(parsing: bytes), let outer = value.objectValue, outer.count == 1, outer[0].0 == "event",
            let members = outer[0].1.objectValue, members.hasUniqueMemberNames
        else { return nil }
        var isChange = false
        var downloadID: Int64?
        var download: QueuedDownloadInfo?
        var projected: [DownloadField]?
        for (name, member) in members {
            switch name {
            case "kind": isChange = member.stringValue == DaemonEvent.Kind.downloadChanged.rawValue
            case "downloadID": guard member.read(into: &downloadID) else { return nil }
            case "download":
                guard member != .null else { continue }
                // Whole, or projected (a subscription with `fields`): what it holds is said.
                guard let (info, fields) = QueuedDownloadInfo.read(record: member, projection: true) else { return nil }
                download = info
                projected = fields
            default: return nil
            }
        }
        guard isChange else { return nil }
        var event = DaemonEvent(kind: .downloadChanged)
        event.downloadID = downloadID
        event.download = download
        event.downloadFields = projected
        return DaemonServerLine(event: event)
    }
}

extension QueuedDownloadInfo {
    /// One download as ``DownloadRecord`` writes it, read from Haul's JSON reader; `nil` for
    /// anything `JSONDecoder` might read otherwise (a member this reader does not know, `null`
    /// where a value is required, a number or date in another form), left to it.
    init?(record: JSONValue) {
        guard let (info, projected) = Self.read(record: record, projection: false), projected == nil else { return nil }
        self = info
    }

    /// A download as ``DownloadRecord`` writes it, whole or, with `projection`, projected to
    /// some members (a subscription with `fields`): then `id` is required and nothing else, a
    /// member left out keeps its zero value, and the fields present are returned (`nil`: all of
    /// a whole download's).
    static func read(record: JSONValue, projection: Bool) -> (QueuedDownloadInfo, [DownloadField]?)? {
        guard let members = record.objectValue, members.hasUniqueMemberNames else { return nil }
        var id: Int64?
        var gid: String?
        var urls: [URL]?
        var directory: String?
        var state: QueuedDownloadState?
        var bytesDone: Int64?
        var priority: Int?
        var createdAt: Date?
        // The fields present, in order (a projection's answer to which were sent).
        var present: [DownloadField] = []
        if projection { present.reserveCapacity(members.count) }
        var info = QueuedDownloadInfo(
            id: 0, urls: [], directory: "", fileName: nil, path: nil, state: .waiting, bytesDone: 0, totalBytes: nil,
            errorMessage: nil, checksum: nil, priority: 0, speedLimit: nil, createdAt: Date(timeIntervalSince1970: 0),
            startedAt: nil, finishedAt: nil
        )
        for (name, value) in members {
            // Exhaustive over the fields a record holds: a field added to ``DownloadField`` (and
            // so to records) does not compile here until this reader takes it too. A member that
            // is not a field (`sources`, written only by `JSONEncoder`): `JSONDecoder`'s.
            guard let field = DownloadField.named(name) else { return nil }
            if projection { present.append(field) }
            let taken: Bool
            switch field {
            // Required: `null` is not taken.
            case .id: taken = value != .null && value.read(into: &id)
            case .gid: taken = value != .null && value.read(into: &gid)
            case .urls:
                urls = value.urls
                taken = urls != nil
            case .directory: taken = value != .null && value.read(into: &directory)
            case .state:
                state = value.stringValue.flatMap(QueuedDownloadState.init(rawValue:))
                taken = state != nil
            case .bytesDone: taken = value != .null && value.read(into: &bytesDone)
            case .priority: taken = value != .null && value.read(into: &priority)
            case .createdAt: taken = value != .null && Self.read(value, into: &createdAt)
            // Optional.
            case .fileName: taken = value.read(into: &info.fileName)
            case .path: taken = value.read(into: &info.path)
            case .totalBytes: taken = value.read(into: &info.totalBytes)
            case .speed: taken = value.read(into: &info.speed)
            case .secondsRemaining: taken = value.read(into: &info.secondsRemaining)
            case .errorMessage: taken = value.read(into: &info.errorMessage)
            case .errorCode: taken = value.read(into: &info.errorCode)
            case .checksum: taken = value.read(into: &info.checksum)
            case .speedLimit: taken = value.read(into: &info.speedLimit)
            case .requestHeaders: taken = value.read(into: &info.requestHeaders)
            case .options: taken = value.read(into: &info.options)
            case .queueRank: taken = value.read(into: &info.queueRank)
            case .connections: taken = value.read(into: &info.connections)
            case .maximumConnections: taken = value.read(into: &info.maximumConnections)
            case .segments: taken = Self.read(value, into: &info.segments)
            case .runner: taken = value.read(into: &info.runner)
            case .fileCount: taken = value.read(into: &info.fileCount)
            case .startedAt: taken = Self.read(value, into: &info.startedAt)
            case .finishedAt: taken = Self.read(value, into: &info.finishedAt)
            }
            guard taken else { return nil }
        }
        guard let id else { return nil }
        info.id = id
        guard let gid, let urls, let directory, let state, let bytesDone, let priority, let createdAt else {
            guard projection else { return nil }
            gid.map { info.gid = $0 }
            urls.map { info.urls = $0 }
            directory.map { info.directory = $0 }
            state.map { info.state = $0 }
            bytesDone.map { info.bytesDone = $0 }
            priority.map { info.priority = $0 }
            createdAt.map { info.createdAt = $0 }
            // What came (every member is a field: checked above); noted only for a projection
            // (a whole list's records pay nothing for it).
            return (info, present)
        }
        info.gid = gid
        info.urls = urls
        info.directory = directory
        info.state = state
        info.bytesDone = bytesDone
        info.priority = priority
        info.createdAt = createdAt
        return (info, nil)
    }

    /// Byte ranges as ``ByteRangeSet``'s decoder takes them (pairs [lower, upper] with
    /// 0 <= lower <= upper), or `null`.
    private static func read(_ value: JSONValue, into field: inout ByteRangeSet?) -> Bool {
        switch value {
        case .null: field = nil
        case .array(let pairs):
            var ranges: [Range<Int64>] = []
            for pair in pairs {
                guard case .array(let bounds) = pair, bounds.count == 2, case .integer(let lower) = bounds[0],
                    case .integer(let upper) = bounds[1], lower >= 0, lower <= upper
                else { return false }
                ranges.append(lower..<upper)
            }
            field = ByteRangeSet(ranges)
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
