import Foundation

/// A download as aria2's `tellStatus` shows it: numbers and booleans as strings, members in
/// aria2's (alphabetical) order, `files[0].uris[]` with the primary URL in use and the mirrors
/// waiting, and `bitfield` as hex over 1 MiB pieces (a bit set for each piece fully on disk).
///
/// Written straight into bytes: `tellWaiting(0, 10000)` writes 10,000 of these.
public enum Aria2Status {
    /// The piece length `bitfield` and `numPieces` count in (aria2's `--piece-length` default).
    public static let pieceLength: Int64 = 1 << 20

    /// Every key `tellStatus` knows (the rest of aria2's are BitTorrent's).
    public static let keys: [String] = [
        "bitfield", "completedLength", "connections", "dir", "downloadSpeed", "errorCode", "errorMessage", "files", "gid",
        "numPieces", "pieceLength", "status", "totalLength", "uploadLength", "uploadSpeed",
    ]

    /// aria2's name for a state (the same words).
    public static func status(_ state: QueuedDownloadState) -> String { state.rawValue }

    /// The keys a request asks for, as one bit per entry of ``keys`` (unknown names select
    /// nothing, as with aria2c).
    public struct KeySelection: Sendable, Hashable {
        var bits: UInt32 = 0

        public init(_ names: [String]) {
            for name in names {
                if let index = Aria2Status.keys.firstIndex(of: name) { self.bits |= 1 << UInt32(index) }
            }
        }

        func contains(_ index: Int) -> Bool { self.bits & (1 << UInt32(index)) != 0 }
    }

    /// The keys asked for: `nil` (or none) for all of them.
    public static func keySet(_ keys: [String]?) -> KeySelection? {
        guard let keys, !keys.isEmpty else { return nil }
        return KeySelection(keys)
    }

    /// The file's path as aria2 reports it: the final path once known, else where it will be.
    public static func path(_ info: QueuedDownloadInfo) -> String {
        if info.state == .complete, let path = info.path { return path }
        guard let name = info.fileName else { return "" }
        return FileNaming.path(of: name, in: info.directory)
    }

    /// Pieces of `total` bytes, and the hex bitfield of those wholly within the first `done`
    /// bytes (Haul writes a file front to back, so what is done is one prefix).
    public static func bitfield(done: Int64, total: Int64) -> (pieces: Int64, hex: String) {
        guard total > 0 else { return (0, "") }
        let pieces = (total + Self.pieceLength - 1) / Self.pieceLength
        let full = done >= total ? pieces : min(pieces, max(0, done) / Self.pieceLength)
        var hex = [UInt8]()
        let bytes = Int((pieces + 7) / 8)
        hex.reserveCapacity(bytes * 2)
        for byteIndex in 0..<bytes {
            let first = Int64(byteIndex) * 8
            let set = max(0, min(8, full - first))
            let byte: UInt8 = set == 0 ? 0 : UInt8(truncatingIfNeeded: 0xFF << (8 - set))
            hex.append(HexDigits.digit(byte >> 4))
            hex.append(HexDigits.digit(byte & 0xF))
        }
        return (pieces, String(decoding: hex, as: UTF8.self))
    }

    /// The bitfield of a segmented download: a bit for each piece wholly in `map`.
    public static func bitfield(map: ByteRangeSet, total: Int64) -> (pieces: Int64, hex: String) {
        guard total > 0 else { return (0, "") }
        let pieces = (total + Self.pieceLength - 1) / Self.pieceLength
        var hex = [UInt8]()
        let bytes = Int((pieces + 7) / 8)
        hex.reserveCapacity(bytes * 2)
        for byteIndex in 0..<bytes {
            var byte: UInt8 = 0
            for bit in 0..<8 {
                let piece = Int64(byteIndex) * 8 + Int64(bit)
                guard piece < pieces else { break }
                let start = piece * Self.pieceLength
                if map.contains(start..<min(total, start + Self.pieceLength)) { byte |= 0x80 >> UInt8(bit) }
            }
            hex.append(HexDigits.digit(byte >> 4))
            hex.append(HexDigits.digit(byte & 0xF))
        }
        return (pieces, String(decoding: hex, as: UTF8.self))
    }

