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
}
