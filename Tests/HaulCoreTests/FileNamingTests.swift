import Foundation
import HaulCore
import Testing

@Suite("File naming")
struct FileNamingTests {
    let url = URL(string: "https://example.com/dir/report%20final.pdf?x=1")!

    @Test func prefersContentDispositionFilenameStar() {
        let name = FileNaming.suggestedFilename(
            contentDisposition: "attachment; filename=\"plain.txt\"; filename*=UTF-8''%E2%82%AC%20rates.txt",
            url: self.url
        )
        #expect(name == "€ rates.txt")
    }

    @Test func quotedFilenameWithEscapes() {
        #expect(FileNaming.filename(fromContentDisposition: "attachment; filename=\"a \\\"b\\\".txt\"") == "a \"b\".txt")
        #expect(FileNaming.filename(fromContentDisposition: "inline; filename=bare.bin") == "bare.bin")
    }

    @Test func fallsBackToTheDecodedURLName() {
        #expect(FileNaming.suggestedFilename(contentDisposition: nil, url: self.url) == "report final.pdf")
        #expect(FileNaming.suggestedFilename(contentDisposition: nil, url: URL(string: "http://h/")!) == "index.html")
        #expect(FileNaming.suggestedFilename(contentDisposition: "attachment", url: URL(string: "http://h/x.iso")!) == "x.iso")
    }

    @Test func lastComponentOfTheURLPath() {
        #expect(FileNaming.suggestedFilename(contentDisposition: nil, url: URL(string: "http://h/a/b/c.tar.gz")!) == "c.tar.gz")
        #expect(FileNaming.suggestedFilename(contentDisposition: nil, url: URL(string: "http://h/dir/sub//")!) == "sub")
        #expect(FileNaming.suggestedFilename(contentDisposition: nil, url: URL(string: "http://h/%C3%A9t%C3%A9.txt")!) == "été.txt")
        #expect(FileNaming.suggestedFilename(contentDisposition: nil, url: URL(string: "http://h/caf%C3%A9/m%C3%BCsli")!) == "müsli")
        #expect(FileNaming.suggestedFilename(contentDisposition: nil, url: URL(string: "http://h")!) == "index.html")
        #expect(FileNaming.suggestedFilename(contentDisposition: nil, url: URL(string: "http://h///")!) == "index.html")
        // Escapes are decoded once: "%2541" names "%41", not "A".
        #expect(FileNaming.suggestedFilename(contentDisposition: nil, url: URL(string: "http://h/a%2541.txt")!) == "a%41.txt")
        #expect(FileNaming.suggestedFilename(contentDisposition: nil, url: URL(string: "http://h/100%25.txt")!) == "100%.txt")
        // An escaped slash still cannot make a path: only its last part names the file.
        #expect(FileNaming.suggestedFilename(contentDisposition: nil, url: URL(string: "http://h/a%2F..%2Fb.txt")!) == "b.txt")
    }

    @Test("Hostile names cannot escape or hide", arguments: [
        ("../../etc/passwd", "passwd"),
        ("/etc/shadow", "shadow"),
        ("..\\..\\win.ini", "win.ini"),
        (".bashrc", "bashrc"),
        ("a\u{0}b\nc.txt", "abc.txt"),
        ("..", nil),
        ("/", nil),
        ("   ", nil),
    ] as [(String, String?)])
    func sanitizes(input: String, expected: String?) {
        #expect(FileNaming.sanitize(input) == expected)
    }

    @Test func traversalInHeaderFallsBackToSafeName() {
        let name = FileNaming.suggestedFilename(contentDisposition: "attachment; filename=\"../\"", url: URL(string: "http://h/safe.bin")!)
        #expect(name == "safe.bin")
    }

    @Test func longNamesAreShortenedKeepingTheExtension() {
        let long = String(repeating: "é", count: 300) + ".tar.gz"
        let safe = FileNaming.sanitize(long)!
        #expect(safe.utf8.count <= 255)
        #expect(safe.hasSuffix(".tar.gz"))
    }

