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
    /// ``NewDownload`` with a value of their type or `null`. Not taken (left to `JSONDecoder`,
    /// which ignores unknown members): a member it does not know, a member named twice, a
    /// number that is not a whole one within range, a value of another type.
    public static func batchAdd(line bytes: some Collection<UInt8>) -> DaemonRequest? {
        guard let value = try? JSONValue(parsing: bytes), let members = value.objectValue, members.hasUniqueMemberNames else { return nil }
        var id: Int?
        var isQueueAdd = false
        var downloads: [NewDownload]?
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
            default:
                return nil
            }
        }
        guard let id, isQueueAdd, let downloads else { return nil }
        return DaemonRequest(id: id, .queueAdd(.batch(downloads)))
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
            switch key {
            case .urls:
                guard let strings = value.arrayValue else { return nil }
                var urls: [URL] = []
                urls.reserveCapacity(strings.count)
                for string in strings {
                    guard let text = string.stringValue, let url = URL(string: text) else { return nil }
                    urls.append(url)
                }
                self.urls = urls
                hasURLs = true
            case .directory: guard Self.read(value, into: &self.directory) else { return nil }
            case .fileName: guard Self.read(value, into: &self.fileName) else { return nil }
            case .checksum: guard Self.read(value, into: &self.checksum) else { return nil }
            case .gid: guard Self.read(value, into: &self.gid) else { return nil }
            case .speedLimit: guard Self.read(value, into: &self.speedLimit) else { return nil }
            case .priority: guard Self.read(value, into: &self.priority) else { return nil }
            case .connections: guard Self.read(value, into: &self.connections) else { return nil }
            case .paused:
                switch value {
                case .null: self.paused = false
                case .bool(let paused): self.paused = paused
                default: return nil
                }
            case .requestHeaders:
                switch value {
                case .null: self.requestHeaders = nil
                case .array(let lines):
                    var headers: [String] = []
                    for line in lines {
                        guard let text = line.stringValue else { return nil }
                        headers.append(text)
                    }
                    self.requestHeaders = headers
                default: return nil
                }
            case .options:
                switch value {
                case .null: self.options = nil
                case .object(let pairs):
                    guard pairs.hasUniqueMemberNames else { return nil }
                    var options: [String: String] = [:]
                    for (key, option) in pairs {
                        guard let text = option.stringValue else { return nil }
                        options[key] = text
                    }
                    self.options = options
                default: return nil
                }
            }
        }
        guard hasURLs else { return nil }
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
}

extension DaemonRequest {
    /// The request as one line for the daemon's socket, newline included: a `queueAdd` of a
    /// batch written with ``JSONWriter`` (what ``batchAdd(line:)`` reads back), anything else
    /// with `JSONEncoder`. `JSONEncoder` took ~2 µs a download of `haul add`'s batch.
    public func encodedLine() throws -> [UInt8] {
        guard case .queueAdd(.batch(let downloads)) = self.command else {
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
        writer.append(raw: "]}\n")
        return writer.bytes
    }
}

extension NewDownload {
    /// This download as a JSON object: every member `encode(to:)` writes, absent optionals left
    /// out (as `JSONEncoder` does).
    func write(to writer: inout JSONWriter) {
        writer.append(raw: #"{"urls":["#)
        for (index, url) in self.urls.enumerated() {
            if index > 0 { writer.append(UInt8(ascii: ",")) }
            writer.append(string: url.absoluteString)
        }
        writer.append(UInt8(ascii: "]"))
        func member(_ key: CodingKeys) {
            writer.append(raw: #",""#)
            writer.append(verbatim: key.rawValue)
            writer.append(raw: #"":"#)
        }
        func strings(_ values: some Sequence<String>) {
            writer.append(UInt8(ascii: "["))
            for (index, value) in values.enumerated() {
                if index > 0 { writer.append(UInt8(ascii: ",")) }
                writer.append(string: value)
            }
            writer.append(UInt8(ascii: "]"))
        }
        if let directory = self.directory { member(.directory); writer.append(string: directory) }
        if let fileName = self.fileName { member(.fileName); writer.append(string: fileName) }
        if let checksum = self.checksum { member(.checksum); writer.append(string: checksum) }
        if let speedLimit = self.speedLimit { member(.speedLimit); writer.append(integer: speedLimit) }
        if let priority = self.priority { member(.priority); writer.append(integer: priority) }
        member(.paused)
        writer.append(bool: self.paused)
        if let gid = self.gid { member(.gid); writer.append(string: gid) }
        if let headers = self.requestHeaders { member(.requestHeaders); strings(headers) }
        if let options = self.options {
            member(.options)
            writer.append(UInt8(ascii: "{"))
            for (index, key) in options.keys.sorted().enumerated() {
                if index > 0 { writer.append(UInt8(ascii: ",")) }
                writer.append(string: key)
                writer.append(UInt8(ascii: ":"))
                writer.append(string: options[key]!)
            }
            writer.append(UInt8(ascii: "}"))
        }
        if let connections = self.connections { member(.connections); writer.append(integer: connections) }
        writer.append(UInt8(ascii: "}"))
    }
}
