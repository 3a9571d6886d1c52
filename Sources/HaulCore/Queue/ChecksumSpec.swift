import Foundation

/// An expected checksum such as `sha256=9f86d0…`: the algorithm and the digest in hex.
public struct ChecksumSpec: Codable, Sendable, Hashable, CustomStringConvertible {
    public enum Algorithm: String, Codable, Sendable, Hashable, CaseIterable {
        case sha256, sha1, md5

        /// Digest length in bytes.
        public var digestLength: Int {
            switch self {
            case .sha256: 32
            case .sha1: 20
            case .md5: 16
            }
        }
    }

    public enum ParseError: Error, Sendable, Hashable, CustomStringConvertible {
        case missingSeparator
        case unknownAlgorithm(String)
        case badDigest(algorithm: Algorithm, length: Int)

        public var description: String {
            switch self {
            case .missingSeparator:
                "a checksum is written TYPE=HEX, e.g. sha256=9f86d081…"
            case .unknownAlgorithm(let name):
                "unknown checksum type '\(name)' (use sha256, sha1 or md5)"
            case .badDigest(let algorithm, let length):
                "a \(algorithm.rawValue) checksum has \(algorithm.digestLength * 2) hex digits, not \(length) (or has non-hex characters)"
            }
        }
    }

    public var algorithm: Algorithm
    /// Lowercase hex.
    public var hexDigest: String

    public init(algorithm: Algorithm, hexDigest: String) {
        self.algorithm = algorithm
        self.hexDigest = hexDigest.lowercased()
    }

    /// Parses `TYPE=HEX` (`sha-256` and upper case accepted, as aria2's `--checksum` does).
    public init(parsing text: String) throws(ParseError) {
        guard let separator = text.firstIndex(of: "=") else { throw .missingSeparator }
        let name = text[..<separator].lowercased().replacingOccurrences(of: "-", with: "")
        let hex = String(text[text.index(after: separator)...]).trimmingASCIIWhitespace().lowercased()
        guard let algorithm = Algorithm(rawValue: name) else { throw .unknownAlgorithm(String(text[..<separator])) }
        guard hex.count == algorithm.digestLength * 2, hex.allSatisfy(\.isHexDigit) else {
            throw .badDigest(algorithm: algorithm, length: hex.count)
        }
        self.init(algorithm: algorithm, hexDigest: hex)
    }

    public var description: String { "\(self.algorithm.rawValue)=\(self.hexDigest)" }
}
