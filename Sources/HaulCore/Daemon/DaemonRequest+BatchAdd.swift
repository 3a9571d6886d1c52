import Foundation

extension DaemonRequest {
    /// Lines at least this long try ``batchAdd(line:)`` first (about forty downloads); shorter
    /// ones are not worth a second parse when they are something else.
    public static let batchLineBytes = 4096

    /// Reads one request line of the daemon's socket: refused when nested deeper than
    /// ``JSONNesting/limit`` (``JSONNesting/TooDeep``; `JSONDecoder` traps on some such lines);
    /// a long `queueAdd` batch through ``batchAdd(line:)``; anything else, and every error,
    /// through `JSONDecoder`.
    public static func decode(line bytes: some Collection<UInt8>) throws -> DaemonRequest {
        // In place when the bytes are contiguous (a `ByteBufferView`): read through the generic
        // collection, each byte was a protocol call (~600 instructions a byte of the line).
        if let request = try bytes.withContiguousStorageIfAvailable({ try Self.decode(contiguousLine: $0) }) {
            return request
        }
        return try Array(bytes).withUnsafeBufferPointer { try Self.decode(contiguousLine: $0) }
    }

    private static func decode(contiguousLine bytes: UnsafeBufferPointer<UInt8>) throws -> DaemonRequest {
        // The fast reader has its own depth limit; JSONDecoder is guarded from deep lines.
        if bytes.count >= Self.batchLineBytes, let batch = Self.batchAdd(line: bytes) { return batch }
        return try JSONDecoder().decode(DaemonRequest.self, from: Data(buffer: bytes), maximumNesting: JSONNesting.limit)
    }

    /// A `queueAdd` of a batch (`"downloads": [...]`) read with Haul's JSON reader instead of
    /// `JSONDecoder`, or `nil` when the line is anything else or holds anything this reader does
    /// not take exactly as `JSONDecoder` would (then the caller decodes it the usual way, which
    /// also words the error). `JSONDecoder` spends ~7 µs a download of a batch on Codable's
    /// keyed containers (a thousand at once: 7.4 ms against 1.2 ms here), on the daemon's event
    /// loop, before any of them can start.
    ///
    /// Taken: an object with an integer `id`, `method` `"queueAdd"` and a `downloads` array of
    /// objects, each with `urls` (strings that parse as URLs) and any of the other members of
    /// ``NewDownload`` with a value of their type or `null`; optionally `fields`, names of
    /// ``DownloadField``s (or `null`). Not taken (left to `JSONDecoder`,
    /// which ignores unknown members): a member it does not know, a member named twice, a
    /// number that is not a whole one within range, a value of another type.
    public static func batchAdd(line bytes: some Collection<UInt8>) -> DaemonRequest? {
        guard let value = try? JSONValue(parsing: bytes), let members = value.objectValue, members.hasUniqueMemberNames else { return nil }
        var id: Int?
        var isQueueAdd = false
        var downloads: [NewDownload]?
        var fields: [DownloadField]?
        for (name, member) in members {
            switch name {
            case "id":
                guard case .integer(let number) = member else { return nil }
                id = Int(exactly: number)
            case "method":
                isQueueAdd = member.stringValue == Method.queueAdd.rawValue
            case "downloads":
                guard let entries = member.arrayValue else { return nil }
                var batch: [NewDownload] = []
                batch.reserveCapacity(entries.count)
                for entry in entries {
                    guard let download = NewDownload(batchEntry: entry) else { return nil }
                    batch.append(download)
                }
                downloads = batch
            case "fields":
                guard member != .null else { continue }
                // An unknown name is JSONDecoder's to word.
                guard let names = member.arrayValue else { return nil }
                var parsed: [DownloadField] = []
                for name in names {
                    guard let field = name.stringValue.flatMap(DownloadField.init(rawValue:)) else { return nil }
                    parsed.append(field)
                }
                fields = parsed
            default:
                return nil
            }
        }
        guard let id, isQueueAdd, let downloads else { return nil }
        return DaemonRequest(id: id, .queueAdd(.batch(downloads, fields: fields)))
    }
}

