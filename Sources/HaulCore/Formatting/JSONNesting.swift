import Foundation

/// How deeply a JSON text nests arrays and objects, found by one pass over its bytes (strings
/// skipped, escapes honoured), without parsing it.
///
/// Foundation's `JSONDecoder` traps — it does not throw — on some texts nested more than 512
/// levels (its depth error's source location is computed out of bounds: 532 bytes of `[` and
/// newlines found by fuzzing stopped hauld). Input from outside is checked with this first;
/// nothing Haul reads nests more than a few levels.
public enum JSONNesting {
    /// The most levels Haul reads from a client (a daemon line, a web UI body, resume data).
    public static let limit = 64

    /// Whether `bytes` open more than `limit` arrays or objects inside one another.
    ///
    /// Contiguous bytes (`ByteBufferView`, `Data`, arrays) are scanned through a buffer pointer:
    /// called across modules this generic function is not specialized, and stepping its
    /// iterator through the protocol cost ~600 instructions a byte (a 300-download line: 59 K a
    /// download, more than the rest of reading it).
    public static func exceeds(_ limit: Int = Self.limit, in bytes: some Sequence<UInt8>) -> Bool {
        if let answer = bytes.withContiguousStorageIfAvailable({ Self.exceeds(limit, inBuffer: $0) }) {
            return answer
        }
        return Self.exceeds(limit, inBuffer: Array(bytes))
    }

    private static func exceeds(_ limit: Int, inBuffer bytes: some Collection<UInt8>) -> Bool {
        var depth = 0
        var inString = false
        var escaped = false
        for byte in bytes {
            if inString {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                }
                continue
            }
            switch byte {
            case UInt8(ascii: "\""):
                inString = true
            case UInt8(ascii: "["), UInt8(ascii: "{"):
                depth += 1
                if depth > limit { return true }
            case UInt8(ascii: "]"), UInt8(ascii: "}"):
                depth -= 1
            default:
                break
            }
        }
        return false
    }

    /// The error for a text that ``exceeds(_:in:)`` the limit.
    public struct TooDeep: Error, CustomStringConvertible, Sendable {
        public var limit: Int
        public init(limit: Int) { self.limit = limit }
        public var description: String { "nested deeper than \(self.limit) levels" }
    }
}

extension JSONDecoder {
    /// Decodes `type` from `data` once ``JSONNesting`` has found it nested no deeper than
    /// `maximumNesting` levels; deeper, it throws ``JSONNesting/TooDeep`` without decoding.
    /// The one way Haul decodes JSON it did not write itself (a client's line or request body,
    /// a file on disk): `JSONDecoder` traps on some texts nested past 512 levels.
    public func decode<T: Decodable>(_ type: T.Type, from data: Data, maximumNesting: Int) throws -> T {
        guard !JSONNesting.exceeds(maximumNesting, in: data) else { throw JSONNesting.TooDeep(limit: maximumNesting) }
        return try self.decode(type, from: data)
    }
}
