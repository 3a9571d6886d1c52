import Foundation

extension URL {
    /// Whether this is an absolute `http` or `https` URL with a host: what a download, a queue
    /// entry or an RPC URI must be.
    public var isHTTPWithHost: Bool {
        guard let scheme = self.scheme?.lowercased(), scheme == "http" || scheme == "https" else { return false }
        return self.host?.isEmpty == false
    }

    /// `text` as an absolute `http` or `https` URL with a host, else `nil`.
    public static func http(_ text: String) -> URL? {
        guard let url = URL(string: text), url.isHTTPWithHost else { return nil }
        return url
    }
}
