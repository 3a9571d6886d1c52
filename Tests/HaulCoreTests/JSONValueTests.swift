import Foundation
import HaulCore
import Testing

/// The JSON reader of the RPC, checked against Foundation's `JSONSerialization` on generated
/// and mutated texts, and on the grammar's corners.
@Suite("JSON reader")
struct JSONValueTests {
    /// `JSONSerialization`'s reading of `bytes` as a JSONValue (objects compared by member set).
    static func foundation(_ bytes: [UInt8]) -> JSONValue? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed]) else { return nil }
        return Self.convert(object)
    }

    static let booleanClass: AnyClass = type(of: NSNumber(value: true))

    static func convert(_ object: Any) -> JSONValue {
        switch object {
        case let text as String: return .string(text)
        case let number as NSNumber:
            if type(of: number) == Self.booleanClass { return .bool(number.boolValue) }
            let type = UInt8(bitPattern: number.objCType.pointee)
            if type == UInt8(ascii: "d") || type == UInt8(ascii: "f") { return .double(number.doubleValue) }
            if type == UInt8(ascii: "Q") { return number.uint64Value <= UInt64(Int64.max) ? .integer(number.int64Value) : .double(number.doubleValue) }
            return .integer(number.int64Value)
        case let array as [Any]: return .array(array.map(Self.convert))
        case let dictionary as [String: Any]: return .object(dictionary.map { ($0.key, Self.convert($0.value)) }.sorted { $0.0 < $1.0 })
        default: return .null
        }
    }

    /// Objects with sorted members and repeated names collapsed to the last: what two readers
    /// must agree on.
    static func normalized(_ value: JSONValue) -> JSONValue {
        switch value {
        case .array(let values): return .array(values.map(Self.normalized))
        case .object(let members):
            var last: [String: JSONValue] = [:]
            for (name, value) in members { last[name] = Self.normalized(value) }
            return .object(last.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
        default: return value
        }
    }

    /// The same value, allowing for Foundation reading large integers as doubles, less
    /// precisely (Haul keeps them exact).
    static func agree(_ a: JSONValue, _ b: JSONValue) -> Bool {
        switch (Self.normalized(a), Self.normalized(b)) {
        case (.integer(let x), .double(let y)), (.double(let y), .integer(let x)):
            return abs(Double(x) - y) <= abs(y) * 1e-12
        case (.double(let x), .double(let y)): return x == y || abs(x - y) <= abs(y) * 1e-12
        case (.array(let x), .array(let y)): return x.count == y.count && zip(x, y).allSatisfy { Self.agree($0, $1) }
        case (.object(let x), .object(let y)): return x.count == y.count && zip(x, y).allSatisfy { $0.0 == $1.0 && Self.agree($0.1, $1.1) }
        case (let x, let y): return x == y
        }
    }

    static func random(_ generator: inout some RandomNumberGenerator, depth: Int = 0) -> String {
        let strings = ["\"\"", "\"a\"", "\"é日本🚀\"", "\"\\n\\t\\\"\\\\\\/\"", "\"\\u00e9\\ud83d\\ude80\"", "\"token:s3cret\"", "\"\\u0000\""]
        let numbers = ["0", "-0", "1", "-7", "123456789", "9223372036854775807", "-9223372036854775808", "1.5", "-2.25e3", "1E2", "0.000001", "6.02e23"]
        switch Int.random(in: 0..<(depth > 4 ? 4 : 7), using: &generator) {
        case 0: return strings.randomElement(using: &generator)!
        case 1: return numbers.randomElement(using: &generator)!
        case 2: return ["true", "false"].randomElement(using: &generator)!
        case 3: return "null"
        case 4, 5:
            let count = Int.random(in: 0...4, using: &generator)
            let members = (0..<count).map { index in
                "\"k\(index % 3)\" : " + Self.random(&generator, depth: depth + 1)
            }
            return "{" + members.joined(separator: ",") + "}"
        default:
            let count = Int.random(in: 0...4, using: &generator)
            return " [ " + (0..<count).map { _ in Self.random(&generator, depth: depth + 1) }.joined(separator: " , ") + " ] "
        }
    }

    @Test("Generated texts read as Foundation reads them")
    func generated() throws {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            let text = Self.random(&generator)
            let ours = try JSONValue(parsing: Array(text.utf8))
            let theirs = try #require(Self.foundation(Array(text.utf8)), "\(text)")
            #expect(Self.agree(ours, theirs), "\(text)")
            // Written back and read again: the same value.
            #expect(try JSONValue(parsing: ours.bytes) == ours, "\(text)")
        }
    }

    @Test("Mutated texts: never a crash; nothing Foundation refuses is accepted, and what both accept reads the same")
    func mutated() {
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("{}[]\",:\\ \t\n-+.0123456789eEtrufalsn\u{7f}".utf8) + [0x00, 0x1F, 0xC3, 0xA9, 0xFF, 0xED, 0xA0]
        var disagreements: [String] = []
        for _ in 0..<5000 {
            var bytes = Array(Self.random(&generator).utf8)
            for _ in 0..<Int.random(in: 1...3, using: &generator) {
                let position = Int.random(in: 0...bytes.count, using: &generator)
                switch Int.random(in: 0..<3, using: &generator) {
                case 0 where position < bytes.count: bytes.remove(at: position)
                case 1 where position < bytes.count: bytes[position] = alphabet.randomElement(using: &generator)!
                default: bytes.insert(alphabet.randomElement(using: &generator)!, at: position)
                }
            }
            let ours = try? JSONValue(parsing: bytes)
            let theirs = Self.foundation(bytes)
            // Foundation is more lenient (a trailing comma, text after a NUL byte, exponents out
            // of range): Haul may refuse what it accepts, never the reverse.
            if ours != nil, theirs == nil {
                disagreements.append("\(String(decoding: bytes, as: UTF8.self)) ours: \(ours.map { "\($0)" } ?? "refused") foundation: \(theirs.map { "\($0)" } ?? "refused")")
            } else if let ours, let theirs, !Self.agree(ours, theirs) {
                disagreements.append("\(String(decoding: bytes, as: UTF8.self)): different values")
            }
        }
        #expect(disagreements.isEmpty, "\(disagreements.prefix(5))")
    }

    @Test("Strings: ASCII, UTF-8 and escapes read as written; any invalid UTF-8 is refused, wherever it is")
    func strings() {
        func reads(_ bytes: [UInt8]) -> JSONValue? { try? JSONValue(parsing: [0x22] + bytes + [0x22]) }
        let quote = UInt8(ascii: "\"")
        // ASCII (DEL included), then the same with a non-ASCII scalar raw, escaped, and both.
        #expect(reads(Array("http://127.0.0.1:8080/a b?c=d&e\u{7F}".utf8)) == .string("http://127.0.0.1:8080/a b?c=d&e\u{7F}"))
        #expect(reads(Array("caf\u{E9} 日本 🚀".utf8)) == .string("caf\u{E9} 日本 🚀"))
        #expect(reads(Array("caf\\u00e9".utf8)) == .string("caf\u{E9}"))
        #expect(reads(Array("a\\/b\\u00e9 日本".utf8)) == .string("a/b\u{E9} 日本"))
        #expect(reads(Array("a\\/b".utf8)) == .string("a/b"))
        #expect(reads([]) == .string(""))
        // Invalid UTF-8: a stray continuation byte, a cut sequence, an overlong encoding, an
        // encoded surrogate, a byte never used, each alone, after ASCII, and after an escape.
        for bad: [UInt8] in [[0x80], [0xC3, 0x28], [0xE6, 0x97], [0xC0, 0xAF], [0xED, 0xA0, 0x80], [0xFF], [0xF4, 0x90, 0x80, 0x80]] {
            #expect(reads(bad) == nil, "\(bad)")
            #expect(reads(Array("abc".utf8) + bad) == nil, "\(bad) after ASCII")
            #expect(reads(Array("a\\n".utf8) + bad + Array("z".utf8)) == nil, "\(bad) after an escape")
            #expect(reads(Array("\\u00e9".utf8) + bad) == nil, "\(bad) after a non-ASCII escape")
        }
        // Each of 2,000 random strings (a mix of ASCII, two-, three- and four-byte scalars and
        // escapes) reads as Foundation reads it.
        var generator = SystemRandomNumberGenerator()
        let pieces: [[UInt8]] = [Array("a".utf8), Array("Z9 /:?".utf8), Array("é".utf8), Array("日".utf8), Array("🚀".utf8), Array("\\n".utf8), Array("\\/".utf8), Array("\\u00e9".utf8), Array("\\ud83d\\ude80".utf8), [0x7F]]
        for _ in 0..<2000 {
            let bytes = (0..<Int.random(in: 0...8, using: &generator)).flatMap { _ in pieces.randomElement(using: &generator)! }
            let ours = reads(bytes)
            #expect(ours != nil && ours == Self.foundation([quote] + bytes + [quote]), "\(String(decoding: bytes, as: UTF8.self))")
        }
    }

    @Test("Objects and arrays hold little room past what they read, however they nest (a request's worth of small objects costs about their size, not a large reserve each)")
    func roomBoundedByWhatCame() throws {
        var random = SystemRandomNumberGenerator()
        func text(depth: Int) -> String {
            let count = Int.random(in: 0...9, using: &random)
            if depth >= 4 || Bool.random(using: &random) {
                return "[" + (0..<count).map { index in depth < 4 && Bool.random(using: &random) ? text(depth: depth + 1) : "\(index)" }.joined(separator: ",") + "]"
            }
            return "{" + (0..<count).map { "\"m\($0)\":" + (Bool.random(using: &random) ? text(depth: depth + 1) : "true") }.joined(separator: ",") + "}"
        }
        /// Every object and array of `value`, checked; how many there were.
        func check(_ value: JSONValue) -> Int {
            switch value {
            case .array(let elements):
                #expect(elements.capacity <= max(4, 2 * elements.count), "\(elements.count) elements, room for \(elements.capacity)")
                return elements.reduce(1) { $0 + check($1) }
            case .object(let members):
                #expect(members.capacity <= max(4, 2 * members.count), "\(members.count) members, room for \(members.capacity)")
                return members.reduce(1) { $0 + check($1.1) }
            default:
                return 0
            }
        }
        var checked = 0
        for _ in 0..<200 {
            let written = text(depth: 0)
            let value = try JSONValue(parsing: Array(written.utf8))
            #expect(value == Self.foundation(Array(written.utf8)), "\(written)")
            checked += check(value)
        }
        #expect(checked > 500)
        // Many small objects in one request, as a batch add's downloads or an RPC multicall.
        let many = "[" + Array(repeating: "{\"a\":1}", count: 20_000).joined(separator: ",") + "]"
        #expect(check(try JSONValue(parsing: Array(many.utf8))) == 20_001)
    }

    @Test("The grammar's corners")
    func corners() throws {
        func reads(_ text: String) -> JSONValue? { try? JSONValue(parsing: Array(text.utf8)) }
        #expect(reads("  7 ") == .integer(7))
        #expect(reads("9223372036854775808") == .double(9_223_372_036_854_775_808))
        #expect(reads("-0") == .integer(0))
        #expect(reads("1e400") == nil && reads("-1e400") == nil, "out of a double's range")
        #expect(reads("1e-400") == .double(0))
        #expect(reads("[1]\u{0}") == nil)
        for bad in ["", " ", "01", "1.", ".5", "+1", "1e", "--1", "tru", "nul", "[1,]", "{\"a\":1,}", "{'a':1}", "[1 2]", "\"a", "\"\\x\"",
                    "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"\u{1}\"", "NaN", "[]]", "{\"a\" 1}", "{1:2}"] {
            #expect(reads(bad) == nil, "\(bad)")
        }
        #expect(reads("\"\\ud83d\\ude80\"") == .string("🚀"))
        #expect(reads("{\"a\":1,\"a\":2}")?["a"] == .integer(2), "the last of repeated members")
        #expect((try? JSONValue(parsing: [0x22, 0xC3, 0x28, 0x22])) == nil, "invalid UTF-8")
        let deep = String(repeating: "[", count: JSONValue.maximumDepth) + String(repeating: "]", count: JSONValue.maximumDepth)
        #expect(reads(deep) != nil)
        #expect(reads("[" + deep + "]") == nil)
        #expect(reads(String(repeating: "{\"a\":", count: 100_000)) == nil)
    }
}
