import Foundation

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
}
