import HaulCore
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
}
