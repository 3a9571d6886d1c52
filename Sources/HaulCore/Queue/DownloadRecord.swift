/// One download's JSON (a ``QueuedDownloadInfo`` as `JSONDecoder` reads it), written once when
/// the download changes and copied into every list that shows it, whole or projected to some
/// ``DownloadField``s. Lists of 10,000 downloads are then a copy of bytes, not 10,000 encodings.
///
/// Members are written in ``DownloadField`` order; absent optionals are left out (as
/// `JSONEncoder` does).
public struct DownloadRecord: Sendable, Hashable {
    /// `{"id":1,"urls":[…],…}`.
    public private(set) var bytes: [UInt8]
    /// Where each field's `"name":value` starts in ``bytes`` (0: absent), by field index.
    private var starts: [UInt32]

    public init(_ info: QueuedDownloadInfo) {
        self.init(info, wanted: .max)
    }

    /// The record of `info` with only the members of `fields` (in ``DownloadField`` order): for
    /// an answer that asks for a few members of each of many downloads (`queueAdd` with
    /// `fields`), nothing else written.
    public init(_ info: QueuedDownloadInfo, only fields: [DownloadField]) {
        var wanted: UInt32 = 0
        for field in fields { wanted |= 1 << Self.index(field) }
        self.init(info, wanted: wanted)
    }

    /// `wanted`: a bit for each field written, by field index.
    private init(_ info: QueuedDownloadInfo, wanted: UInt32) {
        var writer = JSONWriter(capacity: wanted == .max ? 320 : 32)
        var starts: [UInt32]? = [UInt32](repeating: 0, count: DownloadField.allCases.count)
        Self.write(info, wanted: wanted, to: &writer, starts: &starts)
        self.bytes = writer.bytes
        self.starts = starts!
    }

    /// Appends `info` as a JSON object with only the members of `fields` (and `id`, in
    /// ``DownloadField`` order), the bytes a record projected to them has: for what is written
    /// once and sent (a subscriber's change), no record made on the way.
    public static func append(_ info: QueuedDownloadInfo, fields: [DownloadField], to writer: inout JSONWriter) {
        var wanted: UInt32 = 1 << Self.index(.id)
        for field in fields { wanted |= 1 << Self.index(field) }
        var noStarts: [UInt32]?
        Self.write(info, wanted: wanted, to: &writer, starts: &noStarts)
    }

    /// Appends `info` whole, the bytes of its record; `false` (nothing appended) for a download
    /// with members a record does not hold (a segmented run's `sources`, which only
    /// `JSONEncoder` writes): for what tells of one download (a subscriber's change), where a
    /// list drops them.
    public static func appendWhole(_ info: QueuedDownloadInfo, to writer: inout JSONWriter) -> Bool {
        guard info.sources == nil else { return false }
        var noStarts: [UInt32]?
        Self.write(info, wanted: .max, to: &writer, starts: &noStarts)
        return true
    }