extension NewDownload {
    /// One download of a batch, as ``DaemonRequest/batchAdd(line:)`` takes it; `nil` for
    /// anything it leaves to `JSONDecoder`.
    init?(batchEntry entry: JSONValue) {
        guard let members = entry.objectValue, members.hasUniqueMemberNames else { return nil }
        self.init(urls: [])
        var hasURLs = false
        for (name, value) in members {
            // Exhaustive over the members `JSONDecoder` reads: a member added to ``NewDownload``
            // does not compile here until this reader takes it too (it would otherwise be
            // dropped from long batches without a word). One it does not know: `JSONDecoder`'s.
            guard let key = CodingKeys(rawValue: name) else { return nil }
            let taken: Bool
            switch key {
            case .urls:
                guard let urls = value.urls else { return nil }
                self.urls = urls
                hasURLs = true
                taken = true
            case .list:
                guard let list = value.urls else { return nil }
                self.list = list
                hasURLs = true
                taken = true
            case .directory: taken = value.read(into: &self.directory)
            case .fileName: taken = value.read(into: &self.fileName)
            case .checksum: taken = value.read(into: &self.checksum)
            case .gid: taken = value.read(into: &self.gid)
            case .speedLimit: taken = value.read(into: &self.speedLimit)
            case .priority: taken = value.read(into: &self.priority)
            case .connections: taken = value.read(into: &self.connections)
            case .paused:
                var paused: Bool?
                taken = value.read(into: &paused)
                self.paused = paused ?? false
            case .requestHeaders: taken = value.read(into: &self.requestHeaders)
            case .options: taken = value.read(into: &self.options)
            }
            guard taken else { return nil }
        }
        guard hasURLs else { return nil }
    }
}

