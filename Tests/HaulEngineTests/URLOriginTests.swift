import Foundation
import Testing

@testable import HaulEngine

@Suite("URLOrigin: a URL's scheme, host and port, read once")
struct URLOriginTests {
    @Test("Ports default by scheme; the host key is the one per-host limits have always used")
    func portsAndKeys() {
        let plain = URLOrigin(URL(string: "http://example.com/a")!)
        #expect(plain.port == 80 && plain.explicitPort == nil)
        #expect(plain.hostKey == "http://example.com:80")
        let secure = URLOrigin(URL(string: "https://example.com:8443/a")!)
        #expect(secure.port == 8443 && secure.hostKey == "https://example.com:8443")
        #expect(URLOrigin(URL(string: "https://example.com/")!).port == 443)
        let literal = URLOrigin(URL(string: "http://[::1]:8080/x")!)
        #expect(literal.host == "::1" && literal.port == 8080)
        #expect(TransferRun.hostKey(URL(string: "http://h:81/")!) == "http://h:81")
    }

    @Test("Schemes compare without case")
    func schemes() {
        let upper = URLOrigin(URL(string: "HTTP://h/f")!)
        #expect(upper.hasScheme("http") && !upper.hasScheme("https"))
        #expect(HTTP1ConnectionPool.carries(origin: upper, method: "GET", hasBody: false, isProxied: false))
        #expect(!URLOrigin(URL(string: "file:///tmp/x")!).hasScheme("http"))
    }

    @Test("A request's origin follows its URL when a redirect changes it")
    func followsTheURL() {
        var request = TransferRequest(url: URL(string: "http://a.example/x")!)
        #expect(request.origin.host == "a.example")
        request.url = URL(string: "https://b.example:444/y")!
        #expect(request.origin.host == "b.example" && request.origin.port == 444 && request.origin.hasScheme("https"))
    }

    @Test("A host's key remembered by its URL's authority is the key parsed from the URL, for every form of authority, again and again")
    func rememberedKeys() {
        let urls = [
            "http://example.com/a", "http://example.com", "http://example.com?x=1", "http://example.com#top",
            "https://example.com/", "https://example.com:443/a", "http://example.com:8080/a/b?c",
            "HTTP://Example.COM/a", "http://user:secret@example.com:81/f", "http://[::1]:8080/x", "http://[::1]/x",
            "ftp://files.example/x", "http://127.0.0.1:18555/f1", "http://127.0.0.1:18556/f1", "http://127.0.0.1/f1",
            "file:///tmp/x", "mailto:someone@example.com", "urn:isbn:123",
        ]
        for round in 0..<3 {
            for string in urls {
                let url = URL(string: string)!
                #expect(URLOrigin.hostKey(of: url) == URLOrigin(url).hostKey, "\(string), round \(round)")
            }
        }
        // Past the limit of remembered keys, each is still right.
        for port in 1000..<1200 {
            let url = URL(string: "http://h:\(port)/f")!
            #expect(URLOrigin.hostKey(of: url) == "http://h:\(port)")
        }
        #expect(URLOrigin.authority(of: "urn:isbn:1") == nil && URLOrigin.authority(of: "/relative") == nil && URLOrigin.authority(of: "http:") == nil)
        #expect(URLOrigin.authority(of: "http://u@h:1?q") == "http://u@h:1" && URLOrigin.authority(of: "http://h") == "http://h")
    }
}