    /// Writes the object of `info`'s `wanted` members; where each starts (from the object's
    /// brace) goes into `starts` when there is one.
    private static func write(_ info: QueuedDownloadInfo, wanted: UInt32, to writer: inout JSONWriter, starts: inout [UInt32]?) {
        let objectStart = writer.bytes.count
        writer.append(UInt8(ascii: "{"))
        func member(_ field: DownloadField, _ value: (inout JSONWriter) -> Void) {
            guard wanted & (1 << Self.index(field)) != 0 else { return }
            if writer.bytes.count > objectStart + 1 { writer.append(UInt8(ascii: ",")) }
            starts?[Self.index(field)] = UInt32(writer.bytes.count - objectStart)
            writer.append(UInt8(ascii: "\""))
            writer.append(verbatim: field.rawValue)
            writer.append(raw: "\":")
            value(&writer)
        }
        member(.id) { $0.append(integer: info.id) }
        member(.gid) { $0.append(string: info.gid) }
        member(.urls) { $0.append(strings: info.urls.lazy.map { $0.absoluteString }) }
        member(.directory) { $0.append(string: info.directory) }
        if let fileName = info.fileName { member(.fileName) { $0.append(string: fileName) } }
        if let path = info.path { member(.path) { $0.append(string: path) } }
        member(.state) { $0.append(string: info.state.rawValue) }
        member(.bytesDone) { $0.append(integer: info.bytesDone) }
        if let totalBytes = info.totalBytes { member(.totalBytes) { $0.append(integer: totalBytes) } }
        if let speed = info.speed { member(.speed) { $0.append(double: speed) } }
        if let secondsRemaining = info.secondsRemaining { member(.secondsRemaining) { $0.append(double: secondsRemaining) } }
        if let errorMessage = info.errorMessage { member(.errorMessage) { $0.append(string: errorMessage) } }
        if let errorCode = info.errorCode { member(.errorCode) { $0.append(integer: errorCode) } }
        if let checksum = info.checksum { member(.checksum) { $0.append(string: checksum) } }
        member(.priority) { $0.append(integer: info.priority) }
        if let speedLimit = info.speedLimit { member(.speedLimit) { $0.append(integer: speedLimit) } }
        if let headers = info.requestHeaders { member(.requestHeaders) { $0.append(strings: headers) } }
        if let options = info.options { member(.options) { $0.append(stringObject: options) } }
        if let queueRank = info.queueRank { member(.queueRank) { $0.append(double: queueRank) } }
        if let connections = info.connections { member(.connections) { $0.append(integer: connections) } }
        if let maximum = info.maximumConnections { member(.maximumConnections) { $0.append(integer: maximum) } }
        if let segments = info.segments {
            member(.segments) { writer in
                writer.append(UInt8(ascii: "["))
                for (index, range) in segments.ranges.enumerated() {
                    if index > 0 { writer.append(UInt8(ascii: ",")) }
                    writer.append(UInt8(ascii: "["))
                    writer.append(integer: range.lowerBound)
                    writer.append(UInt8(ascii: ","))
                    writer.append(integer: range.upperBound)
                    writer.append(UInt8(ascii: "]"))
                }
                writer.append(UInt8(ascii: "]"))
            }
        }
        if let runner = info.runner { member(.runner) { $0.append(string: runner) } }
        if let fileCount = info.fileCount { member(.fileCount) { $0.append(integer: fileCount) } }
        member(.createdAt) { $0.append(date: info.createdAt) }
        if let startedAt = info.startedAt { member(.startedAt) { $0.append(date: startedAt) } }
        if let finishedAt = info.finishedAt { member(.finishedAt) { $0.append(date: finishedAt) } }
        writer.append(UInt8(ascii: "}"))
    }

    /// Appends this record to `output`: whole when `fields` is `nil`, else only those members
    /// (in the order asked, absent ones left out).
    public func write(to output: inout [UInt8], fields: [DownloadField]?) {
        guard let fields else { return output.append(contentsOf: self.bytes) }
        output.append(UInt8(ascii: "{"))
        var first = true
        self.bytes.withUnsafeBufferPointer { bytes in
            for field in fields {
                let start = Int(self.starts[Self.index(field)])
                guard start > 0 else { continue }
                if !first { output.append(UInt8(ascii: ",")) }
                first = false
                output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<self.end(of: field)]))
            }
        }
        output.append(UInt8(ascii: "}"))
    }

    /// Where the member of a present `field` ends: at the next present member's comma, or at
    /// the closing brace.
    private func end(of field: DownloadField) -> Int {
        var index = Self.index(field) + 1
        while index < self.starts.count {
            if self.starts[index] > 0 { return Int(self.starts[index]) - 1 }
            index += 1
        }
        return self.bytes.count - 1
    }

    private static func index(_ field: DownloadField) -> Int {
        // `allCases` order is declaration order; a switch keeps this free of searches.
        switch field {
        case .id: 0
        case .gid: 1
        case .urls: 2
        case .directory: 3
        case .fileName: 4
        case .path: 5
        case .state: 6
        case .bytesDone: 7
        case .totalBytes: 8
        case .speed: 9
        case .secondsRemaining: 10
        case .errorMessage: 11
        case .errorCode: 12
        case .checksum: 13
        case .priority: 14
        case .speedLimit: 15
        case .requestHeaders: 16
        case .options: 17
        case .queueRank: 18
        case .connections: 19
        case .maximumConnections: 20
        case .segments: 21
        case .runner: 22
        case .fileCount: 23
        case .createdAt: 24
        case .startedAt: 25
        case .finishedAt: 26
        }
    }

    /// A JSON array of `records`, each whole or projected to `fields`.
    public static func array(_ records: some Sequence<DownloadRecord>, fields: [DownloadField]?, capacity: Int = 0) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(capacity)
        output.append(UInt8(ascii: "["))
        var first = true
        for record in records {
            if !first { output.append(UInt8(ascii: ",")) }
            first = false
            record.write(to: &output, fields: fields)
        }
        output.append(UInt8(ascii: "]"))
        return output
    }
}
