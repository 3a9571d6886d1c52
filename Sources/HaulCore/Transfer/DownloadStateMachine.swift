/// The decisions of one download attempt, from the request to the last body byte, as a value
/// type with no I/O: the engine feeds it events and carries out the actions it returns.
///
/// It covers range resumption (`Range` + `If-Range`), splicing rules, restarting when the server
/// cannot continue, and the final completeness check. Redirects are resolved by the engine
/// before a response reaches it: it only sees final responses.
public struct DownloadStateMachine: Sendable {
    /// What the engine must do with a final response head.
    public enum HeadAction: Sendable, Hashable {
        /// Write the body into the partial file at `fileOffset`. When `truncateFile` is set, the
        /// file is cut to `fileOffset` first. `resumedAtOffset` is non-nil when the request was a
        /// resume attempt: report it through `didResumeAtOffset`.
        case writeBody(fileOffset: Int64, truncateFile: Bool, resumedAtOffset: Int64?, expectedTotal: Int64?)
        /// The bytes on disk already are the whole entity; skip the body and finish.
        case finishWithExistingBytes(total: Int64)
        /// Drop the bytes on disk and send the request again without `Range`.
        case requestAgainWithoutRange(reason: String)
        /// The download cannot go on; `reason` is for the user.
        case fail(reason: String)
        /// A resume request got an unsuccessful status (503, 404, …) that says nothing about
        /// ranges. The bytes on disk stay valid: fail this attempt and keep ``resumePoint``.
        case failKeepingBytes(status: Int)
    }

    /// What the engine must do when the body has ended.
    public enum CompletionAction: Sendable, Hashable {
        /// The file holds the complete entity of `total` bytes.
        case finish(total: Int64)
        /// Fewer bytes arrived than the server announced; `resumePoint` is set when the download
        /// can continue from them.
        case failTruncated(received: Int64, expected: Int64, resumePoint: ResumePoint?)
    }

    private enum State: Sendable {
        case idle(resume: ResumePoint?)
        case awaitingHead(resume: ResumePoint?)
        case receivingBody(Body)
        case finished
        case failed
    }

    private struct Body: Sendable {
        var validators: EntityValidators
        var isResumable: Bool
        var expectedTotal: Int64?
        var bytesOnDisk: Int64
        /// Ranges of this entity on disk beyond the bytes written in order (a resumed segmented
        /// download).
        var segments: ByteRangeSet? = nil
    }

    private var state: State
    private let method: String
    private var hasRequestedAgainWithoutRange = false

    /// Creates the machine for a fresh download, or for one continuing from `resume`.
    public init(method: String = "GET", resume: ResumePoint? = nil) {
        self.method = method.uppercased()
        let usable = resume.flatMap { $0.offset > 0 && $0.validators.ifRangeValue != nil ? $0 : nil }
        self.state = .idle(resume: usable)
    }

    /// The extra request headers for the next request: `Range` and `If-Range` when resuming.
    ///
    /// Call once before each request is sent (including after ``HeadAction/requestAgainWithoutRange(reason:)``).
    public mutating func requestWillBeSent() -> [(String, String)] {
        switch self.state {
        case .idle(let resume), .awaitingHead(let resume):
            self.state = .awaitingHead(resume: resume)
            return resume.map(RangeResumeRules.requestHeaders(resumingFrom:)) ?? []
        case .receivingBody, .finished, .failed:
            preconditionFailure("requestWillBeSent() after a response was accepted")
        }
    }