extension DaemonRequest {
    /// The request as one line for the daemon's socket, newline included: a `queueAdd` of a
    /// batch written with ``JSONWriter`` (what ``batchAdd(line:)`` reads back), anything else
    /// with `JSONEncoder`. `JSONEncoder` took ~2 µs a download of `haul add`'s batch.
    public func encodedLine() throws -> [UInt8] {
        if let line = self.smallQueueLine() { return line }
        guard case .queueAdd(.batch(let downloads, let fields)) = self.command else {
            var line = Array(try JSONEncoder().encode(self))
            line.append(UInt8(ascii: "\n"))
            return line
        }
        var writer = JSONWriter(capacity: 64 + downloads.count * 128)
        writer.append(raw: #"{"id":"#)
        writer.append(integer: self.id)
        writer.append(raw: #","method":"queueAdd","downloads":["#)
        for (index, download) in downloads.enumerated() {
            if index > 0 { writer.append(UInt8(ascii: ",")) }
            download.write(to: &writer)
        }
        writer.append(UInt8(ascii: "]"))
        Self.appendFields(fields, to: &writer)
        writer.append(raw: "}\n")
        return writer.bytes
    }

    /// `,"fields":[…]` when `fields` is given: a projection's members, as `JSONEncoder` writes them.
    static func appendFields(_ fields: [DownloadField]?, to writer: inout JSONWriter) {
        guard let fields else { return }
        writer.append(raw: #","fields":"#)
        writer.append(strings: fields.lazy.map(\.rawValue))
    }
}

extension DaemonRequest {
    /// `queueSubscribe`, `queueList` and the requests without a payload, written with
    /// ``JSONWriter`` as `JSONEncoder` writes them (the same members; the daemon reads either);
    /// `nil` for any other request. A queue command sends one or two of these first: through
    /// `JSONEncoder`, the first encoding of a process cost ~1.8 M instructions (its types' first
    /// look-ups by the runtime), a tenth of `haul ls`.
    func smallQueueLine() -> [UInt8]? {
        var writer = JSONWriter(capacity: 160)
        writer.append(raw: #"{"id":"#)
        writer.append(integer: self.id)
        writer.append(raw: #","method":"#)
        writer.append(string: self.method.rawValue)
        switch self.command {
        case .queueSubscribe(let subscription):
            if let events = subscription.events {
                writer.append(raw: #","events":"#)
                writer.append(string: events.rawValue)
            }
            Self.appendFields(subscription.fields, to: &writer)
        case .queueList(let page):
            writer.append(raw: #","offset":"#)
            writer.append(integer: page.offset)
            if let limit = page.limit {
                writer.append(raw: #","limit":"#)
                writer.append(integer: limit)
            }
            if let states = page.states {
                writer.append(raw: #","states":"#)
                writer.append(strings: states.lazy.map(\.rawValue))
            }
            if let search = page.search {
                writer.append(raw: #","search":"#)
                writer.append(string: search)
            }
            Self.appendFields(page.fields, to: &writer)
        case .ping, .queuePurge, .webUI, .rpcInfo, .fleetStatus:
            break
        default:
            return nil
        }
        writer.append(raw: "}\n")
        return writer.bytes
    }
}

extension DaemonRequest {
    /// A download too long for any request line of the daemon's (its URLs, headers or options
    /// alone exceed ``DaemonProtocol/maximumLineLength``).
    public struct DownloadTooLong: Error, CustomStringConvertible {
        /// Its place in the list given (0-based).
        public var index: Int
        /// Bytes of its JSON object.
        public var bytes: Int

        public var description: String {
            "download \(self.index + 1) of the list takes \(self.bytes) bytes, more than one request to hauld may carry (\(DaemonProtocol.maximumLineLength))"
        }
    }

    /// `downloads` split, in order, into as few consecutive batches as each fit one `queueAdd`
    /// line of at most `maximumLineLength` bytes before its newline (``encodedLine()``, whatever
    /// its `id`): one
    /// batch when the whole list fits, each line asking for `fields` of the answer. The daemon
    /// adds each batch in one transaction.
    ///
    /// With `growingFrom`, the first batch carries at most that many downloads and each next
    /// one at most ``batchGrowth`` times as many as the one before (each still within the
    /// line): the daemon starts the first ones while it decodes and saves the rest, instead of
    /// after all of them (`haul add -i` of 1,000 URLs: its first request reached the server
    /// ~23 ms after the add began, the time hauld took to decode and insert the thousand).
    ///
    /// - Throws: ``DownloadTooLong`` for a download that fits no line on its own.
    public static func addBatches(
        _ downloads: [NewDownload],
        fields: [DownloadField]? = nil,
        growingFrom first: Int? = nil,
        maximumLineLength: Int = DaemonProtocol.maximumLineLength
    ) throws(DownloadTooLong) -> [ArraySlice<NewDownload>] {
        // The line around the downloads: {"id":N,"method":"queueAdd","downloads":[ … ]}, with
        // room for the longest id, and `fields` when asked for; its newline is not counted (nor
        // is it by the daemon).
        var fieldsMember = JSONWriter(capacity: 64)
        Self.appendFields(fields, to: &fieldsMember)
        let frame = #"{"id":,"method":"queueAdd","downloads":[]}"#.utf8.count + String(Int.max).utf8.count + fieldsMember.bytes.count
        var batches: [ArraySlice<NewDownload>] = []
        var start = 0
        var length = frame
        var writer = JSONWriter(capacity: 512)
        // The most downloads the current batch may carry (`Int.max`: as many as fit its line).
        var cap = first.map { max(1, $0) } ?? Int.max
        for (index, download) in downloads.enumerated() {
            writer.bytes.removeAll(keepingCapacity: true)
            download.write(to: &writer)
            let bytes = writer.bytes.count
            guard frame + bytes <= maximumLineLength else { throw DownloadTooLong(index: index, bytes: bytes) }
            // A comma before every download but a batch's first.
            let added = index > start ? bytes + 1 : bytes
            if length + added > maximumLineLength || index - start >= cap {
                batches.append(downloads[start..<index])
                start = index
                length = frame + bytes
                cap = cap.multipliedReportingOverflow(by: Self.batchGrowth).overflow ? Int.max : cap * Self.batchGrowth
            } else {
                length += added
            }
        }
        if start < downloads.count || downloads.isEmpty { batches.append(downloads[start...]) }
        return batches
    }

    /// How many times as many downloads each batch of ``addBatches(_:fields:growingFrom:maximumLineLength:)``
    /// may carry as the one before: a batch costs hauld ~20 µs of CPU a download to decode and
    /// save, a small file ~300 µs to fetch, so the files of one batch keep the transfers busy
    /// while the next, eight times as long, is saved.
    public static let batchGrowth = 8
}

extension NewDownload {
    /// This download as a JSON object: every member `encode(to:)` writes, absent optionals left
    /// out (as `JSONEncoder` does).
    func write(to writer: inout JSONWriter) {
        writer.append(raw: #"{"urls":"#)
        writer.append(strings: self.urls.lazy.map { $0.absoluteString })
        func member(_ key: CodingKeys) {
            writer.append(raw: #",""#)
            writer.append(verbatim: key.rawValue)
            writer.append(raw: #"":"#)
        }
        if let directory = self.directory { member(.directory); writer.append(string: directory) }
        if let fileName = self.fileName { member(.fileName); writer.append(string: fileName) }
        if let checksum = self.checksum { member(.checksum); writer.append(string: checksum) }
        if let speedLimit = self.speedLimit { member(.speedLimit); writer.append(integer: speedLimit) }
        if let priority = self.priority { member(.priority); writer.append(integer: priority) }
        member(.paused)
        writer.append(bool: self.paused)
        if let gid = self.gid { member(.gid); writer.append(string: gid) }
        if let headers = self.requestHeaders { member(.requestHeaders); writer.append(strings: headers) }
        if let options = self.options { member(.options); writer.append(stringObject: options) }
        if let connections = self.connections { member(.connections); writer.append(integer: connections) }
        if let list = self.list { member(.list); writer.append(strings: list.lazy.map { $0.absoluteString }) }
        writer.append(UInt8(ascii: "}"))
    }
}
