import Foundation

/// Any JSON value, for protocols whose parameters are not one fixed shape (aria2's JSON-RPC:
/// positional parameters of mixed types, options objects, batches).
///
/// Read by ``init(parsing:)``; written through ``JSONWriter``. ``raw(_:)`` carries
/// bytes that are already JSON (a download's status written once), copied as they are.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    /// Integers that fit, kept exact.
    case integer(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    /// Members in the order given (JSON objects are written in this order).
    case object([(String, JSONValue)])
    /// Bytes that are already one JSON value.
    case raw([UInt8])

    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): true
        case (.bool(let a), .bool(let b)): a == b
        case (.integer(let a), .integer(let b)): a == b
        case (.double(let a), .double(let b)): a == b
        case (.string(let a), .string(let b)): a == b
        case (.array(let a), .array(let b)): a == b
        case (.object(let a), .object(let b)): a.count == b.count && zip(a, b).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        case (.raw(let a), .raw(let b)): a == b
        default: false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0)
        case .bool(let value): hasher.combine(value)
        case .integer(let value): hasher.combine(value)
        case .double(let value): hasher.combine(value)
        case .string(let value): hasher.combine(value)
        case .array(let values): hasher.combine(values)
        case .object(let members):
            for (name, value) in members {
                hasher.combine(name)
                hasher.combine(value)
            }
        case .raw(let bytes): hasher.combine(bytes)
        }
    }

    // MARK: - Reading members

    /// The member `name` of an object (the last, if repeated).
    public subscript(name: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.last { $0.0 == name }?.1
    }

    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    public var arrayValue: [JSONValue]? {
        if case .array(let values) = self { return values }
        return nil
    }

    public var objectValue: [(String, JSONValue)]? {
        if case .object(let members) = self { return members }
        return nil
    }

    /// An integer, also from a whole double (`1.0`) — not from a string.
    public var integerValue: Int64? {
        switch self {
        case .integer(let value): value
        case .double(let value) where value.rounded() == value && abs(value) < 9e18: Int64(value)
        default: nil
        }
    }

    // MARK: - Writing

    /// The value as JSON bytes.
    public var bytes: [UInt8] {
        var writer = JSONWriter(capacity: 128)
        self.write(to: &writer)
        return writer.bytes
    }

    public func write(to writer: inout JSONWriter) {
        switch self {
        case .null: writer.append(raw: "null")
        case .bool(let value): writer.append(bool: value)
        case .integer(let value): writer.append(integer: value)
        case .double(let value): writer.append(double: value)
        case .string(let value): writer.append(string: value)
        case .array(let values):
            writer.append(UInt8(ascii: "["))
            for (index, value) in values.enumerated() {
                if index > 0 { writer.append(UInt8(ascii: ",")) }
                value.write(to: &writer)
            }
            writer.append(UInt8(ascii: "]"))
        case .object(let members):
            writer.append(UInt8(ascii: "{"))
            for (index, (name, value)) in members.enumerated() {
                if index > 0 { writer.append(UInt8(ascii: ",")) }
                writer.append(string: name)
                writer.append(UInt8(ascii: ":"))
                value.write(to: &writer)
            }
            writer.append(UInt8(ascii: "}"))
        case .raw(let bytes): writer.bytes.append(contentsOf: bytes)
        }
    }
}

extension JSONValue {
    /// The deepest nesting read (as Foundation's parsers): deeper input is an error, never a
    /// stack overflow.
    public static let maximumDepth = 512

    /// Why a text is not JSON, and where.
    public struct ParseError: Error, Sendable, Hashable, CustomStringConvertible {
        public var offset: Int
        public var reason: String

        public var description: String { "not JSON at byte \(self.offset): \(self.reason)" }
    }

    /// Reads one JSON text (RFC 8259; a bare value is fine, surrounding whitespace too).
    ///
    /// A strict recursive-descent reader: valid UTF-8 only, no control characters in strings,
    /// escapes including surrogate pairs, numbers by the grammar (integers that fit in 64 bits
    /// stay exact), nesting at most ``maximumDepth``. Repeated object members are all kept;
    /// ``subscript(_:)`` answers the last, as most readers do. Hand-written because the
    /// `Codable` path and `JSONSerialization`'s `Any` trees cost several times the work for
    /// the RPC's mixed-type parameters (profiled: 40 % of adding 10,000 downloads).
    ///
    /// Contiguous bytes (`ByteBufferView`, `Data`, arrays) are read in place; others are copied
    /// into an array first.
    public init(parsing bytes: some Collection<UInt8>) throws(ParseError) {
        let parse = { (buffer: UnsafeBufferPointer<UInt8>) -> Result<JSONValue, ParseError> in
            var reader = JSONReader(bytes: buffer)
            do throws(JSONValue.ParseError) {
                reader.skipWhitespace()
                let value = try reader.value(depth: 0)
                reader.skipWhitespace()
                guard reader.position == buffer.count else { throw reader.error("trailing characters") }
                return .success(value)
            } catch {
                return .failure(error)
            }
        }
        let result = bytes.withContiguousStorageIfAvailable(parse) ?? Array(bytes).withUnsafeBufferPointer(parse)
        self = try result.get()
    }
}

