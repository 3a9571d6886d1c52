import Foundation

/// Follows redirects as browsers and URLSession do: a bounded chain, loop detection, method
/// rewriting for 301/302/303, and no credentials carried to another origin.
public struct RedirectPolicy: Sendable, Hashable {
    /// Redirects followed before failing with "too many redirects" (URLSession uses 16).
    public var maximumRedirects: Int

    public init(maximumRedirects: Int = 16) {
        self.maximumRedirects = maximumRedirects
    }

    /// Whether `status` is a redirect that carries a `Location` to follow.
    public static func isRedirect(status: Int) -> Bool {
        [301, 302, 303, 307, 308].contains(status)
    }

    /// The request to make next.
    public struct NextRequest: Sendable, Hashable {
        public var url: URL
        public var method: String
        /// Whether the request body is dropped (method became GET).
        public var dropsBody: Bool
        /// Header names to remove (credentials, cookies on a cross-origin hop; body headers).
        public var headersToRemove: [String]
    }

    /// Why a redirect is not followed.
    public enum Refusal: Error, Sendable, Hashable {
        case missingLocation
        case invalidLocation(String)
        case unsupportedScheme(String)
        case tooManyRedirects(Int)
        case loop(URL)
    }

    /// Computes the next request for a redirect response.
    ///
    /// - Parameters:
    ///   - status: the 3xx status.
    ///   - location: the `Location` value.
    ///   - currentURL: the URL that answered with the redirect.
    ///   - method: the method of the request that was redirected.
    ///   - visited: every URL requested so far in this chain, the current one included.
    /// - Throws: ``Refusal`` for a missing or bad location, too long a chain or a loop.
    public func nextRequest(
        status: Int,
        location: String?,
        currentURL: URL,
        method: String,
        visited: [URL]
    ) throws(Refusal) -> NextRequest {
        guard let location, !location.trimmingASCIIWhitespace().isEmpty else { throw .missingLocation }
        let trimmed = location.trimmingASCIIWhitespace()
        guard let target = URL(string: trimmed, relativeTo: currentURL)?.absoluteURL else {
            throw .invalidLocation(trimmed)
        }
        let scheme = target.scheme?.lowercased() ?? ""
        guard scheme == "http" || scheme == "https" else { throw .unsupportedScheme(scheme) }
        guard target.host?.isEmpty == false else { throw .invalidLocation(trimmed) }
        guard visited.count <= self.maximumRedirects else { throw .tooManyRedirects(self.maximumRedirects) }
        let upper = method.uppercased()
        let rewritesToGet = (status == 303 && upper != "HEAD") || ((status == 301 || status == 302) && upper == "POST")
        let newMethod = rewritesToGet ? "GET" : upper
        // The same URL asked with the same method again can only lead back here.
        if visited.contains(where: { Self.normalized($0) == Self.normalized(target) }) {
            throw .loop(target)
        }
        var remove: [String] = []
        if rewritesToGet { remove += ["Content-Type", "Content-Length", "Content-Encoding", "Transfer-Encoding"] }
        if !Self.isSameOrigin(currentURL, target) { remove += ["Authorization", "Cookie", "Proxy-Authorization"] }
        return NextRequest(url: target, method: newMethod, dropsBody: rewritesToGet, headersToRemove: remove)
    }

    static func isSameOrigin(_ a: URL, _ b: URL) -> Bool {
        a.scheme?.lowercased() == b.scheme?.lowercased() && a.host?.lowercased() == b.host?.lowercased()
            && effectivePort(a) == effectivePort(b)
    }

    static func effectivePort(_ url: URL) -> Int {
        url.port ?? (url.scheme?.lowercased() == "https" ? 443 : 80)
    }

    static func normalized(_ url: URL) -> String {
        guard var components = URLComponents(url: url, resolvingAgainstBaseURL: true) else { return url.absoluteString }
        components.fragment = nil
        components.scheme = components.scheme?.lowercased()
        components.host = components.host?.lowercased()
        if components.path.isEmpty { components.path = "/" }
        return components.string ?? url.absoluteString
    }
}
