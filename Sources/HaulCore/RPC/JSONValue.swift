/// Any JSON value, for protocols whose parameters are not one fixed shape (aria2's JSON-RPC:
/// positional parameters of mixed types, options objects, batches).
///
/// Reading goes through `JSONDecoder` (which refuses input nested deeper than it supports
/// rather than exhausting the stack); writing goes through ``JSONWriter``. ``raw(_:)`` carries
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

    /// The member `name` of an object (the first, if repeated).
    public subscript(name: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.0 == name }?.1
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

extension JSONValue: Decodable {
    private struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    public init(from decoder: any Decoder) throws {
        if var array = try? decoder.unkeyedContainer() {
            var values: [JSONValue] = []
            if let count = array.count { values.reserveCapacity(count) }
            while !array.isAtEnd { values.append(try array.decode(JSONValue.self)) }
            self = .array(values)
            return
        }
        if let object = try? decoder.container(keyedBy: Key.self) {
            // `allKeys` has no order guarantee; aria2's objects (options, multicall entries)
            // are looked up by name, so order only matters for what Haul writes itself.
            var members: [(String, JSONValue)] = []
            for key in object.allKeys { members.append((key.stringValue, try object.decode(JSONValue.self, forKey: key))) }
            self = .object(members)
            return
        }
        let single = try decoder.singleValueContainer()
        if single.decodeNil() {
            self = .null
        } else if let value = try? single.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? single.decode(Int64.self) {
            self = .integer(value)
        } else if let value = try? single.decode(Double.self) {
            self = .double(value)
        } else {
            self = .string(try single.decode(String.self))
        }
    }
}
