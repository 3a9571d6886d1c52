import Foundation
import HaulCore
import Testing

@Suite("ResumeData codec")
struct ResumeDataTests {
    func sample() -> ResumeData {
        ResumeData(
            url: URL(string: "https://example.com/a.iso")!,
            originalURL: URL(string: "https://example.com/latest")!,
            requestHeaders: HTTPHeaderFields([("User-Agent", "x")]),
            partialFilePath: "/tmp/a.part",
            resumePoint: ResumePoint(offset: 42, validators: EntityValidators(entityTag: "\"e\""), entityLength: 100),
            createdAt: Date(timeIntervalSince1970: 1_700_000_000)
        )
    }

    @Test func roundTrips() throws {
        let encoded = self.sample().encoded()
        #expect(encoded.count < 1024)
        #expect(try ResumeData.decode(encoded) == self.sample())
        let text = String(decoding: encoded, as: UTF8.self)
        #expect(text.contains("\"format\":\"dev.haul.resume-data\""), "self-describing")
        #expect(text.contains("\"version\":1"), "versioned")
    }

    @Test func datesAreWrittenAsJSONEncoderWritesThemAndReadInEveryISOForm() throws {
        let foundation = JSONEncoder()
        foundation.dateEncodingStrategy = .iso8601
        for seconds in [0, 1_700_000_000, 951_782_400 /* 29 Feb 2000 */, 4_102_444_799, 1_700_000_000.75] as [Double] {
            let date = Date(timeIntervalSince1970: seconds)
            let expected = String(decoding: try foundation.encode([date]), as: UTF8.self)
            #expect("[\"\(UTCTimestamp.iso8601(date))\"]" == expected)
            #expect(UTCTimestamp.parseISO8601(UTCTimestamp.iso8601(date)) == Date(timeIntervalSince1970: seconds.rounded(.down)))
        }
        for bad in ["2023-02-29T00:00:00Z", "2023-13-01T00:00:00Z", "2023-11-14T24:00:00Z", "2023-11-14 22:13:20Z", "2023-11-14T22:13:20"] {
            #expect(UTCTimestamp.parseISO8601(bad) == nil, "\(bad)")
        }
        // Resume data whose date another writer gave an offset still loads.
        let text = String(decoding: self.sample().encoded(), as: UTF8.self)
        #expect(text.contains("\"createdAt\":\"2023-11-14T22:13:20Z\""))
        let offset = text.replacingOccurrences(of: "2023-11-14T22:13:20Z", with: "2023-11-14T23:13:20+01:00")
        #expect(try ResumeData.decode(Data(offset.utf8)).createdAt == Date(timeIntervalSince1970: 1_700_000_000))
        let garbage = text.replacingOccurrences(of: "2023-11-14T22:13:20Z", with: "yesterday")
        #expect(throws: ResumeDataError.self) { try ResumeData.decode(Data(garbage.utf8)) }
    }

    @Test("Foreign or corrupt bytes are refused with a reason", arguments: [
        ("", ResumeDataError.empty),
        ("not json", .notResumeData),
        ("{\"format\":\"other\",\"version\":1}", .notResumeData),
        ("<?xml version=\"1.0\"?><plist><dict/></plist>", .notResumeData),
        ("{\"format\":\"dev.haul.resume-data\",\"version\":99}", .unsupportedVersion(99)),
    ])
    func refusesBadInput(text: String, expected: ResumeDataError) {
        #expect(throws: expected) { try ResumeData.decode(Data(text.utf8)) }
    }

    @Test func refusesImpossibleValues() throws {
        var negative = self.sample()
        negative.resumePoint.offset = -1
        #expect(throws: ResumeDataError.self) { try ResumeData.decode(negative.encoded()) }

        var beyond = self.sample()
        beyond.resumePoint.offset = 101
        #expect(throws: ResumeDataError.self) { try ResumeData.decode(beyond.encoded()) }

        var relative = self.sample()
        relative.partialFilePath = "a.part"
        #expect(throws: ResumeDataError.self) { try ResumeData.decode(relative.encoded()) }

        var ftp = self.sample()
        ftp.url = URL(string: "ftp://example.com/a")!
        #expect(throws: ResumeDataError.self) { try ResumeData.decode(ftp.encoded()) }

        #expect(throws: ResumeDataError.tooLarge(byteCount: 70_000)) { try ResumeData.decode(Data(count: 70_000)) }
    }

    @Test func truncatedDocumentIsRefused() {
        let encoded = self.sample().encoded()
        #expect(throws: ResumeDataError.self) { try ResumeData.decode(encoded.prefix(encoded.count / 2)) }
    }
}

@Suite("HTTP pieces")
struct HTTPPiecesTests {
    @Test func contentRangeParsing() {
        #expect(ContentRange(headerValue: "bytes 0-9/10") == .satisfied(first: 0, last: 9, completeLength: 10))
        #expect(ContentRange(headerValue: "bytes 5-9/*") == .satisfied(first: 5, last: 9, completeLength: nil))
        #expect(ContentRange(headerValue: "bytes */10") == .unsatisfied(completeLength: 10))
        #expect(ContentRange(headerValue: "bytes 9-5/10") == nil)
        #expect(ContentRange(headerValue: "bytes 0-10/10") == nil)
        #expect(ContentRange(headerValue: "items 0-1/2") == nil)
        #expect(ContentRange(headerValue: "bytes -1-5/10") == nil)
    }

