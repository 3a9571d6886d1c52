import HaulCore
import Testing

/// Scripts of events into the download state machine and the actions expected out.
@Suite("DownloadStateMachine")
struct DownloadStateMachineTests {
    let etag = "\"v1\""
    var validators: EntityValidators { EntityValidators(entityTag: etag, lastModified: nil) }
    var point: ResumePoint { ResumePoint(offset: 1000, validators: validators, entityLength: 5000) }

    func headers(_ pairs: [(String, String)]) -> HTTPHeaderFields { HTTPHeaderFields(pairs) }

    @Test func freshDownloadSendsNoRangeAndFinishesAtContentLength() {
        var machine = DownloadStateMachine()
        #expect(machine.requestWillBeSent().isEmpty)
        let action = machine.responseHeadReceived(
            status: 200,
            headers: headers([("Content-Length", "10"), ("ETag", etag), ("Accept-Ranges", "bytes")])
        )
        #expect(action == .writeBody(fileOffset: 0, truncateFile: true, resumedAtOffset: nil, expectedTotal: 10))
        machine.bodyPartWritten(byteCount: 4)
        #expect(machine.resumePoint == ResumePoint(offset: 4, validators: validators, entityLength: 10))
        machine.bodyPartWritten(byteCount: 6)
        #expect(machine.bodyCompleted() == .finish(total: 10))
    }

    @Test func shortBodyIsTruncationWithResumePoint() {
        var machine = DownloadStateMachine()
        _ = machine.requestWillBeSent()
        _ = machine.responseHeadReceived(
            status: 200,
            headers: headers([("Content-Length", "10"), ("ETag", etag), ("Accept-Ranges", "bytes")])
        )
        machine.bodyPartWritten(byteCount: 7)
        let expectedPoint = ResumePoint(offset: 7, validators: validators, entityLength: 10)
        #expect(machine.bodyCompleted() == .failTruncated(received: 7, expected: 10, resumePoint: expectedPoint))
        #expect(machine.transferStopped() == expectedPoint, "a truncated body stays resumable")
    }

    @Test func responseWithoutValidatorIsNotResumable() {
        var machine = DownloadStateMachine()
        _ = machine.requestWillBeSent()
        _ = machine.responseHeadReceived(status: 200, headers: headers([("Content-Length", "10"), ("Accept-Ranges", "bytes")]))
        machine.bodyPartWritten(byteCount: 3)
        #expect(machine.transferStopped() == nil)
    }

    @Test func resumeSendsRangeAndIfRange() {
        var machine = DownloadStateMachine(resume: point)
        let sent = machine.requestWillBeSent()
        #expect(sent.map(\.0) == ["Range", "If-Range"])
        #expect(sent.map(\.1) == ["bytes=1000-", etag])
    }

    @Test func matching206Appends() {
        var machine = DownloadStateMachine(resume: point)
        _ = machine.requestWillBeSent()
        let action = machine.responseHeadReceived(
            status: 206,
            headers: headers([("Content-Range", "bytes 1000-4999/5000"), ("Content-Length", "4000"), ("ETag", etag)])
        )
        #expect(action == .writeBody(fileOffset: 1000, truncateFile: true, resumedAtOffset: 1000, expectedTotal: 5000))
        machine.bodyPartWritten(byteCount: 4000)
        #expect(machine.bodyCompleted() == .finish(total: 5000))
    }

    @Test func twoHundredStartsOverAtZero() {
        var machine = DownloadStateMachine(resume: point)
        _ = machine.requestWillBeSent()
        let action = machine.responseHeadReceived(
            status: 200,
            headers: headers([("Content-Length", "6000"), ("ETag", "\"v2\""), ("Accept-Ranges", "bytes")])
        )
        #expect(action == .writeBody(fileOffset: 0, truncateFile: true, resumedAtOffset: 0, expectedTotal: 6000))
    }

    @Test("A 206 that does not start at the offset is never spliced", arguments: [
        "bytes 1001-4999/5000",  // shifted start
        "bytes 1000-1015/5000",  // partial range
        "bytes 1000-5999/6000",  // entity length changed
        "bytes */5000",  // not satisfied
        "garbage",
    ])
    func mismatched206IsRequestedAgain(contentRange: String) {
        var machine = DownloadStateMachine(resume: point)
        _ = machine.requestWillBeSent()
        let action = machine.responseHeadReceived(status: 206, headers: headers([("Content-Range", contentRange), ("ETag", etag)]))
        guard case .requestAgainWithoutRange = action else {
            Issue.record("expected requestAgainWithoutRange for \(contentRange), got \(action)")
            return
        }
        #expect(machine.requestWillBeSent().isEmpty, "the repeated request must not carry Range")
        let second = machine.responseHeadReceived(status: 206, headers: headers([("Content-Range", contentRange)]))
        guard case .fail = second else {
            Issue.record("a second bad 206 must fail, got \(second)")
            return
        }
    }

    @Test func a206NamingAnotherEntityIsRejected() {
        var machine = DownloadStateMachine(resume: point)
        _ = machine.requestWillBeSent()
        let action = machine.responseHeadReceived(
            status: 206,
            headers: headers([("Content-Range", "bytes 1000-4999/5000"), ("ETag", "\"other\"")])
        )
        guard case .requestAgainWithoutRange = action else {
            Issue.record("got \(action)")
            return
        }
    }

    @Test func rangeNotSatisfiableAtExactLengthMeansComplete() {
        var machine = DownloadStateMachine(resume: ResumePoint(offset: 5000, validators: validators, entityLength: 5000))
        _ = machine.requestWillBeSent()
        #expect(machine.responseHeadReceived(status: 416, headers: headers([("Content-Range", "bytes */5000")])) == .finishWithExistingBytes(total: 5000))
    }

    @Test func rangeNotSatisfiableOtherwiseRequestsAgain() {
        var machine = DownloadStateMachine(resume: point)
        _ = machine.requestWillBeSent()
        guard case .requestAgainWithoutRange = machine.responseHeadReceived(status: 416, headers: headers([("Content-Range", "bytes */800")])) else {
            Issue.record("416 with another length must not finish")
            return
        }
    }

    @Test func errorStatusOnResumeKeepsTheBytes() {
        var machine = DownloadStateMachine(resume: point)
        _ = machine.requestWillBeSent()
        #expect(machine.responseHeadReceived(status: 503, headers: headers([("Retry-After", "3")])) == .failKeepingBytes(status: 503))
        #expect(machine.transferStopped() == point)
    }

    @Test func weakETagAloneGivesNoResumeHeaders() {
        let weak = ResumePoint(offset: 10, validators: EntityValidators(entityTag: "W/\"x\""), entityLength: nil)
        var machine = DownloadStateMachine(resume: weak)
        #expect(machine.requestWillBeSent().isEmpty)
    }

    @Test func unrequested206MustCoverTheWholeEntity() {
        var machine = DownloadStateMachine()
        _ = machine.requestWillBeSent()
        guard case .fail = machine.responseHeadReceived(status: 206, headers: headers([("Content-Range", "bytes 5-9/10")])) else {
            Issue.record("a partial 206 to a plain request must fail")
            return
        }
    }
}
