/// An ordered list of HTTP header fields with case-insensitive lookup.
///
/// HaulCore keeps its own small header type so that the pure core does not depend on SwiftNIO;
/// the engine converts at the edge.
public struct HTTPHeaderFields: Sendable, Hashable, Codable {
    /// One header field as it appeared on the wire.
    public struct Field: Sendable, Hashable, Codable {
        public var name: String
        public var value: String

        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    /// The fields in wire order.
    public private(set) var fields: [Field]

    /// Creates a header list from name/value pairs, keeping their order.
    public init(_ pairs: [(String, String)] = []) {
        self.fields = pairs.map { Field(name: $0.0, value: $0.1) }
    }

    /// The first value of the field named `name` (case-insensitive), or `nil`.
    public subscript(name: String) -> String? {
        self.fields.first { $0.name.caseInsensitiveEquals(name) }?.value
    }

    /// All values of the field named `name` (case-insensitive), in order.
    public func values(for name: String) -> [String] {
        self.fields.filter { $0.name.caseInsensitiveEquals(name) }.map(\.value)
    }

    /// Appends a field, keeping any existing fields of the same name.
    public mutating func add(name: String, value: String) {
        self.fields.append(Field(name: name, value: value))
    }

    /// Replaces every field named `name` with one field holding `value`.
    public mutating func replaceOrAdd(name: String, value: String) {
        self.remove(name: name)
        self.add(name: name, value: value)
    }

    /// Removes every field named `name`.
    public mutating func remove(name: String) {
        self.fields.removeAll { $0.name.caseInsensitiveEquals(name) }
    }

    /// Whether a field named `name` is present.
    public func contains(_ name: String) -> Bool {
        self[name] != nil
    }
}

extension String {
    /// Whether two field names are equal ignoring ASCII case (field names are tokens: ASCII
    /// only, RFC 9110 §5.1). Compares bytes in place: header lookups run several times per
    /// response, and lowercasing both sides allocated two strings each time.
    @inlinable
    func caseInsensitiveEquals(_ other: String) -> Bool {
        guard self.utf8.count == other.utf8.count else { return false }
        var others = other.utf8.makeIterator()
        for byte in self.utf8 {
            guard let otherByte = others.next() else { return false }
            if byte == otherByte { continue }
            let folded = byte | 0x20
            guard folded == otherByte | 0x20, folded >= UInt8(ascii: "a"), folded <= UInt8(ascii: "z") else { return false }
        }
        return true
    }
}