    @Test func pathsJoinWithOneSeparator() {
        #expect(FileNaming.path(of: "a.bin", in: "/srv/files") == "/srv/files/a.bin")
        #expect(FileNaming.path(of: "a.bin", in: "/srv/files/") == "/srv/files/a.bin")
        #expect(FileNaming.path(of: "a.bin", in: "/") == "/a.bin")
        #expect(FileNaming.path(of: "日本 é.bin", in: "rel/dir") == "rel/dir/日本 é.bin")
        for directory in ["/srv/files", "/srv/files/", "/", "rel/dir", ""] {
            #expect(FileNaming.path(of: "x.haul-part", in: directory) == (directory as NSString).appendingPathComponent("x.haul-part"))
        }
    }

    @Test func numberedAlternatives() {
        #expect(FileNaming.numberedAlternative(to: "a.pdf", index: 1) == "a (1).pdf")
        #expect(FileNaming.numberedAlternative(to: "b.tar.gz", index: 2) == "b (2).tar.gz")
        #expect(FileNaming.numberedAlternative(to: "README", index: 3) == "README (3)")
        var taken: Set = ["a.pdf", "a (1).pdf"]
        #expect(FileNaming.firstAvailableName(for: "a.pdf") { taken.contains($0) } == ("a (2).pdf", 2))
        #expect(FileNaming.firstAvailableName(for: "b.pdf") { taken.contains($0) } == ("b.pdf", 0))
        // Going on from a number: the same answer as from 0 when the names below are taken,
        // with one question instead of one per name below.
        taken.formUnion((2..<500).map { FileNaming.numberedAlternative(to: "a.pdf", index: $0) })
        var questions = 0
        let next = FileNaming.firstAvailableName(for: "a.pdf", from: 499) { questions += 1; return taken.contains($0) }
        #expect(next == ("a (500).pdf", 500))
        #expect(FileNaming.firstAvailableName(for: "a.pdf") { taken.contains($0) } == next)
        #expect(questions == 2)
    }

    @Test("A free number is found in about 2·log₂(n) questions where n numbers in a row are taken")
    func freeNumberIsFoundByHalving() {
        for count in [0, 1, 2, 3, 7, 8, 9, 100, 1_000, 9_999, 65_536, 1_000_000] {
            var questions = 0
            // 0 (the plain name) … count are taken.
            let free = FileNaming.freeNumber(after: 0) { number in
                questions += 1
                return number <= count
            }
            #expect(free == count + 1, "with \(count) numbers taken")
            let bound = 2 * Int(log2(Double(count + 2)).rounded(.up)) + 2
            #expect(questions <= bound, "\(questions) questions for \(count) numbers taken")
        }
        var questions = 0
        _ = FileNaming.freeNumber(after: 0) { _ in questions += 1; return true }
        #expect(questions == 64, "a name system that says every name is taken gets a bounded number of questions")
        // From a number known taken: the next one, asked once.
        questions = 0
        #expect(FileNaming.freeNumber(after: 41) { questions += 1; return $0 <= 41 } == 42)
        #expect(questions == 1)
        // Numbers with a gap: a free one, above the number given.
        let taken: Set = [1, 2, 3, 5, 6]
        let answer = FileNaming.freeNumber(after: 0) { taken.contains($0) }
        #expect(answer > 0 && !taken.contains(answer))
    }
}

