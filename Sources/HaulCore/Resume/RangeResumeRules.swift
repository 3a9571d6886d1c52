/// The HTTP rules for resuming a download (RFC 9110 §13.1.5 `If-Range`, §14 range requests).
///
/// Pure functions: given what was asked and what came back, they say whether the body may be
/// appended to the bytes on disk. Bytes are never spliced unless the server proved, with a
/// `206` whose `Content-Range` starts exactly at the offset, that they continue the same entity.
public enum RangeResumeRules {
    /// Why a response cannot later be resumed, for diagnostics.
    public enum NotResumableReason: String, Sendable, Hashable {
        case methodIsNotGet = "only GET downloads can be resumed"
        case noValidator = "the server sent neither a strong ETag nor Last-Modified"
        case rangesNotAccepted = "the server does not accept byte ranges"
        case notSuccessful = "the response is not a successful one"
    }

    /// Whether a download answered with `status` and `headers` could be resumed later.
    ///
    /// - Returns: `nil` when it can be resumed, otherwise the reason it cannot.
    public static func notResumableReason(
        method: String,
        status: Int,
        headers: HTTPHeaderFields
    ) -> NotResumableReason? {
        self.notResumableReason(method: method, status: status, headers: headers, validators: EntityValidators(headers: headers))
    }

    /// As ``notResumableReason(method:status:headers:)``, with the validators the caller has
    /// already read from `headers` (each lookup walks the fields).
    public static func notResumableReason(
        method: String,
        status: Int,
        headers: HTTPHeaderFields,
        validators: EntityValidators
    ) -> NotResumableReason? {
        guard method == "GET" || method.caseInsensitiveEquals("GET") else { return .methodIsNotGet }
        guard status == 200 || status == 206 else { return .notSuccessful }
        if validators.ifRangeValue == nil { return .noValidator }
        if status == 206 { return nil }
        guard headers.contains("Accept-Ranges", where: Self.listNamesBytes) else {
            return .rangesNotAccepted
        }
        if headers["Content-Encoding"].map({ $0.lowercased() != "identity" }) == true, headers["Content-Length"] == nil {
            // A compressed body of unknown length cannot be checked for completeness on resume.
            return .rangesNotAccepted
        }
        return nil
    }

    /// Whether a comma-separated header value lists the token `bytes` (any case, optional
    /// whitespace around each element), read on the UTF-8 bytes in place: no array, no string.
    static func listNamesBytes(_ value: String) -> Bool {
        if let answer = value.utf8.withContiguousStorageIfAvailable(Self.listNamesBytes(_:)) { return answer }
        return Array(value.utf8).withUnsafeBufferPointer(Self.listNamesBytes(_:))
    }

    private static func listNamesBytes(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        func isBlank(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 }
        var start = 0
        while start <= bytes.count {
            var end = start
            while end < bytes.count, bytes[end] != UInt8(ascii: ",") { end += 1 }
            var low = start
            var high = end
            while low < high, isBlank(bytes[low]) { low += 1 }
            while high > low, isBlank(bytes[high - 1]) { high -= 1 }
            if high - low == 5, bytes[low] | 0x20 == UInt8(ascii: "b"), bytes[low + 1] | 0x20 == UInt8(ascii: "y"),
               bytes[low + 2] | 0x20 == UInt8(ascii: "t"), bytes[low + 3] | 0x20 == UInt8(ascii: "e"),
               bytes[low + 4] | 0x20 == UInt8(ascii: "s") {
                return true
            }
            start = end + 1
        }
        return false
    }

    /// The headers that ask for the rest of the entity after `point`: `Range` and `If-Range`.
    ///
    /// - Returns: an empty list when `point` has no usable validator or nothing on disk.
    public static func requestHeaders(resumingFrom point: ResumePoint) -> [(String, String)] {
        guard point.offset > 0, let ifRange = point.validators.ifRangeValue else { return [] }
        return [("Range", "bytes=\(point.offset)-"), ("If-Range", ifRange)]
    }

    /// What to do with a final (non-redirect) response to a request made with `point`'s headers.
    public enum Verdict: Sendable, Hashable {
        /// The body continues the bytes on disk at `offset`.
        case append(offset: Int64, entityLength: Int64?)
        /// The server sent the whole entity (it ignored the range, or the entity changed):
        /// the bytes on disk must be discarded and the body written from the start.
        case startOver(entityLength: Int64?)
        /// The bytes on disk are already the complete entity (416 naming exactly that length).
        case alreadyComplete(entityLength: Int64)
        /// The response cannot be spliced and carries no usable whole entity: request again
        /// without a range, or fail.
        case requestAgainWithoutRange(reason: String)
        /// An unsuccessful status that is not about ranges (404, 500, …): hand it on as it is.
        case otherStatus
    }

