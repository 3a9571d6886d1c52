import Foundation
import Haul
import HaulCore
import HaulTestSupport
import Testing

@Suite("Cookies: RFC 6265 rules")
struct CookieRuleTests {
    let url = URL(string: "https://www.example.org/docs/guide/page.html")!

    @Test("Parsing: attributes, default path, host-only vs domain, refusals")
    func parsing() throws {
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        let plain = try #require(CookieRules.parse(setCookie: "id=42", from: self.url, now: now))
        #expect(plain.domain == "www.example.org" && plain.hostOnly && plain.path == "/docs/guide" && plain.expires == nil)
        let full = try #require(CookieRules.parse(setCookie: "s=1; Domain=.Example.org; Path=/; Max-Age=60; Secure; HttpOnly", from: self.url, now: now))
        #expect(full.domain == "example.org" && !full.hostOnly && full.path == "/" && full.secure && full.httpOnly)
        #expect(full.expires == now.addingTimeInterval(60))
        let dated = try #require(CookieRules.parse(setCookie: "d=1; Expires=Wed, 09 Jun 2021 10:18:14 GMT", from: self.url, now: now))
        #expect(dated.isExpired(at: now))
        #expect(CookieRules.parse(setCookie: "x=1; Domain=other.org", from: self.url) == nil, "a foreign domain is refused")
        #expect(CookieRules.parse(setCookie: "x=1; Secure", from: URL(string: "http://www.example.org/")!) == nil, "Secure needs https")
        #expect(CookieRules.parse(setCookie: "novalue", from: self.url) == nil)
        #expect(CookieRules.parse(setCookie: "x=1; Domain=0.0.1", from: URL(string: "http://127.0.0.1/")!) == nil, "no domain cookies for IPs")
    }

    @Test("Matching: domain, path, secure")
    func matching() throws {
        let domainCookie = try #require(CookieRules.parse(setCookie: "a=1; Domain=example.org; Path=/docs", from: self.url))
        #expect(domainCookie.matches(URL(string: "https://api.example.org/docs/x")!))
        #expect(domainCookie.matches(URL(string: "https://example.org/docs")!))
        #expect(!domainCookie.matches(URL(string: "https://example.org/docsearch")!), "path prefix must end at a /")
        #expect(!domainCookie.matches(URL(string: "https://badexample.org/docs")!))
        let hostOnly = try #require(CookieRules.parse(setCookie: "b=2; Path=/", from: self.url))
        #expect(!hostOnly.matches(URL(string: "https://api.www.example.org/")!))
        let secure = try #require(CookieRules.parse(setCookie: "c=3; Secure; Path=/", from: self.url))
        #expect(!secure.matches(URL(string: "http://www.example.org/")!))
        #expect(CookieRules.cookieHeader([hostOnly, domainCookie]) == "a=1; b=2", "longer paths first")
    }
}

@Suite("Cookies in sessions")
struct SessionCookieTests {
    @Test("A session stores Set-Cookie (redirects included) and sends the cookies back")
    func roundTrip() async throws {
        let env = try await TestEnvironment.make { $0.httpCookieStorage = TransferCookieStorage() }
        let set = env.server.url("/setcookie?c=session%3Dabc%3B%20Path%3D%2F&c=scoped%3D1%3B%20Path%3D%2Ffile&to=%2Ffile%2Fafter%3Fsize%3D10")
        _ = try await env.session.data(from: set)
        #expect(env.server.requests.last?.header("Cookie") == "scoped=1; session=abc", "the redirected request already carries the cookies")
        _ = try await env.session.data(from: env.server.url("/file/again?size=10"))
        #expect(env.server.requests.last?.header("Cookie") == "scoped=1; session=abc")
        _ = try await env.session.data(from: env.server.url("/echo"))
        #expect(env.server.requests.last?.header("Cookie") == "session=abc", "a path-scoped cookie stays on its path")
        let stored = env.session.configuration.httpCookieStorage?.cookies?.map(\.name).sorted()
        #expect(stored == ["scoped", "session"])
        // An expired Set-Cookie deletes its namesake.
        _ = try await env.session.data(from: env.server.url("/setcookie?c=session%3D%3B%20Path%3D%2F%3B%20Max-Age%3D0"))
        _ = try await env.session.data(from: env.server.url("/echo"))
        #expect(env.server.requests.last?.header("Cookie") == nil)
        try await env.finish()
    }

    @Test("Ephemeral sessions keep cookies to themselves; a default store persists them on disk")
    func isolationAndPersistence() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cookies-\(UUID().uuidString)")
        let file = directory.appendingPathComponent("cookies.json")
        let persistent = TransferCookieStorage(fileURL: file)
        let defaultConfiguration = TransferSessionConfiguration.default
        defaultConfiguration.urlCache = nil
        defaultConfiguration.httpCookieStorage = persistent
        let defaultSession = TransferSession(configuration: defaultConfiguration)
        let ephemeral = TransferSession(configuration: .ephemeral)
        let otherEphemeral = TransferSession(configuration: .ephemeral)
        #expect(ephemeral.configuration.httpCookieStorage !== otherEphemeral.configuration.httpCookieStorage)

        _ = try await ephemeral.data(from: server.url("/setcookie?c=private%3D1%3B%20Max-Age%3D600"))
        _ = try await ephemeral.data(from: server.url("/file/e?size=1"))
        #expect(server.requests.last?.header("Cookie") == "private=1")
        _ = try await otherEphemeral.data(from: server.url("/file/o?size=1"))
        #expect(server.requests.last?.header("Cookie") == nil, "another ephemeral session does not see it")
        _ = try await defaultSession.data(from: server.url("/file/d?size=1"))
        #expect(server.requests.last?.header("Cookie") == nil, "nor does a default session")

        _ = try await defaultSession.data(from: server.url("/setcookie?c=kept%3D7%3B%20Max-Age%3D600&c=gone%3D1"))
        #expect(FileManager.default.fileExists(atPath: file.path))
        let reloaded = TransferCookieStorage(fileURL: file)
        #expect(reloaded.cookies?.map(\.name) == ["kept"], "persistent cookies survive; session cookies do not")
        // A file that is not ours, nested past JSONDecoder's limit (on which it traps): an empty store.
        let planted = directory.appendingPathComponent("planted.json")
        try Data((0..<513).map { $0 % 3 == 0 ? "[ " : "[" }.joined().utf8).write(to: planted)
        #expect(TransferCookieStorage(fileURL: planted).cookies?.isEmpty == true)

        let refusing = TransferSessionConfiguration.ephemeral
        refusing.httpCookieAcceptPolicy = .never
        let refusingSession = TransferSession(configuration: refusing)
        _ = try await refusingSession.data(from: server.url("/setcookie?c=no%3D1"))
        #expect(refusing.httpCookieStorage?.cookies?.isEmpty == true)

        let silent = TransferSessionConfiguration.default
        silent.urlCache = nil
        silent.httpCookieStorage = persistent
        silent.httpShouldSetCookies = false
        let silentSession = TransferSession(configuration: silent)
        _ = try await silentSession.data(from: server.url("/file/s?size=1"))
        #expect(server.requests.last?.header("Cookie") == nil, "httpShouldSetCookies = false sends none")

        for session in [defaultSession, ephemeral, otherEphemeral, refusingSession, silentSession] { session.finishTasksAndInvalidate() }
        try await server.shutdown()
        try? FileManager.default.removeItem(at: directory)
    }
}
