import Foundation
import HaulCore
import Testing

@Suite("Preemptive authorization rules, without I/O")
struct PreemptiveAuthorizationTests {
    static func hash(_ algorithm: String, _ text: String) -> String? { "h(\(text))" }

    func header(_ table: inout PreemptiveAuthorization, _ url: String) -> String? {
        let url = URL(string: url)!
        return table.authorization(for: url, method: "GET", uri: { url.path }, clientNonce: { "c" }, hash: Self.hash)
    }

    @Test("Same origin and path area only; scheme, host and port must all match")
    func scope() {
        var table = PreemptiveAuthorization()
        table.remember(url: URL(string: "https://h.test/docs/a.html")!, scheme: .basic, user: "u", password: "p", nonceCount: 1)
        let basic = HTTPAuthorization.basic(user: "u", password: "p")
        #expect(self.header(&table, "https://h.test/docs/b.html") == basic)
        #expect(self.header(&table, "https://h.test/docs/deeper/c") == basic)
        #expect(self.header(&table, "https://h.test:443/docs/x") == basic)
        #expect(self.header(&table, "https://h.test/doc") == nil)
        #expect(self.header(&table, "https://h.test/") == nil)
        #expect(self.header(&table, "http://h.test/docs/b.html") == nil, "never to plain http")
        #expect(self.header(&table, "https://h.test:8443/docs/b.html") == nil)
        #expect(self.header(&table, "https://other.test/docs/b.html") == nil)
        table.forget(url: URL(string: "https://h.test/docs/z")!)
        #expect(self.header(&table, "https://h.test/docs/b.html") == nil)
    }

    @Test("The longest path prefix wins; Digest counts its nonce up per request")
    func digestCount() throws {
        var table = PreemptiveAuthorization()
        let challenge = try #require(AuthenticationChallenge.parse(["Digest realm=\"r\", nonce=\"n\", qop=\"auth\""]).first)
        table.remember(url: URL(string: "http://h.test/a/")!, scheme: .basic, user: "outer", password: "p", nonceCount: 1)
        table.remember(url: URL(string: "http://h.test/a/b/c")!, scheme: .digest(challenge), user: "inner", password: "p", nonceCount: 1)
        let first = try #require(self.header(&table, "http://h.test/a/b/x"))
        let second = try #require(self.header(&table, "http://h.test/a/b/y"))
        #expect(first.contains("username=\"inner\"") && first.contains("nc=00000002"))
        #expect(second.contains("nc=00000003") && second.contains("uri=\"/a/b/y\""))
        #expect(self.header(&table, "http://h.test/a/z") == HTTPAuthorization.basic(user: "outer", password: "p"))
    }
}
