@testable import HaulCore
import Testing

@Suite("HTTPHeaderFields: names compare without case, byte by byte")
struct HTTPHeaderFieldsTests {
    @Test("Lookups ignore ASCII case only; other bytes must match exactly")
    func caseInsensitiveNames() {
        var headers = HTTPHeaderFields([("Content-Length", "10"), ("ETag", "\"a\""), ("X-[Odd]", "1"), ("X-Ünï", "2")])
        #expect(headers["content-length"] == "10")
        #expect(headers["CONTENT-LENGTH"] == "10")
        #expect(headers["etag"] == "\"a\"")
        #expect(headers["Content-Lengti"] == nil)
        #expect(headers["Content-Length "] == nil)
        // '[' and '{' differ by the case bit but are not letters.
        #expect(headers["X-{Odd}"] == nil)
        #expect(headers["x-[odd]"] == "1")
        #expect(headers["X-Ünï"] == "2")
        #expect(headers["x-üNÏ"] == nil, "only ASCII letters fold (field names are ASCII tokens)")
        headers.replaceOrAdd(name: "content-length", value: "11")
        #expect(headers.values(for: "Content-Length") == ["11"])
        headers.remove(name: "ETAG")
        #expect(!headers.contains("etag"))
    }

    @Test("Header values are trimmed of ASCII spaces, tabs, CR and LF only, on bytes; a value with nothing to trim is kept")
    func trimming() {
        #expect("  42 \t".trimmingASCIIWhitespace() == "42")
        #expect("42".trimmingASCIIWhitespace() == "42")
        #expect(" \r\n\t ".trimmingASCIIWhitespace() == "")
        #expect("".trimmingASCIIWhitespace() == "")
        #expect(" \"ünï code\" ".trimmingASCIIWhitespace() == "\"ünï code\"", "inner spaces and non-ASCII bytes stay")
        #expect("\u{00A0}x\u{00A0}".trimmingASCIIWhitespace() == "\u{00A0}x\u{00A0}", "a no-break space is not HTTP whitespace")
        #expect("x é ".trimmingASCIIWhitespace() == "x é", "a value ending in a two-byte letter is cut after it")
        let line = "Content-Length:  7 "
        #expect(line.split(separator: ":")[1].trimmingASCIIWhitespace() == "7", "a substring")
        #expect(RangeResumeRules.contentLength(of: HTTPHeaderFields([("Content-Length", " 7 ")])) == 7)
    }
}
