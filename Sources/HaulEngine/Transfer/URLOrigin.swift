import Foundation
import Synchronization

/// A URL's scheme, host and port, read from it once.
///
/// Foundation's `URL` parses its string again on every getter: `host` costs ~1,100
/// instructions, `port` ~470, `scheme` ~420. A download of a small file asked for them a dozen
/// times (the per-host limit's key, whether a direct connection carries it, the connection
/// pool's key and `Host` header): about 8,000 instructions per file, 4 % of all its work.
/// ``TransferRequest`` keeps one for its URL.
package struct URLOrigin: Sendable, Hashable {
    /// The scheme as written (`nil`: none).
    package let scheme: String?
    /// The host, without brackets around an IPv6 address (`nil`: none).
    package let host: String?
    /// The port the URL names (`nil`: none, the scheme's default applies).
    package let explicitPort: Int?

    package init(_ url: URL) {
        self.scheme = url.scheme
        self.host = url.host
        self.explicitPort = url.port
    }

    /// The port connected to: the named one, else 443 for `https` and 80 otherwise.
    package var port: Int {
        self.explicitPort ?? (self.scheme == "https" ? 443 : 80)
    }

    /// Whether the scheme is `name` (lowercase ASCII), in any case.
    package func hasScheme(_ name: String) -> Bool {
        guard let scheme, scheme.utf8.count == name.utf8.count else { return false }
        return scheme == name || scheme.lowercased() == name
    }

    /// `scheme://host:port`: what per-host connection limits count by.
    package var hostKey: String {
        "\(self.scheme ?? "http")://\(self.host ?? ""):\(self.port)"
    }

    /// The ``hostKey`` of `url`, remembered by the part of its string up to the end of the
    /// authority (`scheme://user@host:port`): what the scheme, the host and the port are read
    /// from, so one such part always gives one key. A queue's add asked for the key of every
    /// download it adds: parsing the URL and putting the key together was ~4,000 instructions
    /// each, and most of a list's URLs share their host. A URL without `//` is not remembered.
    package static func hostKey(of url: URL) -> String {
        let string = url.absoluteString
        let authority = string.utf8.withContiguousStorageIfAvailable { bytes in
            Self.authorityLength(of: bytes).map { String(decoding: UnsafeBufferPointer(rebasing: bytes[..<$0]), as: UTF8.self) }
        }
        guard let authority = authority ?? nil else { return URLOrigin(url).hostKey }
        if let known = Self.recentKeys.withLock({ $0[authority] }) { return known }
        let key = URLOrigin(url).hostKey
        Self.recentKeys.withLock { keys in
            if keys.count >= Self.recentKeysLimit { keys.removeAll(keepingCapacity: true) }
            keys[authority] = key
        }
        return key
    }

    /// How many bytes of `bytes` (a URL) go up to the end of its authority (the first `/`, `?`
    /// or `#` after `://`, or the end); `nil` when it has no `://` after its scheme.
    static func authorityLength(of bytes: UnsafeBufferPointer<UInt8>) -> Int? {
        var index = 0
        // The scheme: letters, digits, `+`, `-`, `.`, then `://`.
        while index < bytes.count, bytes[index] != UInt8(ascii: ":") {
            let byte = bytes[index]
            let letter = byte | 0x20
            guard (letter >= UInt8(ascii: "a") && letter <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
                || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".")
            else { return nil }
            index += 1
        }
        guard index > 0, index + 3 <= bytes.count, bytes[index + 1] == UInt8(ascii: "/"), bytes[index + 2] == UInt8(ascii: "/") else { return nil }
        index += 3
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "/") || byte == UInt8(ascii: "?") || byte == UInt8(ascii: "#") { break }
            index += 1
        }
        return index
    }

    /// The authority of `string` (a URL) as ``hostKey(of:)`` remembers keys by (for tests).
    static func authority(of string: String) -> String? {
        var string = string
        return string.withUTF8 { bytes in Self.authorityLength(of: bytes).map { String(decoding: UnsafeBufferPointer(rebasing: bytes[..<$0]), as: UTF8.self) } }
    }

    /// Keys remembered by ``hostKey(of:)``; forgotten all at once when there are this many.
    private static let recentKeysLimit = 64
    private static let recentKeys = Mutex<[String: String]>([:])
}
