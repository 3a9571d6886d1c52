import Foundation

/// A cookie as a cookie store keeps it (RFC 6265 §5.3), with the matching rules for sending it.
public struct Cookie: Codable, Sendable, Hashable {
    public var name: String
    public var value: String
    /// Lowercased, without a leading dot.
    public var domain: String
    /// Sent only to `domain` itself (no `Domain` attribute was given).
    public var hostOnly: Bool
    public var path: String
    /// `nil`: a session cookie, gone when its store is.
    public var expires: Date?
    public var secure: Bool
    public var httpOnly: Bool
    public var created: Date

    public init(name: String, value: String, domain: String, hostOnly: Bool, path: String, expires: Date?, secure: Bool, httpOnly: Bool, created: Date = Date()) {
        self.name = name
        self.value = value
        self.domain = domain
        self.hostOnly = hostOnly
        self.path = path
        self.expires = expires
        self.secure = secure
        self.httpOnly = httpOnly
        self.created = created
    }

    /// Two cookies with the same name, domain and path are the same cookie: a newer one replaces it.
    public var identity: String { "\(self.name)\u{0}\(self.domain)\u{0}\(self.path)" }

    public func isExpired(at now: Date) -> Bool {
        self.expires.map { $0 <= now } ?? false
    }

    /// Whether the cookie goes with a request to `url` (domain, path and secure rules).
    public func matches(_ url: URL) -> Bool {
        guard let host = url.host?.lowercased() else { return false }
        if self.secure, url.scheme?.lowercased() != "https" { return false }
        if self.hostOnly {
            guard host == self.domain else { return false }
        } else {
            guard CookieRules.domainMatches(host: host, domain: self.domain) else { return false }
        }
        return CookieRules.pathMatches(requestPath: url.path.isEmpty ? "/" : url.path, cookiePath: self.path)
    }
}

/// RFC 6265's parsing and matching rules.
public enum CookieRules {
    /// Parses one `Set-Cookie` value received from `url` (§5.2, §5.3). Returns `nil` for a
    /// cookie the response may not set: no name/value pair, a `Domain` the host does not
    /// belong to, or `Secure` from a non-https URL.
    public static func parse(setCookie header: String, from url: URL, now: Date = Date()) -> Cookie? {
        guard let host = url.host?.lowercased(), !host.isEmpty else { return nil }
        let parts = header.split(separator: ";", omittingEmptySubsequences: false)
        guard let first = parts.first, let equals = first.firstIndex(of: "=") else { return nil }
        let name = first[..<equals].trimmingCharacters(in: .whitespaces)
        let value = first[first.index(after: equals)...].trimmingCharacters(in: .whitespaces)
        guard !name.isEmpty else { return nil }
        var domain: String?
        var path: String?
        var expires: Date?
        var maxAge: Int?
        var secure = false
        var httpOnly = false
        for attribute in parts.dropFirst() {
            let pair = attribute.split(separator: "=", maxSplits: 1)
            let key = pair.first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
            let argument = pair.count > 1 ? pair[1].trimmingCharacters(in: .whitespaces) : ""
            switch key {
            case "domain":
                var candidate = argument.lowercased()
                if candidate.hasPrefix(".") { candidate.removeFirst() }
                if !candidate.isEmpty { domain = candidate }
            case "path":
                if argument.hasPrefix("/") { path = argument }
            case "expires":
                if let date = HTTPDate.parse(argument) ?? Self.parseCookieDate(argument) { expires = date }
            case "max-age":
                if let seconds = Int(argument) { maxAge = seconds }
            case "secure":
                secure = true
            case "httponly":
                httpOnly = true
            default:
                break
            }
        }
        if let maxAge { expires = maxAge <= 0 ? Date(timeIntervalSince1970: 0) : now.addingTimeInterval(Double(maxAge)) }
        if secure, url.scheme?.lowercased() != "https" { return nil }
        let hostOnly: Bool
        if let domain {
            guard self.domainMatches(host: host, domain: domain), !self.isIPAddress(host) || host == domain else { return nil }
            hostOnly = false
        } else {
            hostOnly = true
        }
        return Cookie(
            name: name,
            value: value,
            domain: domain ?? host,
            hostOnly: hostOnly,
            path: path ?? self.defaultPath(url.path),
            expires: expires,
            secure: secure,
            httpOnly: httpOnly,
            created: now
        )
    }

    /// §5.1.3: the host is the domain or a subdomain of it (never for IP addresses).
    public static func domainMatches(host: String, domain: String) -> Bool {
        if host == domain { return true }
        return !self.isIPAddress(host) && host.hasSuffix("." + domain)
    }

    /// §5.1.4.
    public static func pathMatches(requestPath: String, cookiePath: String) -> Bool {
        if requestPath == cookiePath { return true }
        guard requestPath.hasPrefix(cookiePath) else { return false }
        return cookiePath.hasSuffix("/") || requestPath.dropFirst(cookiePath.count).hasPrefix("/")
    }

    /// §5.1.4: the directory of the request path.
    public static func defaultPath(_ path: String) -> String {
        guard path.hasPrefix("/"), let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return "/" }
        return String(path[..<slash])
    }

    /// The `Cookie` header value for `cookies`: longer paths first, then older first (§5.4).
    public static func cookieHeader(_ cookies: [Cookie]) -> String? {
        guard !cookies.isEmpty else { return nil }
        return cookies.sorted { ($0.path.count, $1.created) > ($1.path.count, $0.created) }
            .map { "\($0.name)=\($0.value)" }.joined(separator: "; ")
    }

    static func isIPAddress(_ host: String) -> Bool {
        host.contains(":") || host.split(separator: ".").allSatisfy { !$0.isEmpty && $0.allSatisfy(\.isNumber) }
    }

    /// The old Netscape form `Wed, 09-Jun-2021 10:18:14 GMT`.
    static func parseCookieDate(_ text: String) -> Date? {
        // A cookie date is short printable ASCII. Anything else never reaches DateFormatter,
        // which traps on some non-ASCII input (found by fuzzing: "Incorrect range CFRange").
        guard text.utf8.count <= 64, text.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else { return nil }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        for format in ["EEE, dd-MMM-yyyy HH:mm:ss zzz", "EEE, dd-MMM-yy HH:mm:ss zzz", "EEE, dd MMM yyyy HH:mm:ss zzz"] {
            formatter.dateFormat = format
            if let date = formatter.date(from: text) { return date }
        }
        return nil
    }
}
