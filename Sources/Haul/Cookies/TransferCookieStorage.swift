import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HaulCore
import HaulEngine
import Synchronization

/// A cookie store, as `HTTPCookieStorage`: one per configuration. `.default` configurations
/// share ``shared``, kept on disk; `.ephemeral` ones get a private store in memory that
/// disappears with them.
///
/// Thread-safe. Cookies follow RFC 6265: host-only and domain cookies, path matching, `Secure`
/// only over https, `Expires`/`Max-Age` (expired cookies are dropped), a `Domain` the setting
/// host does not belong to is refused. (The public-suffix list is not consulted.)
public final class TransferCookieStorage: Sendable {
    private struct State {
        var cookies: [String: Cookie] = [:]
        var acceptPolicy: HTTPCookie.AcceptPolicy = .always
    }

    private let state = Mutex(State())
    /// Where persistent cookies are kept (`nil`: memory only).
    public let fileURL: URL?

    /// The store of `.default` configurations: `$XDG_DATA_HOME/haul/cookies.json` (else
    /// `~/.local/share/haul/cookies.json`).
    public static let shared: TransferCookieStorage = {
        let paths = DaemonPaths.fromEnvironment()
        return TransferCookieStorage(fileURL: paths.dataDirectory.appendingPathComponent("cookies.json"))
    }()

    /// A store in memory (`fileURL` nil), or one kept in the JSON file at `fileURL` (loaded now,
    /// rewritten atomically on every change; session cookies are not written).
    public init(fileURL: URL? = nil) {
        self.fileURL = fileURL
        // A file nested past 512 levels could trap JSONDecoder (JSONNesting); one is not ours.
        if let fileURL, let data = try? Data(contentsOf: fileURL),
            let stored = try? JSONDecoder().decode([Cookie].self, from: data, maximumNesting: JSONNesting.limit)
        {
            let now = Date()
            self.state.withLock { state in
                for cookie in stored where !cookie.isExpired(at: now) { state.cookies[cookie.identity] = cookie }
            }
        }
    }

    /// Which cookies responses may set.
    public var cookieAcceptPolicy: HTTPCookie.AcceptPolicy {
        get { self.state.withLock { $0.acceptPolicy } }
        set { self.state.withLock { $0.acceptPolicy = newValue } }
    }

    /// Every unexpired cookie.
    public var cookies: [HTTPCookie]? {
        self.unexpired().compactMap(Self.httpCookie)
    }

    /// The cookies a request to `url` would carry.
    public func cookies(for url: URL) -> [HTTPCookie]? {
        self.matching(url).compactMap(Self.httpCookie)
    }

    /// Stores `cookie` (replacing one with the same name, domain and path).
    public func setCookie(_ cookie: HTTPCookie) {
        let domain = cookie.domain.lowercased()
        let stored = Cookie(
            name: cookie.name,
            value: cookie.value,
            domain: domain.hasPrefix(".") ? String(domain.dropFirst()) : domain,
            hostOnly: !domain.hasPrefix("."),
            path: cookie.path.isEmpty ? "/" : cookie.path,
            expires: cookie.expiresDate,
            secure: cookie.isSecure,
            httpOnly: cookie.isHTTPOnly
        )
        self.put([stored])
    }

    /// Stores cookies received with a response from `url`, as the accept policy allows.
    public func setCookies(_ cookies: [HTTPCookie], for url: URL?, mainDocumentURL: URL?) {
        guard self.accepts(from: url, mainDocumentURL: mainDocumentURL) else { return }
        for cookie in cookies { self.setCookie(cookie) }
    }

    public func deleteCookie(_ cookie: HTTPCookie) {
        let domain = cookie.domain.lowercased()
        let bare = domain.hasPrefix(".") ? String(domain.dropFirst()) : domain
        self.change { $0.removeValue(forKey: "\(cookie.name)\u{0}\(bare)\u{0}\(cookie.path.isEmpty ? "/" : cookie.path)") }
    }