    /// A final response head arrived.
    public mutating func responseHeadReceived(status: Int, headers: HTTPHeaderFields) -> HeadAction {
        guard case .awaitingHead(let resume) = self.state else {
            preconditionFailure("responseHeadReceived without a request in flight")
        }
        let validators = EntityValidators(headers: headers)
        let isResumable = RangeResumeRules.notResumableReason(
            method: self.method, status: status, headers: headers, validators: validators
        ) == nil

        guard let resume else {
            // A plain request: whatever comes is written from the start, even an error page
            // (URLSession downloads the body of a 404 too and lets the caller check the status).
            var expected = RangeResumeRules.contentLength(of: headers)
            if status == 206 {
                guard let value = headers["Content-Range"],
                    case .satisfied(0, let last, let complete?)? = ContentRange(headerValue: value),
                    last == complete - 1
                else {
                    self.state = .failed
                    return .fail(reason: "server sent a partial response (206) to a request for the whole entity")
                }
                expected = complete
            }
            self.state = .receivingBody(
                Body(validators: validators, isResumable: isResumable, expectedTotal: expected, bytesOnDisk: 0)
            )
            return .writeBody(fileOffset: 0, truncateFile: true, resumedAtOffset: nil, expectedTotal: expected)
        }

        switch RangeResumeRules.evaluate(status: status, headers: headers, resumingFrom: resume) {
        case .append(let offset, let entityLength):
            let kept = EntityValidators(
                entityTag: validators.entityTag ?? resume.validators.entityTag,
                lastModified: validators.lastModified ?? resume.validators.lastModified
            )
            self.state = .receivingBody(
                Body(validators: kept, isResumable: true, expectedTotal: entityLength, bytesOnDisk: offset, segments: resume.segments)
            )
            // Bytes beyond the offset that the resume point vouches for stay in the file.
            return .writeBody(fileOffset: offset, truncateFile: resume.segments == nil, resumedAtOffset: offset, expectedTotal: entityLength)
        case .startOver(let entityLength):
            self.state = .receivingBody(
                Body(validators: validators, isResumable: isResumable, expectedTotal: entityLength, bytesOnDisk: 0)
            )
            return .writeBody(fileOffset: 0, truncateFile: true, resumedAtOffset: 0, expectedTotal: entityLength)
        case .alreadyComplete(let total):
            self.state = .finished
            return .finishWithExistingBytes(total: total)
        case .requestAgainWithoutRange(let reason):
            guard !self.hasRequestedAgainWithoutRange else {
                self.state = .failed
                return .fail(reason: reason)
            }
            self.hasRequestedAgainWithoutRange = true
            self.state = .idle(resume: nil)
            return .requestAgainWithoutRange(reason: reason)
        case .otherStatus:
            // Writing this error body from zero would destroy good bytes: keep them, and keep
            // the resume point so that a later attempt continues from it.
            self.state = .idle(resume: resume)
            return .failKeepingBytes(status: status)
        }
    }

    /// `byteCount` more body bytes were written to the file.
    public mutating func bodyPartWritten(byteCount: Int) {
        guard case .receivingBody(var body) = self.state else { return }
        body.bytesOnDisk += Int64(byteCount)
        self.state = .receivingBody(body)
    }

    /// The bytes of the entity on disk so far.
    public var bytesOnDisk: Int64 {
        switch self.state {
        case .receivingBody(let body): body.bytesOnDisk
        case .idle(let resume), .awaitingHead(let resume): resume?.offset ?? 0
        case .finished, .failed: 0
        }
    }

    /// The entity whose body is being written: its validators, whether it can be resumed (and
    /// so fetched in ranges), and the ranges of it on disk beyond the bytes written in order.
    public var entity: (validators: EntityValidators, isResumable: Bool, segments: ByteRangeSet?)? {
        guard case .receivingBody(let body) = self.state else { return nil }
        return (body.validators, body.isResumable, body.segments)
    }

    /// The complete length announced for the entity, if any.
    public var expectedTotal: Int64? {
        switch self.state {
        case .receivingBody(let body): body.expectedTotal
        case .idle(let resume), .awaitingHead(let resume): resume?.entityLength
        case .finished, .failed: nil
        }
    }

    /// The server signalled the end of the body.
    public mutating func bodyCompleted() -> CompletionAction {
        guard case .receivingBody(let body) = self.state else {
            preconditionFailure("bodyCompleted without a body")
        }
        if let expected = body.expectedTotal, expected != body.bytesOnDisk {
            // The state stays `receivingBody`, so `resumePoint` still tells where to continue.
            return .failTruncated(
                received: body.bytesOnDisk,
                expected: expected,
                resumePoint: body.bytesOnDisk < expected ? self.resumePoint(of: body) : nil
            )
        }
        self.state = .finished
        return .finish(total: body.bytesOnDisk)
    }

    /// Where the download could continue from now (after a failure, a cancel or a pause),
    /// or `nil` when it cannot be resumed.
    public var resumePoint: ResumePoint? {
        switch self.state {
        case .receivingBody(let body): self.resumePoint(of: body)
        case .idle(let resume), .awaitingHead(let resume): resume
        case .finished, .failed: nil
        }
    }

    /// The download stopped before the body completed (error, cancel, pause).
    ///
    /// - Returns: where it could continue from, or `nil`.
    public mutating func transferStopped() -> ResumePoint? {
        let point = self.resumePoint
        self.state = .failed
        return point
    }

    private func resumePoint(of body: Body) -> ResumePoint? {
        guard body.isResumable, body.bytesOnDisk > 0 else { return nil }
        if let expected = body.expectedTotal, body.bytesOnDisk > expected { return nil }
        return ResumePoint(offset: body.bytesOnDisk, validators: body.validators, entityLength: body.expectedTotal)
    }
}