    @Test func ifRangePrefersStrongETag() {
        #expect(EntityValidators(entityTag: "\"a\"", lastModified: "Sun, 06 Nov 1994 08:49:37 GMT").ifRangeValue == "\"a\"")
        #expect(EntityValidators(entityTag: "W/\"a\"", lastModified: "Sun, 06 Nov 1994 08:49:37 GMT").ifRangeValue == "Sun, 06 Nov 1994 08:49:37 GMT")
        #expect(EntityValidators(entityTag: "W/\"a\"").ifRangeValue == nil)
        #expect(EntityValidators(lastModified: "yesterday").ifRangeValue == nil)
    }

    @Test func resumabilityNeedsGetValidatorAndRanges() {
        let good = HTTPHeaderFields([("ETag", "\"a\""), ("Accept-Ranges", "bytes")])
        #expect(RangeResumeRules.notResumableReason(method: "GET", status: 200, headers: good) == nil)
        #expect(RangeResumeRules.notResumableReason(method: "POST", status: 200, headers: good) == .methodIsNotGet)
        #expect(RangeResumeRules.notResumableReason(method: "GET", status: 200, headers: HTTPHeaderFields([("Accept-Ranges", "bytes")])) == .noValidator)
        #expect(RangeResumeRules.notResumableReason(method: "GET", status: 200, headers: HTTPHeaderFields([("ETag", "\"a\""), ("Accept-Ranges", "none")])) == .rangesNotAccepted)
        #expect(RangeResumeRules.notResumableReason(method: "GET", status: 404, headers: good) == .notSuccessful)
        // `Accept-Ranges` is a list of tokens, any case, spaces around commas; one header or several.
        for value in ["BYTES", " none , Bytes\t", "x-custom,bytes", "bytes,", ", bytes", "bytes ,none", "bytes"] {
            let headers = HTTPHeaderFields([("ETag", "\"a\""), ("Accept-Ranges", value)])
            #expect(RangeResumeRules.notResumableReason(method: "GET", status: 200, headers: headers) == nil, "\(value)")
        }
        for value in ["bytesx", "byte", "by tes", "", ",", "none", "  ", "xbytes", "bytes-x, none"] {
            let headers = HTTPHeaderFields([("ETag", "\"a\""), ("Accept-Ranges", value)])
            #expect(RangeResumeRules.notResumableReason(method: "GET", status: 200, headers: headers) == .rangesNotAccepted, "\(value)")
        }
        let twoHeaders = HTTPHeaderFields([("ETag", "\"a\""), ("Accept-Ranges", "none"), ("Accept-Ranges", "bytes")])
        #expect(RangeResumeRules.notResumableReason(method: "GET", status: 200, headers: twoHeaders) == nil)
        // A strong tag is quoted at both ends; `"` alone is not one.
        #expect(EntityValidators(entityTag: "\"").ifRangeValue == nil)
        #expect(EntityValidators(entityTag: "\"\"").ifRangeValue == "\"\"")
        #expect(EntityValidators(entityTag: "abc").ifRangeValue == nil)
    }

    @Test func httpDates() {
        let date = HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT")
        #expect(date?.timeIntervalSince1970 == 784_111_777)
        #expect(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT")?.timeIntervalSince1970 == 784_111_777)
        #expect(HTTPDate.parse("Sun Nov  6 08:49:37 1994")?.timeIntervalSince1970 == 784_111_777)
        #expect(HTTPDate.format(Date(timeIntervalSince1970: 784_111_777)) == "Sun, 06 Nov 1994 08:49:37 GMT")
    }
}

@Suite("RetryPolicy")
struct RetryPolicyTests {
    let policy = RetryPolicy(maximumAttempts: 4, initialDelay: 1, maximumDelay: 10)

    @Test func backsOffExponentiallyWithJitterAndCap() {
        #expect(self.policy.decision(afterAttempt: 1, failure: .connectionLost, randomUnit: 1) == .retry(afterSeconds: 1))
        #expect(self.policy.decision(afterAttempt: 2, failure: .timedOut, randomUnit: 1) == .retry(afterSeconds: 2))
        #expect(self.policy.decision(afterAttempt: 3, failure: .timedOut, randomUnit: 0) == .retry(afterSeconds: 2))
        let capped = RetryPolicy(maximumAttempts: 50, initialDelay: 1, maximumDelay: 10)
        #expect(capped.decision(afterAttempt: 20, failure: .timedOut, randomUnit: 1) == .retry(afterSeconds: 10))
    }

    @Test func stopsAfterTheLastAttempt() {
        #expect(self.policy.decision(afterAttempt: 4, failure: .connectionLost, randomUnit: 0.5) == .giveUp)
    }

    @Test func honoursRetryAfterAndItsLimit() {
        #expect(self.policy.decision(afterAttempt: 1, failure: .serverStatus(503), retryAfter: 7, randomUnit: 0.5) == .retry(afterSeconds: 7))
        #expect(self.policy.decision(afterAttempt: 1, failure: .serverStatus(503), retryAfter: 3600, randomUnit: 0.5) == .giveUp)
    }

    @Test func permanentFailuresAreNotRetried() {
        #expect(self.policy.decision(afterAttempt: 1, failure: .serverStatus(404), randomUnit: 0.5) == .giveUp)
        #expect(self.policy.decision(afterAttempt: 1, failure: .permanent, randomUnit: 0.5) == .giveUp)
        #expect(self.policy.decision(afterAttempt: 1, failure: .cannotConnect, randomUnit: 0.5) == .giveUp)
    }

    @Test func parsesRetryAfter() {
        #expect(RetryPolicy.retryAfterSeconds("120") == 120)
        let now = Date(timeIntervalSince1970: 784_111_000)
        #expect(RetryPolicy.retryAfterSeconds("Sun, 06 Nov 1994 08:49:37 GMT", now: now) == 777)
        #expect(RetryPolicy.retryAfterSeconds("soon") == nil)
        #expect(RetryPolicy.retryAfterSeconds("-5") == nil)
    }
}
