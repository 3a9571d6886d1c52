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

    /// Creates a header list from fields, keeping their order (no list of pairs made first).
    public init(fields: [Field]) {
        self.fields = fields
    }

    /// The first value of the field named `name` (case-insensitive), or `nil`.
    public subscript(name: String) -> String? {
        self.firstIndex(named: name, from: 0).map { self.fields[$0].value }
    }

    /// All values of the field named `name` (case-insensitive), in order.
    public func values(for name: String) -> [String] {
        self.fields.filter { $0.name.caseInsensitiveEquals(name) }.map(\.value)
    }

    /// Whether a field named `name` (case-insensitive) has a value satisfying `predicate`.
    public func contains(_ name: String, where predicate: (String) throws -> Bool) rethrows -> Bool {
        var start = 0
        while let index = self.firstIndex(named: name, from: start) {
            if try predicate(self.fields[index].value) { return true }
            start = index + 1
        }
        return false
    }

    /// The index of the first field from `start` on named `name`, ignoring ASCII case.
    ///
    /// Compares lengths first (most fields differ there) and bytes only on a match.
    /// Reads the names in place: an element taken out of the array is a copy of both strings
    /// (a retain and a release of each value longer than 15 bytes, for every field passed).
    private func firstIndex(named name: String, from start: Int) -> Int? {
        let length = name.utf8.count
        return self.fields.withUnsafeBufferPointer { fields -> Int? in
            var index = start
            while index < fields.count {
                if fields[index].name.utf8.count == length, fields[index].name.caseInsensitiveEquals(name) { return index }
                index += 1
            }
            return nil
        }
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
    /// only, RFC 9110 §5.1). Compares bytes in place: header lookups run a dozen times per
    /// response. Lowercasing both sides allocated two strings each time; walking the UTF-8
    /// views with iterators cost ~90 instructions per field, the contiguous bytes ~35.
    @inlinable
    package func caseInsensitiveEquals(_ other: String) -> Bool {
        guard self.utf8.count == other.utf8.count else { return false }
        if let equal = self.utf8.withContiguousStorageIfAvailable({ mine in
            other.utf8.withContiguousStorageIfAvailable { theirs in Self.asciiCaseInsensitiveEqual(mine, theirs) }
        }), let equal {
            return equal
        }
        return Self.asciiCaseInsensitiveEqual(self.utf8, other.utf8)
    }

    @inlinable
    static func asciiCaseInsensitiveEqual<Bytes: Collection<UInt8>>(_ mine: Bytes, _ theirs: Bytes) -> Bool {
        guard mine.count == theirs.count else { return false }
        for (byte, otherByte) in zip(mine, theirs) where byte != otherByte {
            let folded = byte | 0x20
            guard folded == otherByte | 0x20, folded >= UInt8(ascii: "a"), folded <= UInt8(ascii: "z") else { return false }
        }
        return true
    }
}
