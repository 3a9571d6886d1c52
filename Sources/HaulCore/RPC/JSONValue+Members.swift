import Foundation

/// Members of an object read exactly as `JSONDecoder` reads them into an optional property of a
/// `Codable` type (`null` is `nil`), for the readers that stand in for it on long lines
/// (``DaemonRequest/batchAdd(line:)``, ``DaemonServerLine/downloadList(line:)``). Each answers
/// `false` for a value `JSONDecoder` might read otherwise, so that the caller leaves the whole
/// line to it.
extension JSONValue {
    /// A string (or `null`).
    func read(into field: inout String?) -> Bool {
        switch self {
        case .null: field = nil
        case .string(let text): field = text
        default: return false
        }
        return true
    }

    /// `true` or `false` (or `null`).
    func read(into field: inout Bool?) -> Bool {
        switch self {
        case .null: field = nil
        case .bool(let flag): field = flag
        default: return false
        }
        return true
    }

    /// A whole number that fits `Number` (or `null`).
    func read<Number: FixedWidthInteger>(into field: inout Number?) -> Bool {
        switch self {
        case .null: field = nil
        case .integer(let number):
            guard let exact = Number(exactly: number) else { return false }
            field = exact
        default: return false
        }
        return true
    }

    /// A number (or `null`); a whole one is read as `JSONDecoder` reads it into a `Double`.
    func read(into field: inout Double?) -> Bool {
        switch self {
        case .null: field = nil
        case .double(let number): field = number
        case .integer(let number): field = Double(number)
        default: return false
        }
        return true
    }

    /// An array of strings (or `null`).
    func read(into field: inout [String]?) -> Bool {
        switch self {
        case .null: field = nil
        case .array(let values):
            var strings: [String] = []
            strings.reserveCapacity(values.count)
            for value in values {
                guard let text = value.stringValue else { return false }
                strings.append(text)
            }
            field = strings
        default: return false
        }
        return true
    }

    /// An object of strings, no name twice (or `null`).
    func read(into field: inout [String: String]?) -> Bool {
        switch self {
        case .null: field = nil
        case .object(let members):
            guard members.hasUniqueMemberNames else { return false }
            var strings: [String: String] = [:]
            for (name, value) in members {
                guard let text = value.stringValue else { return false }
                strings[name] = text
            }
            field = strings
        default: return false
        }
        return true
    }

    /// URLs (not `null`), each as `JSONDecoder` reads one: a string `URL(string:)` takes.
    var urls: [URL]? {
        guard let values = self.arrayValue else { return nil }
        var urls: [URL] = []
        urls.reserveCapacity(values.count)
        for value in values {
            guard let text = value.stringValue, let url = URL(string: text) else { return nil }
            urls.append(url)
        }
        return urls
    }
}

extension Array where Element == (String, JSONValue) {
    /// No member named twice (what `JSONDecoder` does then is its own affair).
    var hasUniqueMemberNames: Bool {
        guard self.count > 1 else { return true }
        if self.count <= 32 {
            for index in self.indices.dropFirst() where self[..<index].contains(where: { $0.0 == self[index].0 }) { return false }
            return true
        }
        var seen = Set<String>(minimumCapacity: self.count)
        return self.allSatisfy { seen.insert($0.0).inserted }
    }
}
