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
        var writer = JSONWriter(capacity: 320)
        var starts = [UInt32](repeating: 0, count: DownloadField.allCases.count)
        writer.append(UInt8(ascii: "{"))
        func member(_ field: DownloadField, _ value: (inout JSONWriter) -> Void) {
            if writer.bytes.count > 1 { writer.append(UInt8(ascii: ",")) }
            starts[Self.index(field)] = UInt32(writer.bytes.count)
            writer.append(UInt8(ascii: "\""))
            writer.bytes.append(contentsOf: field.rawValue.utf8)
            writer.append(raw: "\":")
            value(&writer)
        }
        member(.id) { $0.append(integer: info.id) }
        member(.urls) { writer in
            writer.append(UInt8(ascii: "["))
            for (index, url) in info.urls.enumerated() {
                if index > 0 { writer.append(UInt8(ascii: ",")) }
                writer.append(string: url.absoluteString)
            }
            writer.append(UInt8(ascii: "]"))
        }
        member(.directory) { $0.append(string: info.directory) }
        if let fileName = info.fileName { member(.fileName) { $0.append(string: fileName) } }
        if let path = info.path { member(.path) { $0.append(string: path) } }
        member(.state) { $0.append(string: info.state.rawValue) }
        member(.bytesDone) { $0.append(integer: info.bytesDone) }
        if let totalBytes = info.totalBytes { member(.totalBytes) { $0.append(integer: totalBytes) } }
        if let speed = info.speed { member(.speed) { $0.append(double: speed) } }
        if let secondsRemaining = info.secondsRemaining { member(.secondsRemaining) { $0.append(double: secondsRemaining) } }
        if let errorMessage = info.errorMessage { member(.errorMessage) { $0.append(string: errorMessage) } }
        if let checksum = info.checksum { member(.checksum) { $0.append(string: checksum) } }
        member(.priority) { $0.append(integer: info.priority) }
        if let speedLimit = info.speedLimit { member(.speedLimit) { $0.append(integer: speedLimit) } }
        member(.createdAt) { $0.append(date: info.createdAt) }
        if let startedAt = info.startedAt { member(.startedAt) { $0.append(date: startedAt) } }
        if let finishedAt = info.finishedAt { member(.finishedAt) { $0.append(date: finishedAt) } }
        writer.append(UInt8(ascii: "}"))
        self.bytes = writer.bytes
        self.starts = starts
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
        case .urls: 1
        case .directory: 2
        case .fileName: 3
        case .path: 4
        case .state: 5
        case .bytesDone: 6
        case .totalBytes: 7
        case .speed: 8
        case .secondsRemaining: 9
        case .errorMessage: 10
        case .checksum: 11
        case .priority: 12
        case .speedLimit: 13
        case .createdAt: 14
        case .startedAt: 15
        case .finishedAt: 16
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
