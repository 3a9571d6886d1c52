import Foundation

/// Whether a mirror may contribute bytes to a download whose entity the primary URL defined.
///
/// A mirror's first answer is a plain `Range` request (its validators are not known yet, and
/// another server's `ETag` for the same file is often different, so `If-Range` with the
/// primary's would only say "different"). Its bytes are used only when that answer is a `206`
/// at the asked start, inside the asked range, for an entity of the primary's length, and
/// - its validators name the primary's entity: the same strong `ETag`; or, when one of the two
///   has no strong `ETag` to compare, the same `Last-Modified` (mirroring keeps modification
///   times). Two different strong `ETag`s are two files as far as Haul can tell, even when
///   the dates agree (a build can write two files of one length in the same second), or
/// - the caller verifies the whole file with a checksum (``Policy/verifiedByChecksum``): then
///   the length must agree and the checksum has the last word.
///
/// Anything else drops the mirror, with a reason a user can act on. Later answers from an
/// accepted mirror are judged like the primary's segments against the mirror's own validators
/// (``acceptedValidators``); a change there drops the mirror, not the download.
public enum MirrorRules {
    public enum Policy: Sendable, Hashable {
        /// Mirrors must name the primary's entity with their validators.
        case sameValidators
        /// The caller checks the whole file against a given checksum.
        case verifiedByChecksum
    }

    public enum Verdict: Sendable, Hashable {
        /// Use the mirror; send `ifRange` (its own validator, when it has one) from now on.
        case accepted(ifRange: String?, validators: EntityValidators)
        /// Do not use the mirror.
        case dropped(String)
    }

    /// Judges the head of a mirror's first answer to `Range: bytes=asked` (no `If-Range`).
    public static func judgeFirstAnswer(
        status: Int,
        headers: HTTPHeaderFields,
        asked: Range<Int64>,
        length: Int64,
        primary: EntityValidators,
        policy: Policy
    ) -> Verdict {
        switch RangeResumeRules.judgeSegment(status: status, headers: headers, asked: asked, length: length, validators: EntityValidators()) {
        case .usable:
            break
        case .entityChanged(let reason), .notUsable(let reason):
            return .dropped(Self.mirrorWording(reason))
        }
        let answered = EntityValidators(headers: headers)
        let tagsDiffer = answered.hasStrongEntityTag && primary.hasStrongEntityTag && answered.entityTag != primary.entityTag
        if answered.identifiesSameEntity(as: primary) || (!tagsDiffer && answered.lastModified != nil && answered.lastModified == primary.lastModified) {
            return .accepted(ifRange: answered.ifRangeValue, validators: answered)
        }
        if policy == .verifiedByChecksum {
            return .accepted(ifRange: answered.ifRangeValue, validators: answered)
        }
        return .dropped(Self.disagreement(answered, primary))
    }

    /// Why the validators of `mirror` do not name the `primary`'s entity.
    static func disagreement(_ mirror: EntityValidators, _ primary: EntityValidators) -> String {
        if mirror.entityTag == nil, mirror.lastModified == nil {
            return "it names no validator to compare with the primary's (give a checksum to use it)"
        }
        if mirror.hasStrongEntityTag || primary.hasStrongEntityTag {
            let theirs = mirror.entityTag ?? "none"
            let ours = primary.entityTag ?? "none"
            return "its ETag \(theirs) is not the primary's \(ours) (give a checksum to use mirrors whose validators differ)"
        }
        if mirror.lastModified != nil, primary.lastModified != nil {
            return "its Last-Modified \(mirror.lastModified!) is not the primary's \(primary.lastModified!) (give a checksum to use mirrors whose validators differ)"
        }
        return "it names no validator to compare with the primary's (give a checksum to use it)"
    }

    /// `judgeSegment`'s reasons speak of "a range request"; a dropped mirror's reason keeps
    /// them, with the length case worded for a mirror.
    private static func mirrorWording(_ reason: String) -> String {
        if reason.hasPrefix("the length changed from ") {
            let numbers = reason.dropFirst("the length changed from ".count).split(separator: " ")
            if numbers.count >= 3 { return "its length \(numbers[2]) bytes is not the primary's \(numbers[0])" }
        }
        return reason
    }
}

/// One source of a segmented download as shown to users: the primary URL or a mirror, how many
/// bytes of the file came from it, how many connections it has now, and why it was dropped.
public struct SegmentSourceReport: Sendable, Hashable, Codable {
    public var url: URL
    public var isPrimary: Bool
    /// Bytes of the file written from this source (this run).
    public var bytes: Int64
    public var connections: Int
    /// Why the source no longer contributes (`nil` while it may).
    public var dropped: String?

    public init(url: URL, isPrimary: Bool, bytes: Int64 = 0, connections: Int = 0, dropped: String? = nil) {
        self.url = url
        self.isPrimary = isPrimary
        self.bytes = bytes
        self.connections = connections
        self.dropped = dropped
    }
}
