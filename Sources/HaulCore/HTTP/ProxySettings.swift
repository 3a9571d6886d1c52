import Foundation

/// Which proxy a request goes through: one for http, one for https (tunnelled with
/// `CONNECT`), and hosts that bypass both (`no_proxy`).
public struct ProxySettings: Sendable, Hashable {
    public struct Server: Sendable, Hashable {
        public var host: String
        public var port: Int
        /// Credentials for the proxy (`Proxy-Authorization: Basic`), from `http://user:pass@host`.
        public var username: String?
        public var password: String?

        public init(host: String, port: Int, username: String? = nil, password: String? = nil) {
            self.host = host
            self.port = port
            self.username = username
            self.password = password
        }
    }

    public var http: Server?
    public var https: Server?
    /// Host names or suffixes (`example.org`, `.example.org`), IP addresses, or `*` for all.
    public var exceptions: [String]

    public init(http: Server? = nil, https: Server? = nil, exceptions: [String] = []) {
        self.http = http
        self.https = https
        self.exceptions = exceptions
    }

    public var isEmpty: Bool { self.http == nil && self.https == nil }

    /// The proxy for a request to `url`, or `nil` to connect directly.
    public func proxy(for url: URL) -> Server? {
        // No proxy set (the usual case): nothing to read from the URL (each of its components
        // is parsed again on every access).
        guard !self.isEmpty, let host = url.host?.lowercased() else { return nil }
        let server = url.scheme?.lowercased() == "https" ? self.https : self.http
        guard let server else { return nil }
        for exception in self.exceptions.map({ $0.trimmingCharacters(in: .whitespaces).lowercased() }) where !exception.isEmpty {
            if exception == "*" { return nil }
            let bare = exception.hasPrefix(".") ? String(exception.dropFirst()) : exception
            let withoutPort = bare.split(separator: ":").first.map(String.init) ?? bare
            if host == withoutPort || host.hasSuffix("." + withoutPort) { return nil }
        }
        return server
    }

    /// The usual environment: `http_proxy`, `https_proxy`, `no_proxy` (lower case first, then
    /// upper case, as curl reads them; `HTTP_PROXY` is ignored, as curl does, because CGI
    /// programs get it from a request header).
    public static func fromEnvironment(_ environment: [String: String]) -> ProxySettings {
        func server(_ names: [String]) -> Server? {
            for name in names {
                if let value = environment[name], !value.isEmpty, let parsed = self.parseServer(value) { return parsed }
            }
            return nil
        }
        let exceptions = (environment["no_proxy"] ?? environment["NO_PROXY"] ?? "").split(separator: ",").map(String.init)
        return ProxySettings(http: server(["http_proxy"]), https: server(["https_proxy", "HTTPS_PROXY"]), exceptions: exceptions)
    }

    /// `URLSessionConfiguration.connectionProxyDictionary`'s keys: `HTTPEnable`, `HTTPProxy`,
    /// `HTTPPort`, `HTTPSEnable`, `HTTPSProxy`, `HTTPSPort`, `ExceptionsList`.
    public static func fromDictionary(_ dictionary: [String: Any]) -> ProxySettings {
        func enabled(_ key: String) -> Bool {
            switch dictionary[key] {
            case let value as Bool: return value
            case let value as Int: return value != 0
            case let value as NSNumber: return value.boolValue
            case let value as String: return value == "1" || value.lowercased() == "true"
            default: return false
            }
        }
        func port(_ key: String, default fallback: Int) -> Int {
            switch dictionary[key] {
            case let value as Int: return value
            case let value as NSNumber: return value.intValue
            case let value as String: return Int(value) ?? fallback
            default: return fallback
            }
        }
        var settings = ProxySettings(exceptions: dictionary["ExceptionsList"] as? [String] ?? [])
        if enabled("HTTPEnable"), let host = dictionary["HTTPProxy"] as? String {
            settings.http = Server(host: host, port: port("HTTPPort", default: 80))
        }
        if enabled("HTTPSEnable"), let host = dictionary["HTTPSProxy"] as? String {
            settings.https = Server(host: host, port: port("HTTPSPort", default: 443))
        }
        return settings
    }

    /// `host:port`, `http://host:port/`, `http://user:password@host:port` (percent-encoded
    /// credentials, as curl reads them).
    static func parseServer(_ text: String) -> Server? {
        let withScheme = text.contains("://") ? text : "http://" + text
        guard let components = URLComponents(string: withScheme), let host = components.host, !host.isEmpty else { return nil }
        return Server(
            host: host,
            port: components.port ?? (components.scheme?.lowercased() == "https" ? 443 : 80),
            username: components.user,
            password: components.password
        )
    }
}
