import Foundation

extension URL {
    /// Whether this is an absolute `http` or `https` URL with a host: what a download, a queue
    /// entry or an RPC URI must be.
    public var isHTTPWithHost: Bool {
        if let answer = Self.httpHost(in: self.absoluteString) { return answer }
        guard let scheme = self.scheme?.lowercased(), scheme == "http" || scheme == "https" else { return false }
        return self.host?.isEmpty == false
    }

    /// `text` as an absolute `http` or `https` URL with a host, else `nil`.
    public static func http(_ text: String) -> URL? {
        guard let url = URL(string: text) else { return nil }
        if let answer = Self.httpHost(in: text) { return answer ? url : nil }
        return url.isHTTPWithHost ? url : nil
    }

    /// Whether `text` (a URL that parsed) is `http` or `https` with a host, read from its bytes:
    /// `nil` where that takes the URL's own parts (user information, an IPv6 literal, a port with
    /// no host name before it). `scheme`, `lowercased()` and `host` (which undoes percent
    /// encoding) took ~1.8 K instructions a URL, for every URL of a list, in `haul add` and in
    /// hauld alike.
    static func httpHost(in text: String) -> Bool? {
        var text = text
        return text.withUTF8 { bytes -> Bool? in
            // "http" or "https", any case, then "://".
            func lower(_ byte: UInt8) -> UInt8 { byte | 0x20 }
            guard bytes.count > 7, lower(bytes[0]) == UInt8(ascii: "h"), lower(bytes[1]) == UInt8(ascii: "t"),
                lower(bytes[2]) == UInt8(ascii: "t"), lower(bytes[3]) == UInt8(ascii: "p")
            else { return bytes.count >= 4 && lower(bytes[0]) == UInt8(ascii: "h") ? nil : false }
            var index = 4
            if lower(bytes[index]) == UInt8(ascii: "s") { index += 1 }
            guard index + 3 <= bytes.count, bytes[index] == UInt8(ascii: ":") else { return nil }
            guard bytes[index + 1] == UInt8(ascii: "/"), bytes[index + 2] == UInt8(ascii: "/") else { return nil }
            index += 3
            // The authority up to its end; a host name is its first byte unless that ends it.
            guard index < bytes.count else { return nil }
            var end = index
            while end < bytes.count {
                switch bytes[end] {
                case UInt8(ascii: "/"), UInt8(ascii: "?"), UInt8(ascii: "#"): break
                case UInt8(ascii: "@"), UInt8(ascii: "["), UInt8(ascii: "%"): return nil
                default: end += 1; continue
                }
                break
            }
            guard end > index, bytes[index] != UInt8(ascii: ":") else { return nil }
            return true
        }
    }
}
