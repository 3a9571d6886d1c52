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

    @Test("Every field of a name is found, in order; names of equal length are told apart by their bytes")
    func repeatedAndEqualLengthNames() {
        let headers = HTTPHeaderFields([
            ("Content-Range", "bytes 0-1/2"), ("Accept-Ranges", "none"), ("Last-Modified", "x"), ("accept-ranges", "Bytes"),
        ])
        #expect(headers["ACCEPT-RANGES"] == "none")
        #expect(headers.values(for: "Accept-Ranges") == ["none", "Bytes"])
        #expect(headers.contains("Accept-Ranges", where: { $0 == "Bytes" }), "the second field of the name is looked at too")
        #expect(!headers.contains("Accept-Ranges", where: { $0 == "x" }), "a value of another field of the same length does not count")
        #expect(!headers.contains("Content-Length", where: { _ in true }))
        // A name built at run time (heap storage, not a literal) compares the same.
        let spelled = String(decoding: Array("last-MODIFIED".utf8), as: UTF8.self)
        #expect(headers[spelled] == "x")
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
