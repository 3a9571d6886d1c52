import Foundation
@testable import HaulCore
import Testing

/// Inputs libFuzzer found (scripts/fuzz), kept as regression tests; each is also in the
/// target's seed corpus (Fuzz/corpus).
@Suite("Parser regressions found by fuzzing")
struct FuzzRegressionTests {
    static func text(_ base64: String) -> String { String(decoding: Data(base64Encoded: base64)!, as: UTF8.self) }

    @Test("WWW-Authenticate with an unterminated quoted value: no crash, the parameters before it kept")
    func unterminatedQuote() {
        // Found by the www-authenticate target: an index past the end after the missing quote.
        let header = Self.text("RGlnZXN0IHJlYWxtPSJ0ZXN0IiwgcW9wPSJhdXRoLGF1dGgtaW50IiwgYWxnb3JpdGhtPVNIQS0yNTYsIG5vbmNlPSI3eXBmL3hsajlYWHdmRFBFb000VVJyb3RpYXRl")
        let challenges = AuthenticationChallenge.parse([header])
        #expect(challenges.first?.scheme == "Digest")
        #expect(challenges.first?.parameters["realm"] == "test")
        #expect(AuthenticationChallenge.parse(["Basic realm=\""]).first?.parameters["realm"] == "")
        #expect(AuthenticationChallenge.parse(["Basic realm=\"a\\"]).count == 1)
    }

    @Test("A Set-Cookie Expires with non-ASCII bytes: ignored, never handed to DateFormatter (which traps on it)")
    func cookieDateNonASCII() {
        // Found by the set-cookie target in CI: Foundation's DateFormatter stopped the process
        // with "Incorrect range CFRange" on "Wed, 21\u{730}ct 2015 07:28:00 GMT".
        let header = Self.text("aWQ9YTRmV2E7IEV4cGlyZXM9V2VkLCAyMdywY3QgMjAxNSAwNzoyODowMCBHTVQ7XVNlY3VyZTsgSHR0cE9ubHk=")
        let cookie = CookieRules.parse(setCookie: header, from: URL(string: "http://127.0.0.1/")!, now: Date())
        #expect(cookie?.name == "id" && cookie?.expires == nil, "\(String(describing: cookie))")
        #expect(CookieRules.parseCookieDate("Wed, 21\u{730}ct 2015 07:28:00 GMT") == nil)
        #expect(CookieRules.parseCookieDate("Wed, 09-Jun-2021 10:18:14 GMT") != nil, "the Netscape form still parses")
    }

    @Test("Content-Disposition names that reduce to dots: never '..', never hidden")
    func dottedNames() {
        // Found by the content-disposition target: ". .." came out as "..".
        let header = Self.text("Um5saTtpOyBmaWxlbmFtZT0iLi5+bmFtLy4gLi5sZW5hbWU9Ii4ufm5hbS8uLi8=")
        let url = URL(string: "http://127.0.0.1/a/b.bin")!
        for value in [header, "attachment; filename=\". ..\"", "attachment; filename=\" . . .x\"", "attachment; filename=\"a/. .\""] {
            let name = FileNaming.suggestedFilename(contentDisposition: value, url: url)
            #expect(!name.hasPrefix(".") && !name.contains("/") && !name.isEmpty, "\(value) → \(name)")
        }
        #expect(FileNaming.sanitize(". ..") == nil)
        #expect(FileNaming.sanitize(" . .x") == "x")
    }
}

/// The hand-written IMF-fixdate reader and writer agree with `DateFormatter` (what they
/// replaced on the hot path), and the obsolete forms still parse.
@Suite("HTTP dates")
struct HTTPDateTests {
    static let reference: DateFormatter = {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter
    }()

    @Test("Formatting and parsing agree with DateFormatter across 1970–2099")
    func agreesWithDateFormatter() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            let date = Date(timeIntervalSince1970: TimeInterval(Int64.random(in: 0..<4_102_444_800, using: &generator)))
            let ours = HTTPDate.format(date)
            #expect(ours == Self.reference.string(from: date))
            #expect(HTTPDate.parse(ours) == date, "\(ours)")
        }
    }

    @Test("Input that made Foundation's DateFormatter trap is refused before it gets there")
    func formatterTrap() {
        // Found by the cache-headers target: DateFormatter.date(from:) hit "Incorrect range
        // CFRange" on this header value, a crash any server could cause with an Expires header.
        let text = String(decoding: Data(base64Encoded: "c9aw7ywsLCwsLCwsLCwsLCwsZ2UsLCIsLCwsPSwsT3B0aSwsLCwseCwsLCwsLCwsLCwsLCwsLCwsLCwsLCwsLG5vLQQ=")!, as: UTF8.self)
        #expect(HTTPDate.parse(text) == nil)
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT\u{5B0}") == nil)
    }

    @Test("The RFC's three forms; impossible dates refused")
    func forms() {
        let expected = Date(timeIntervalSince1970: 784_111_777)
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT") == expected)
        #expect(HTTPDate.parse("  Sun, 06 Nov 1994 08:49:37 GMT ") == expected)
        #expect(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT") == expected)
        #expect(HTTPDate.parse("Sun Nov  6 08:49:37 1994") == expected)
        #expect(HTTPDate.parse("Sun, 31 Feb 1994 08:49:37 GMT") == nil)
        #expect(HTTPDate.parse("Sun, 06 Nox 1994 08:49:37 GMT") == nil)
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 25:49:37 GMT") == nil)
        #expect(HTTPDate.parse("0") == nil && HTTPDate.parse("") == nil)
    }
}
