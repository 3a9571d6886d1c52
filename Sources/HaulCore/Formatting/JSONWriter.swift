import Foundation

/// Appends JSON values to a byte buffer, for answers written once and sent many times
/// (``DownloadRecord``). Produces what `JSONDecoder` reads back to the same values:
/// strings escaped (quote, backslash, control characters; other UTF-8 as is), dates as
/// ISO 8601 in UTC to the second (as `JSONEncoder`'s `.iso8601`), doubles that are not finite
/// as `null`.
public struct JSONWriter: Sendable {
    public var bytes: [UInt8]

    public init(capacity: Int = 256) {
        self.bytes = []
        self.bytes.reserveCapacity(capacity)
    }

    public mutating func append(raw: StaticString) {
        raw.withUTF8Buffer { self.bytes.append(contentsOf: $0) }
    }

    public mutating func append(_ byte: UInt8) {
        self.bytes.append(byte)
    }

    public mutating func append(string: String) {
        self.bytes.append(UInt8(ascii: "\""))
        var string = string
        string.withUTF8 { utf8 in
            // Copy runs of plain bytes at once; escape the few that need it. Eight bytes are
            // looked at a time while none needs it (names, paths, states: a byte at a time was
            // ~620 instructions a member of a subscriber's change).
            let words = UnsafeRawBufferPointer(utf8)
            var runStart = 0
            var index = 0
            while index < utf8.count {
                if utf8.count - index >= 8, !Self.mayNeedEscaping(words.loadUnaligned(fromByteOffset: index, as: UInt64.self)) {
                    index += 8
                    continue
                }
                let end = Swift.min(index + 8, utf8.count)
                while index < end {
                    let byte = utf8[index]
                    index += 1
                    guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                    self.bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<index - 1]))
                    runStart = index
                    self.appendEscaped(byte)
                }
            }
            self.bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<utf8.count]))
        }
        self.bytes.append(UInt8(ascii: "\""))
    }

    private mutating func appendEscaped(_ byte: UInt8) {
        switch byte {
        case UInt8(ascii: "\""): self.append(raw: "\\\"")
        case UInt8(ascii: "\\"): self.append(raw: "\\\\")
        case UInt8(ascii: "\n"): self.append(raw: "\\n")
        case UInt8(ascii: "\r"): self.append(raw: "\\r")
        case UInt8(ascii: "\t"): self.append(raw: "\\t")
        default:
            self.append(raw: "\\u00")
            self.bytes.append(Self.hexDigit(byte >> 4))
            self.bytes.append(Self.hexDigit(byte & 0xF))
        }
    }

    /// Whether one of the eight bytes of `word` may be a control character, a quote or a
    /// backslash (never `false` when one is): the tests for a byte below 0x20 and for a zero
    /// byte after an exclusive or of "Bit Twiddling Hacks", which are exact for "any".
    static func mayNeedEscaping(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        let control = (word &- ones &* 0x20) & ~word & highs
        let quotes = word ^ (ones &* UInt64(UInt8(ascii: "\"")))
        let backslashes = word ^ (ones &* UInt64(UInt8(ascii: "\\")))
        let quote = (quotes &- ones) & ~quotes & highs
        let backslash = (backslashes &- ones) & ~backslashes & highs
        return control | quote | backslash != 0
    }

    /// Its decimal digits. Written here, not by `String(integer)`: that generic conversion,
    /// then appending the string's UTF-8 view, cost ~730 instructions a number (a record has
    /// three or more).
    public mutating func append<Integer: BinaryInteger>(integer: Integer) {
        guard let value = Int64(exactly: integer) else { return self.bytes.append(contentsOf: String(integer).utf8) }
        if value < 0 { self.bytes.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        // 2^63 has 19 digits.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var start = digits.count
            repeat {
                start -= 1
                digits[start] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: magnitude % 10)
                magnitude /= 10
            } while magnitude != 0
            self.bytes.append(contentsOf: UnsafeBufferPointer(rebasing: digits[start...]))
        }
    }

    /// `text`'s UTF-8 bytes as they are (a member's name; nothing escaped), copied at once.
    public mutating func append(verbatim text: String) {
        var text = text
        text.withUTF8 { self.bytes.append(contentsOf: $0) }
    }

    public mutating func append(double: Double) {
        guard double.isFinite else { return self.append(raw: "null") }
        self.append(verbatim: double.description)
    }

    public mutating func append(bool: Bool) {
        self.append(raw: bool ? "true" : "false")
    }

    /// `["a","b"]`.
    public mutating func append(strings: some Sequence<String>) {
        self.bytes.append(UInt8(ascii: "["))
        for (index, string) in strings.enumerated() {
            if index > 0 { self.bytes.append(UInt8(ascii: ",")) }
            self.append(string: string)
        }
        self.bytes.append(UInt8(ascii: "]"))
    }

    /// `{"a":"1","b":"2"}`, names in sorted order (the same bytes for the same dictionary).
    public mutating func append(stringObject: [String: String]) {
        self.bytes.append(UInt8(ascii: "{"))
        for (index, name) in stringObject.keys.sorted().enumerated() {
            if index > 0 { self.bytes.append(UInt8(ascii: ",")) }
            self.append(string: name)
            self.bytes.append(UInt8(ascii: ":"))
            self.append(string: stringObject[name]!)
        }
        self.bytes.append(UInt8(ascii: "}"))
    }

    /// `"2026-11-23T10:15:00Z"`.
    public mutating func append(date: Date) {
        self.bytes.append(UInt8(ascii: "\""))
        UTCTimestamp(date, wholeSeconds: true).write(to: &self.bytes, separator: UInt8(ascii: "T"), milliseconds: false)
        self.append(raw: "Z\"")
    }

    /// `object` (a JSON object's bytes) with `"name":raw` as its first member; `raw` is copied
    /// as is.
    public static func inserting(member name: String, raw: [UInt8], into object: [UInt8]) -> [UInt8] {
        precondition(object.first == UInt8(ascii: "{") && object.last == UInt8(ascii: "}"), "not a JSON object")
        var writer = JSONWriter(capacity: object.count + raw.count + name.utf8.count + 4)
        writer.append(UInt8(ascii: "{"))
        writer.append(string: name)
        writer.append(UInt8(ascii: ":"))
        writer.bytes.append(contentsOf: raw)
        if object.count > 2 { writer.append(UInt8(ascii: ",")) }
        writer.bytes.append(contentsOf: object[1...])
        return writer.bytes
    }

    private static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
    }
}