@Suite("Formatting")
struct FormattingTests {
    @Test func units() {
        #expect(ByteCountFormatting.bytes(999) == "999 B")
        #expect(ByteCountFormatting.bytes(1536) == "1.5 KiB")
        #expect(ByteCountFormatting.bytes(1 << 30) == "1.0 GiB")
        #expect(ByteCountFormatting.rate(bytesPerSecond: 10 * 1_048_576) == "10.0 MiB/s")
        #expect(ByteCountFormatting.duration(seconds: 42) == "42s")
        #expect(ByteCountFormatting.duration(seconds: 185) == "3m05s")
        #expect(ByteCountFormatting.duration(seconds: 7620) == "2h07m")
        #expect(ByteCountFormatting.parseSize("1.5M") == 1_572_864)
        #expect(ByteCountFormatting.parseSize("x") == nil)
    }

    @Test func rateMeterAveragesOverTheWindow() {
        var meter = TransferRateMeter(window: 5)
        #expect(meter.bytesPerSecond == nil)
        meter.record(total: 0, at: 0)
        meter.record(total: 1000, at: 1)
        meter.record(total: 3000, at: 2)
        #expect(meter.bytesPerSecond == 1500)
        #expect(meter.secondsRemaining(total: 3000, expected: 6000) == 2)
    }

    @Test func progressLineFitsAndShowsFigures() {
        let line = ProgressLine.render(name: "ubuntu.iso", received: 512 << 20, expected: 1 << 30, bytesPerSecond: Double(64 << 20), width: 100)
        #expect(line.count <= 100)
        #expect(line.contains("50%"))
        #expect(line.contains("512.0 MiB/1.0 GiB"))
        #expect(line.contains("64.0 MiB/s"))
        #expect(line.contains("ETA 8s"))
        let narrow = ProgressLine.render(name: String(repeating: "n", count: 80), received: 1, expected: nil, bytesPerSecond: nil, width: 40)
        #expect(narrow.count <= 40)
    }
}

@Suite("RedirectPolicy")
struct RedirectPolicyTests {
    let policy = RedirectPolicy(maximumRedirects: 3)
    let start = URL(string: "http://a.example/start")!

    @Test func resolvesRelativeLocationsAndRewritesMethods() throws {
        let next = try self.policy.nextRequest(status: 303, location: "/next", currentURL: self.start, method: "POST", visited: [self.start])
        #expect(next.url.absoluteString == "http://a.example/next")
        #expect(next.method == "GET")
        #expect(next.dropsBody)
        let kept = try self.policy.nextRequest(status: 307, location: "/next", currentURL: self.start, method: "POST", visited: [self.start])
        #expect(kept.method == "POST")
        #expect(!kept.dropsBody)
    }

    @Test func dropsCredentialsAcrossOrigins() throws {
        let next = try self.policy.nextRequest(status: 302, location: "http://b.example/x", currentURL: self.start, method: "GET", visited: [self.start])
        #expect(next.headersToRemove.contains("Authorization"))
        let same = try self.policy.nextRequest(status: 302, location: "/x", currentURL: self.start, method: "GET", visited: [self.start])
        #expect(!same.headersToRemove.contains("Authorization"))
    }

    @Test func refusesLoopsLongChainsAndBadTargets() {
        let b = URL(string: "http://a.example/b")!
        #expect(throws: RedirectPolicy.Refusal.loop(self.start)) {
            try self.policy.nextRequest(status: 302, location: "/start", currentURL: b, method: "GET", visited: [self.start, b])
        }
        let chain = (0..<4).map { URL(string: "http://a.example/\($0)")! }
        #expect(throws: RedirectPolicy.Refusal.tooManyRedirects(3)) {
            try self.policy.nextRequest(status: 302, location: "/new", currentURL: chain.last!, method: "GET", visited: chain)
        }
        #expect(throws: RedirectPolicy.Refusal.missingLocation) {
            try self.policy.nextRequest(status: 302, location: nil, currentURL: self.start, method: "GET", visited: [self.start])
        }
        #expect(throws: RedirectPolicy.Refusal.unsupportedScheme("file")) {
            try self.policy.nextRequest(status: 302, location: "file:///etc/passwd", currentURL: self.start, method: "GET", visited: [self.start])
        }
    }
}