    /// Writes the status object of `info`, with only `keys` when given.
    public static func write(_ info: QueuedDownloadInfo, keys: KeySelection?, to writer: inout JSONWriter) {
        var first = true
        // `index` is the member's place in ``keys``, which is also the order they are written in.
        func member(_ index: Int, _ name: StaticString, _ value: (inout JSONWriter) -> Void) {
            if let keys, !keys.contains(index) { return }
            writer.append(first ? UInt8(ascii: "{") : UInt8(ascii: ","))
            first = false
            writer.append(UInt8(ascii: "\""))
            writer.append(raw: name)
            writer.append(raw: "\":")
            value(&writer)
        }
        func number(_ value: Int64) -> (inout JSONWriter) -> Void {
            { writer in
                writer.append(UInt8(ascii: "\""))
                writer.append(integer: value)
                writer.append(UInt8(ascii: "\""))
            }
        }
        let total = info.totalBytes ?? 0
        let done = info.state == .complete ? max(total, info.bytesDone) : info.bytesDone
        let isActive = info.state == .active
        let speed = isActive ? Int64((info.speed ?? 0).rounded()) : 0
        let pieceCount = total > 0 ? (total + Self.pieceLength - 1) / Self.pieceLength : 0
        // The hex is written only when asked for (lists often ask for gid and status alone).
        if pieceCount > 0, keys?.contains(0) ?? true {
            let hex = info.state != .complete ? info.segments.map { Self.bitfield(map: $0, total: total).hex } : nil
            member(0, "bitfield") { $0.append(string: hex ?? Self.bitfield(done: done, total: total).hex) }
        }
        member(1, "completedLength", number(done))
        member(2, "connections", number(isActive ? Int64(max(1, info.connections ?? 1)) : 0))
        member(3, "dir") { $0.append(string: info.directory) }
        member(4, "downloadSpeed", number(speed))
        if info.state == .error || info.state == .complete || info.state == .removed {
            member(5, "errorCode") { writer in
                writer.append(UInt8(ascii: "\""))
                writer.append(integer: info.state == .error ? (info.errorCode ?? 1) : 0)
                writer.append(UInt8(ascii: "\""))
            }
        }
        if let message = info.errorMessage, info.state == .error { member(6, "errorMessage") { $0.append(string: message) } }
        member(7, "files") { writer in
            writer.append(UInt8(ascii: "["))
            Self.writeFile(info, done: done, to: &writer)
            writer.append(UInt8(ascii: "]"))
        }
        member(8, "gid") { $0.append(string: info.gid) }
        member(9, "numPieces", number(pieceCount))
        member(10, "pieceLength", number(Self.pieceLength))
        member(11, "status") { $0.append(string: Self.status(info.state)) }
        member(12, "totalLength", number(total))
        member(13, "uploadLength") { $0.append(raw: "\"0\"") }
        member(14, "uploadSpeed") { $0.append(raw: "\"0\"") }
        if first { writer.append(UInt8(ascii: "{")) }
        writer.append(UInt8(ascii: "}"))
    }

    /// The status object as bytes.
    public static func bytes(_ info: QueuedDownloadInfo, keys: KeySelection?) -> [UInt8] {
        var writer = JSONWriter(capacity: 512)
        Self.write(info, keys: keys, to: &writer)
        return writer.bytes
    }

    /// `files[0]`: the one file of an HTTP download.
    static func writeFile(_ info: QueuedDownloadInfo, done: Int64, to writer: inout JSONWriter) {
        writer.append(raw: "{\"completedLength\":\"")
        writer.append(integer: done)
        writer.append(raw: "\",\"index\":\"1\",\"length\":\"")
        writer.append(integer: info.totalBytes ?? 0)
        writer.append(raw: "\",\"path\":")
        writer.append(string: Self.path(info))
        writer.append(raw: ",\"selected\":\"true\",\"uris\":")
        Self.writeURIs(info, to: &writer)
        writer.append(UInt8(ascii: "}"))
    }

    /// `[{"status":"used","uri":…},{"status":"waiting","uri":…}]`: the primary URL in use while
    /// the download is active, every other URL (and all of them otherwise) waiting, as aria2c
    /// reports them.
    public static func writeURIs(_ info: QueuedDownloadInfo, to writer: inout JSONWriter) {
        writer.append(UInt8(ascii: "["))
        for (index, url) in info.urls.enumerated() {
            if index > 0 { writer.append(UInt8(ascii: ",")) }
            let used = index == 0 && info.state == .active
            writer.append(raw: used ? "{\"status\":\"used\",\"uri\":" : "{\"status\":\"waiting\",\"uri\":")
            writer.append(string: url.absoluteString)
            writer.append(UInt8(ascii: "}"))
        }
        writer.append(UInt8(ascii: "]"))
    }

    /// `getFiles`' answer.
    public static func files(_ info: QueuedDownloadInfo) -> [UInt8] {
        var writer = JSONWriter(capacity: 256)
        writer.append(UInt8(ascii: "["))
        let done = info.state == .complete ? max(info.totalBytes ?? 0, info.bytesDone) : info.bytesDone
        Self.writeFile(info, done: done, to: &writer)
        writer.append(UInt8(ascii: "]"))
        return writer.bytes
    }
}

/// aria2's exit and error codes (its manual, "EXIT STATUS"), for `errorCode`.
public enum Aria2ErrorCode {
    public static let unknown = 1
    public static let timeout = 2
    public static let notFound = 3
    public static let networkProblem = 6
    public static let diskFull = 9
    public static let fileIO = 17
    public static let nameResolution = 19
    public static let badResponse = 22
    public static let authorization = 24
    public static let checksum = 32

    /// The code of a failure: the server's status when it answered, else the kind of network or
    /// file error (`URLError` codes), else what the message says.
    public static func code(urlErrorCode: Int?, serverStatus: Int?, message: String) -> Int {
        if let serverStatus {
            switch serverStatus {
            case 404, 410: return Self.notFound
            case 401, 407: return Self.authorization
            default: return Self.badResponse
            }
        }
        if message.contains("No space left") { return Self.diskFull }
        if message.hasPrefix("checksum mismatch") { return Self.checksum }
        switch urlErrorCode.map(URLError.Code.init(rawValue:)) {
        case .timedOut?: return Self.timeout
        case .cannotFindHost?, .dnsLookupFailed?: return Self.nameResolution
        case .cannotConnectToHost?, .networkConnectionLost?, .notConnectedToInternet?: return Self.networkProblem
        case .cannotCreateFile?, .cannotWriteToFile?, .cannotOpenFile?, .cannotMoveFile?: return Self.fileIO
        case .badServerResponse?: return Self.badResponse
        default: return Self.unknown
        }
    }
}

enum HexDigits {
    static func digit(_ value: UInt8) -> UInt8 {
        value < 10 ? UInt8(ascii: "0") + value : UInt8(ascii: "a") + value - 10
    }
}
