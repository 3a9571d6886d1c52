import Foundation
import Testing

@testable import HaulCore

@Suite("URL.http and isHTTPWithHost: the bytes' fast answer agrees with the URL's parts")
struct URLHTTPTests {
    /// What the URL's own parts say (the answer before the fast path).
    static func byParts(_ url: URL) -> Bool {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https" else { return false }
        return url.host?.isEmpty == false
    }

    static let texts = [
        "http://127.0.0.1/f.bin", "https://example.org", "HTTPS://Example.org:8443/a?b#c", "hTtP://h/",
        "http://h:80", "http://h?x", "http://h#x", "http://user:pw@h/", "http://@h/", "http://[::1]:8080/x",
        "http://%41/x", "http://:80/", "http:///x", "http:/x", "http:x", "https:", "ftp://h/x", "file:///tmp/x",
        "mailto:a@b", "httpx://h/", "h", "ht", "http", "http://", "https://", "HTTP://H", "x-http://h/",
        "http://h:/x", "https://h.example:65535/p/a/t/h?q=1&r=%20#frag",
    ]

    @Test("Every URL that parses: the same answer as its scheme and host give")
    func agreesWithParts() {
        for text in Self.texts {
            guard let url = URL(string: text) else { continue }
            #expect(url.isHTTPWithHost == Self.byParts(url), "\(text)")
            #expect((URL.http(text) != nil) == Self.byParts(url), "\(text)")
        }
    }

    @Test("The fast answer is given for plain http URLs and left to the parts where it needs them")
    func fastPathCoversTheCommonCase() {
        #expect(URL.httpHost(in: "http://127.0.0.1:8080/f0001.bin") == true)
        #expect(URL.httpHost(in: "HTTPS://example.org") == true)
        #expect(URL.httpHost(in: "ftp://example.org/") == false)
        #expect(URL.httpHost(in: "http://user@example.org/") == nil)
        #expect(URL.httpHost(in: "http://[::1]/") == nil)
        #expect(URL.httpHost(in: "http://:80/") == nil)
    }
}