    /// Removes cookies created since `date`.
    public func removeCookies(since date: Date) {
        self.change { cookies in cookies = cookies.filter { $0.value.created < date } }
    }

    // MARK: - For the engine

    /// The `Cookie` header value for a request to `url`.
    func cookieHeader(for url: URL) -> String? {
        CookieRules.cookieHeader(self.matching(url))
    }

    /// Takes the `Set-Cookie` values of a response from `url`.
    func receive(setCookie values: [String], from url: URL, mainDocumentURL: URL?, policy: HTTPCookie.AcceptPolicy? = nil) {
        guard self.accepts(from: url, mainDocumentURL: mainDocumentURL, policy: policy) else { return }
        let now = Date()
        self.put(values.compactMap { CookieRules.parse(setCookie: $0, from: url, now: now) })
    }

    // MARK: - Internals

    private func accepts(from url: URL?, mainDocumentURL: URL?, policy: HTTPCookie.AcceptPolicy? = nil) -> Bool {
        switch policy ?? self.cookieAcceptPolicy {
        case .always: return true
        case .never: return false
        case .onlyFromMainDocumentDomain:
            guard let main = mainDocumentURL?.host?.lowercased() else { return true }
            guard let host = url?.host?.lowercased() else { return false }
            return host == main || host.hasSuffix("." + main) || main.hasSuffix("." + host)
        @unknown default: return true
        }
    }

    private func put(_ cookies: [Cookie]) {
        guard !cookies.isEmpty else { return }
        let now = Date()
        self.change { stored in
            for cookie in cookies {
                if cookie.isExpired(at: now) {
                    stored.removeValue(forKey: cookie.identity)  // an expired cookie deletes its namesake
                } else {
                    var cookie = cookie
                    if let existing = stored[cookie.identity] { cookie.created = existing.created }
                    stored[cookie.identity] = cookie
                }
            }
        }
    }

    private func change(_ body: (inout [String: Cookie]) -> Void) {
        let snapshot = self.state.withLock { state -> [Cookie]? in
            body(&state.cookies)
            return self.fileURL == nil ? nil : state.cookies.values.filter { $0.expires != nil }.sorted { $0.identity < $1.identity }
        }
        guard let snapshot, let fileURL = self.fileURL else { return }
        try? FileManager.default.createDirectory(at: fileURL.deletingLastPathComponent(), withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        if let data = try? JSONEncoder().encode(snapshot) {
            try? data.write(to: fileURL, options: [.atomic])
            chmod(fileURL.path, 0o600)
        }
    }

    private func unexpired() -> [Cookie] {
        let now = Date()
        return self.state.withLock { Array($0.cookies.values) }.filter { !$0.isExpired(at: now) }
    }

    private func matching(_ url: URL) -> [Cookie] {
        self.unexpired().filter { $0.matches(url) }
    }

    private static func httpCookie(_ cookie: Cookie) -> HTTPCookie? {
        var properties: [HTTPCookiePropertyKey: Any] = [
            .name: cookie.name,
            .value: cookie.value,
            .domain: cookie.hostOnly ? cookie.domain : "." + cookie.domain,
            .path: cookie.path,
        ]
        if let expires = cookie.expires { properties[.expires] = expires }
        if cookie.secure { properties[.secure] = "TRUE" }
        if cookie.httpOnly { properties[HTTPCookiePropertyKey("HttpOnly")] = "TRUE" }
        return HTTPCookie(properties: properties)
    }
}

/// Connects a session's cookie settings to its engine.
struct SessionCookieJar: TransferCookieJar {
    let storage: TransferCookieStorage
    let sendsCookies: Bool
    let acceptPolicy: HTTPCookie.AcceptPolicy

    func cookieHeader(for url: URL) -> String? {
        self.sendsCookies ? self.storage.cookieHeader(for: url) : nil
    }

    func store(setCookie values: [String], from url: URL) {
        self.storage.receive(setCookie: values, from: url, mainDocumentURL: nil, policy: self.acceptPolicy)
    }
}
