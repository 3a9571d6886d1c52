/// A parsed `Content-Range` header value in the `bytes` unit (RFC 9110 §14.4).
public enum ContentRange: Sendable, Hashable {
    /// `bytes first-last/complete` where `complete` is `nil` for `*`.
    case satisfied(first: Int64, last: Int64, completeLength: Int64?)
    /// `bytes */complete`, as sent with a 416 response.
    case unsatisfied(completeLength: Int64)

    /// Parses a `Content-Range` value; returns `nil` for anything malformed or in another unit.
    public init?(headerValue: String) {
        let trimmed = headerValue.trimmingASCIIWhitespace()
        guard trimmed.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = trimmed.dropFirst("bytes ".count).trimmingASCIIWhitespace()
        let parts = spec.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        let rangePart = parts[0]
        let lengthPart = parts[1]
        if rangePart == "*" {
            guard let complete = Int64(strictDecimal: lengthPart) else { return nil }
            self = .unsatisfied(completeLength: complete)
            return
        }
        let bounds = rangePart.split(separator: "-", omittingEmptySubsequences: false)
        guard bounds.count == 2,
            let first = Int64(strictDecimal: bounds[0]),
            let last = Int64(strictDecimal: bounds[1]),
            first <= last
        else { return nil }
        let complete: Int64?
        if lengthPart == "*" {
            complete = nil
        } else {
            guard let value = Int64(strictDecimal: lengthPart), last < value else { return nil }
            complete = value
        }
        self = .satisfied(first: first, last: last, completeLength: complete)
    }
}

extension Int64 {
    /// Parses only plain ASCII digits (no sign, no spaces), as HTTP grammar requires.
    init?<S: StringProtocol>(strictDecimal text: S) {
        guard !text.isEmpty, text.utf8.count <= 19, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
            return nil
        }
        self.init(text)
    }
}

extension StringProtocol {
    /// The text without leading and trailing ASCII spaces, tabs, CRs and LFs, found on the UTF-8
    /// bytes (no grapheme breaking: header values and list lines are trimmed often). The bytes
    /// are read in place, so that the search runs specialized even when this generic function
    /// does not (walking a generic UTF-8 view cost 8,700 instructions a list line).
    package func trimmingASCIIWhitespace() -> String {
        if let trimmed = self.utf8.withContiguousStorageIfAvailable(trimmedString(of:)) { return trimmed }
        return trimmedString(of: Array(self.utf8))
    }
}

extension String {
    /// As the `StringProtocol` version, but a string with nothing to trim (the usual case) is
    /// returned as it is, without a copy.
    package func trimmingASCIIWhitespace() -> String {
        let bytes = self.utf8
        guard let first = bytes.first, let last = bytes.last else { return self }
        guard isASCIIWhitespace(first) || isASCIIWhitespace(last) else { return self }
        return self[...].trimmingASCIIWhitespace()
    }
}

/// `bytes` without leading and trailing ASCII whitespace, as a string (header values, list
/// lines).
func trimmedString<Bytes: RandomAccessCollection>(of bytes: Bytes) -> String where Bytes.Element == UInt8 {
    guard let start = bytes.firstIndex(where: { !isASCIIWhitespace($0) }) else { return "" }
    let end = bytes.index(after: bytes.lastIndex(where: { !isASCIIWhitespace($0) })!)
    return String(decoding: bytes[start..<end], as: UTF8.self)
}

/// Space, tab, CR or LF.
@inline(__always)
private func isASCIIWhitespace(_ byte: UInt8) -> Bool {
    byte == 0x20 || byte == 0x09 || byte == 0x0D || byte == 0x0A
}
