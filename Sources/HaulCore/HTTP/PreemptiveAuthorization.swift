import Foundation

/// Credentials a session already had accepted, sent again before the server asks (as browsers
/// and URLSession do), so that every request to a protected area does not cost a 401 first.
///
/// An entry covers one origin (scheme, host, port) and the paths at or below the directory of
/// the URL it was first needed for (RFC 7617 §2.2). Digest entries reuse the server's nonce
/// with an increasing nonce count (RFC 7616 §3.4); a stale nonce brings a new 401 and a new entry.
public struct PreemptiveAuthorization: Sendable {
    public enum Scheme: Sendable, Hashable {
        case basic
        case digest(AuthenticationChallenge)
    }

    struct Entry: Sendable {
        var origin: String
        var pathPrefix: String
        var scheme: Scheme
        var user: String
        var password: String
        /// The last nonce count sent with this entry's nonce.
        var nonceCount: Int
    }

    private var entries: [Entry] = []
    /// Entries kept at most; the oldest go first.
    static let capacity = 64

    public init() {}

    static func origin(_ url: URL) -> String? {
        guard let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased() else { return nil }
        return "\(scheme)://\(host):\(url.port ?? (scheme == "https" ? 443 : 80))"
    }

    /// The directory of `url`'s path: `/docs/a.html` → `/docs/`.
    static func directory(_ url: URL) -> String {
        let path = url.path.isEmpty ? "/" : url.path
        guard let slash = path.lastIndex(of: "/") else { return "/" }
        return String(path[...slash])
    }

    /// Remembers credentials that were sent in answer to a challenge for `url`, with the nonce
    /// count used (Digest).
    public mutating func remember(url: URL, scheme: Scheme, user: String, password: String, nonceCount: Int) {
        guard let origin = Self.origin(url) else { return }
        let prefix = Self.directory(url)
        self.entries.removeAll { $0.origin == origin && $0.pathPrefix == prefix }
        self.entries.append(Entry(origin: origin, pathPrefix: prefix, scheme: scheme, user: user, password: password, nonceCount: nonceCount))
        if self.entries.count > Self.capacity { self.entries.removeFirst(self.entries.count - Self.capacity) }
    }

    /// Drops what covers `url` (the server refused it).
    public mutating func forget(url: URL) {
        guard let origin = Self.origin(url) else { return }
        self.entries.removeAll { $0.origin == origin && url.path.hasPrefix($0.pathPrefix) }
    }

    /// The `Authorization` value to send with a request for `url`, if an entry covers it (the
    /// longest path prefix wins); Digest entries count up their nonce count. `uri` and
    /// `clientNonce` are asked for only when a Digest entry applies (this runs for every request).
    public mutating func authorization(
        for url: URL,
        method: String,
        uri: () -> String,
        clientNonce: () -> String,
        hash: (String, String) -> String?
    ) -> String? {
        guard !self.entries.isEmpty, let origin = Self.origin(url) else { return nil }
        let path = url.path.isEmpty ? "/" : url.path
        guard let index = self.entries.indices
            .filter({ self.entries[$0].origin == origin && path.hasPrefix(self.entries[$0].pathPrefix) })
            .max(by: { self.entries[$0].pathPrefix.count < self.entries[$1].pathPrefix.count })
        else { return nil }
        let entry = self.entries[index]
        switch entry.scheme {
        case .basic:
            return HTTPAuthorization.basic(user: entry.user, password: entry.password)
        case .digest(let challenge):
            let count = entry.nonceCount + 1
            self.entries[index].nonceCount = count
            return HTTPAuthorization.digest(
                challenge: challenge,
                user: entry.user,
                password: entry.password,
                method: method,
                uri: uri(),
                clientNonce: clientNonce(),
                count: count,
                hash: hash
            )
        }
    }
}