    /// Judges a response to a range request for the rest of the entity after `point`.
    public static func evaluate(status: Int, headers: HTTPHeaderFields, resumingFrom point: ResumePoint) -> Verdict {
        switch status {
        case 206:
            guard let value = headers["Content-Range"], let range = ContentRange(headerValue: value) else {
                return .requestAgainWithoutRange(reason: "206 response without a single-part Content-Range")
            }
            guard case .satisfied(let first, let last, let complete) = range else {
                return .requestAgainWithoutRange(reason: "206 response with an unsatisfied Content-Range")
            }
            guard first == point.offset else {
                return .requestAgainWithoutRange(
                    reason: "server answered with bytes \(first)-\(last) instead of starting at \(point.offset)"
                )
            }
            if let complete {
                guard last == complete - 1 else {
                    return .requestAgainWithoutRange(reason: "server sent a partial range \(first)-\(last)/\(complete)")
                }
                if let known = point.entityLength, known != complete {
                    return .requestAgainWithoutRange(
                        reason: "entity length changed from \(known) to \(complete) bytes"
                    )
                }
            }
            if let length = headers["Content-Length"].flatMap({ Int64(strictDecimal: $0.trimmingASCIIWhitespace()) }),
                length != last - first + 1
            {
                return .requestAgainWithoutRange(reason: "Content-Length \(length) disagrees with Content-Range")
            }
            let responseValidators = EntityValidators(headers: headers)
            if responseValidators.ifRangeValue != nil, !responseValidators.identifiesSameEntity(as: point.validators) {
                return .requestAgainWithoutRange(reason: "206 response names a different entity")
            }
            return .append(offset: first, entityLength: complete ?? point.entityLength)
        case 200:
            return .startOver(entityLength: contentLength(of: headers))
        case 416:
            if let value = headers["Content-Range"], case .unsatisfied(let complete)? = ContentRange(headerValue: value),
                complete == point.offset, point.entityLength == nil || point.entityLength == complete
            {
                return .alreadyComplete(entityLength: complete)
            }
            return .requestAgainWithoutRange(reason: "server refused the range (416)")
        default:
            return .otherStatus
        }
    }

    /// What the answer to one segment's request (`Range: bytes=asked` with `If-Range`) means.
    public enum SegmentVerdict: Sendable, Hashable {
        /// A `206` with exactly the asked start, the entity's length and validators.
        case usable
        /// The entity is not the one the other bytes came from: drop every byte of it.
        case entityChanged(String)
        /// This answer cannot be used (the server ignores ranges, lies, or failed); the other
        /// bytes stay valid.
        case notUsable(String)
    }

    /// Judges the head of an answer to a segment request for `asked` of an entity of `length`
    /// bytes identified by `validators`. Bytes are only used from a `206` whose
    /// `Content-Range` starts exactly at the asked offset, ends inside the asked range, names
    /// the same length, and whose validators (when sent) name the same entity.
    public static func judgeSegment(
        status: Int,
        headers: HTTPHeaderFields,
        asked: Range<Int64>,
        length: Int64,
        validators: EntityValidators
    ) -> SegmentVerdict {
        let answered = EntityValidators(headers: headers)
        // Without validators of its own to compare (a mirror's first answer), only the
        // length and the range are judged.
        let differs = validators.ifRangeValue != nil && answered.ifRangeValue != nil && !answered.identifiesSameEntity(as: validators)
        if status == 200 {
            // With If-Range, a 200 is the server's way to say the entity changed; without a
            // different validator it may simply ignore ranges.
            return differs ? .entityChanged("a range request was answered with a different entity") : .notUsable("the server answered a range request with the whole file (200)")
        }
        guard status == 206 else { return .notUsable("the server answered a range request with status \(status)") }
        guard let value = headers["Content-Range"], case .satisfied(let first, let last, let complete)? = ContentRange(headerValue: value) else {
            return .notUsable("a 206 answer without a single-part Content-Range")
        }
        guard first == asked.lowerBound, last >= first, last < asked.upperBound else {
            return .notUsable("asked for bytes \(asked.lowerBound)-\(asked.upperBound - 1), got Content-Range \(value)")
        }
        if let complete, complete != length {
            return .entityChanged("the length changed from \(length) to \(complete) bytes")
        }
        if differs { return .entityChanged("a 206 answer names a different entity") }
        if let sent = headers["Content-Length"].flatMap({ Int64(strictDecimal: $0.trimmingASCIIWhitespace()) }), sent != last - first + 1 {
            return .notUsable("Content-Length \(sent) disagrees with Content-Range \(value)")
        }
        return .usable
    }

    /// The `Content-Length` of an identity-encoded response, if it sent one.
    public static func contentLength(of headers: HTTPHeaderFields) -> Int64? {
        if let encoding = headers["Content-Encoding"]?.lowercased(), encoding != "identity" { return nil }
        return headers["Content-Length"].flatMap { Int64(strictDecimal: $0.trimmingASCIIWhitespace()) }
    }
}