/// The reader behind ``JSONValue/init(parsing:)``.
private struct JSONReader {
    let bytes: UnsafeBufferPointer<UInt8>
    var position = 0

    init(bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
    }

    func error(_ reason: String) -> JSONValue.ParseError {
        JSONValue.ParseError(offset: self.position, reason: reason)
    }

    mutating func skipWhitespace() {
        while self.position < self.bytes.count {
            switch self.bytes[self.position] {
            case 0x20, 0x09, 0x0A, 0x0D: self.position += 1
            default: return
            }
        }
    }

    mutating func value(depth: Int) throws(JSONValue.ParseError) -> JSONValue {
        guard self.position < self.bytes.count else { throw self.error("unexpected end") }
        switch self.bytes[self.position] {
        case UInt8(ascii: "{"): return try self.object(depth: depth + 1)
        case UInt8(ascii: "["): return try self.array(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try self.string())
        case UInt8(ascii: "t"): try self.literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try self.literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try self.literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try self.number()
        default: throw self.error("unexpected character")
        }
    }

    mutating func literal(_ word: StaticString) throws(JSONValue.ParseError) {
        let count = word.utf8CodeUnitCount
        guard self.position + count <= self.bytes.count else { throw self.error("unexpected end") }
        for index in 0..<count where self.bytes[self.position + index] != word.utf8Start[index] {
            throw self.error("unknown literal")
        }
        self.position += count
    }

    /// Room made for an object's members before the first is read. Grown from empty, an object
    /// of a few members was three or four allocations and copies, and an event line of the queue
    /// holds three (1, 3 and 4 members with `haul wait`'s fields); a whole record (~20) grows
    /// from here. Small, because a request of one-member objects is made of this room: an RPC
    /// body of 2 MiB of `{"a":1},` raised hauld's peak RSS by 118 MB with 4 slots as with none
    /// reserved, by 131 MB with 8 (the rest is the batch's 262,000 answers).
    static let membersReserved = 4

    mutating func object(depth: Int) throws(JSONValue.ParseError) -> JSONValue {
        guard depth <= JSONValue.maximumDepth else { throw self.error("nested too deeply") }
        self.position += 1
        var members: [(String, JSONValue)] = []
        self.skipWhitespace()
        if self.position < self.bytes.count, self.bytes[self.position] != UInt8(ascii: "}") {
            members.reserveCapacity(Self.membersReserved)
        }
        if self.position < self.bytes.count, self.bytes[self.position] == UInt8(ascii: "}") {
            self.position += 1
            return .object(members)
        }
        while true {
            self.skipWhitespace()
            guard self.position < self.bytes.count, self.bytes[self.position] == UInt8(ascii: "\"") else {
                throw self.error("expected a member name")
            }
            let name = try self.string()
            self.skipWhitespace()
            guard self.position < self.bytes.count, self.bytes[self.position] == UInt8(ascii: ":") else { throw self.error("expected ':'") }
            self.position += 1
            self.skipWhitespace()
            members.append((name, try self.value(depth: depth)))
            self.skipWhitespace()
            guard self.position < self.bytes.count else { throw self.error("unexpected end") }
            switch self.bytes[self.position] {
            case UInt8(ascii: ","): self.position += 1
            case UInt8(ascii: "}"):
                self.position += 1
                return .object(members)
            default: throw self.error("expected ',' or '}'")
            }
        }
    }

    mutating func array(depth: Int) throws(JSONValue.ParseError) -> JSONValue {
        guard depth <= JSONValue.maximumDepth else { throw self.error("nested too deeply") }
        self.position += 1
        var values: [JSONValue] = []
        self.skipWhitespace()
        if self.position < self.bytes.count, self.bytes[self.position] == UInt8(ascii: "]") {
            self.position += 1
            return .array(values)
        }
        while true {
            self.skipWhitespace()
            values.append(try self.value(depth: depth))
            self.skipWhitespace()
            guard self.position < self.bytes.count else { throw self.error("unexpected end") }
            switch self.bytes[self.position] {
            case UInt8(ascii: ","): self.position += 1
            case UInt8(ascii: "]"):
                self.position += 1
                return .array(values)
            default: throw self.error("expected ',' or ']'")
            }
        }
    }

