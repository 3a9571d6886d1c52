import HaulCore
import Testing

@Suite("URLList: the lines of a URL list file")
struct URLListTests {
    @Test("Blank lines and comments are skipped, ASCII blanks and CRs trimmed; entries keep their line numbers")
    func entries() {
        let text = "http://a/1\r\n\n   # a comment\n\t http://b/2  \n#http://skipped/\nhttp://c/é\n   \n"
        #expect(URLList.entries(in: text) == [
            URLList.Entry(line: 1, text: "http://a/1"),
            URLList.Entry(line: 4, text: "http://b/2"),
            URLList.Entry(line: 6, text: "http://c/é"),
        ])
        #expect(URLList.entries(in: "").isEmpty)
        #expect(URLList.entries(in: "\n\n").isEmpty)
        #expect(URLList.entries(in: "http://last/no-newline") == [URLList.Entry(line: 1, text: "http://last/no-newline")])
        // A '#' inside a line is part of it (a fragment), and a no-break space is not trimmed.
        #expect(URLList.entries(in: "http://h/p#frag\n\u{A0}x").map(\.text) == ["http://h/p#frag", "\u{A0}x"])
    }
}