    /// A string at the opening quote; plain runs are copied at once, escapes decoded.
    mutating func string() throws(JSONValue.ParseError) -> String {
        self.position += 1
        var decoded: [UInt8] = []
        var runStart = self.position
        // Every byte of the string OR-ed together: below 0x80, it is ASCII, valid UTF-8 as it
        // stands, and made into a String without the generic validating path (which asks the
        // runtime for its types' metadata on every call: ~4 K instructions a string, most of
        // what reading a batch add's URL cost).
        var allBits: UInt8 = 0
        while true {
            guard self.position < self.bytes.count else { throw self.error("unterminated string") }
            let byte = self.bytes[self.position]
            if byte == UInt8(ascii: "\"") {
                let text: String?
                if decoded.isEmpty {
                    let run = UnsafeBufferPointer(rebasing: self.bytes[runStart..<self.position])
                    text = allBits < 0x80 ? String(decoding: run, as: UTF8.self) : String(validating: run, as: UTF8.self)
                } else {
                    decoded.append(contentsOf: UnsafeBufferPointer(rebasing: self.bytes[runStart..<self.position]))
                    text = allBits < 0x80 ? String(decoding: decoded, as: UTF8.self) : String(validating: decoded, as: UTF8.self)
                }
                guard let text else { throw self.error("invalid UTF-8 in a string") }
                self.position += 1
                return text
            }
            allBits |= byte
            if byte < 0x20 { throw self.error("control character in a string") }
            if byte != UInt8(ascii: "\\") {
                self.position += 1
                continue
            }
            decoded.append(contentsOf: UnsafeBufferPointer(rebasing: self.bytes[runStart..<self.position]))
            self.position += 1
            guard self.position < self.bytes.count else { throw self.error("unterminated escape") }
            let escape = self.bytes[self.position]
            self.position += 1
            switch escape {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): decoded.append(escape)
            case UInt8(ascii: "b"): decoded.append(0x08)
            case UInt8(ascii: "f"): decoded.append(0x0C)
            case UInt8(ascii: "n"): decoded.append(0x0A)
            case UInt8(ascii: "r"): decoded.append(0x0D)
            case UInt8(ascii: "t"): decoded.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try self.hex4()
                if (0xD800..<0xDC00).contains(scalar) {
                    guard self.position + 1 < self.bytes.count, self.bytes[self.position] == UInt8(ascii: "\\"),
                        self.bytes[self.position + 1] == UInt8(ascii: "u")
                    else { throw self.error("lone surrogate") }
                    self.position += 2
                    let low = try self.hex4()
                    guard (0xDC00..<0xE000).contains(low) else { throw self.error("lone surrogate") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if (0xDC00..<0xE000).contains(scalar) {
                    throw self.error("lone surrogate")
                }
                decoded.append(contentsOf: String(Character(Unicode.Scalar(scalar)!)).utf8)
            default: throw self.error("unknown escape")
            }
            runStart = self.position
        }
    }

    mutating func hex4() throws(JSONValue.ParseError) -> UInt32 {
        guard self.position + 4 <= self.bytes.count else { throw self.error("short \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = self.bytes[self.position]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw self.error("bad \\u escape")
            }
            value = value << 4 | UInt32(digit)
            self.position += 1
        }
        return value
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`: an integer when it has no
    /// fraction or exponent and fits, else a double.
    mutating func number() throws(JSONValue.ParseError) -> JSONValue {
        let start = self.position
        func digits() -> Int {
            let first = self.position
            while self.position < self.bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self.bytes[self.position]) {
                self.position += 1
            }
            return self.position - first
        }
        if self.bytes[self.position] == UInt8(ascii: "-") { self.position += 1 }
        guard self.position < self.bytes.count else { throw self.error("bad number") }
        if self.bytes[self.position] == UInt8(ascii: "0") {
            self.position += 1
        } else if digits() == 0 {
            throw self.error("bad number")
        }
        var isInteger = true
        if self.position < self.bytes.count, self.bytes[self.position] == UInt8(ascii: ".") {
            self.position += 1
            guard digits() > 0 else { throw self.error("bad number") }
            isInteger = false
        }
        if self.position < self.bytes.count, self.bytes[self.position] | 0x20 == UInt8(ascii: "e") {
            self.position += 1
            if self.position < self.bytes.count, self.bytes[self.position] == UInt8(ascii: "+") || self.bytes[self.position] == UInt8(ascii: "-") {
                self.position += 1
            }
            guard digits() > 0 else { throw self.error("bad number") }
            isInteger = false
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: self.bytes[start..<self.position]), as: UTF8.self)
        if isInteger, let integer = Int64(text) { return .integer(integer) }
        guard let double = Double(text), double.isFinite else { throw self.error("number out of range") }
        return .double(double)
    }
}
