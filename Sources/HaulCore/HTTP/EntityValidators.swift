/// The validators that identify one version of a representation: `ETag` and `Last-Modified`.
///
/// A resumed download may only be spliced onto earlier bytes when the server confirms, through
/// `If-Range`, that the representation is still the same one.
public struct EntityValidators: Sendable, Hashable, Codable {
    /// The `ETag` value exactly as the server sent it, including quotes and any `W/` prefix.
    public var entityTag: String?
    /// The `Last-Modified` value exactly as the server sent it.
    public var lastModified: String?

    public init(entityTag: String? = nil, lastModified: String? = nil) {
        self.entityTag = entityTag?.trimmingASCIIWhitespace()
        self.lastModified = lastModified?.trimmingASCIIWhitespace()
        if self.entityTag?.isEmpty == true { self.entityTag = nil }
        if self.lastModified?.isEmpty == true { self.lastModified = nil }
    }

    /// Reads the validators from response headers.
    public init(headers: HTTPHeaderFields) {
        self.init(entityTag: headers["ETag"], lastModified: headers["Last-Modified"])
    }

    /// Whether the entity tag is a strong one (no `W/` prefix), as `If-Range` requires.
    public var hasStrongEntityTag: Bool {
        guard let tag = self.entityTag else { return false }
        let bytes = tag.utf8
        return bytes.count >= 2 && bytes.first == UInt8(ascii: "\"") && bytes.last == UInt8(ascii: "\"")
    }

    /// The value to send in `If-Range`: the strong entity tag, else `Last-Modified`, else `nil`
    /// (a weak tag alone cannot make a range request conditional, RFC 9110 §13.1.5).
    public var ifRangeValue: String? {
        if self.hasStrongEntityTag { return self.entityTag }
        if let date = self.lastModified, HTTPDate.parse(date) != nil { return date }
        return nil
    }

    /// Whether `other` names the same representation, judged by the validator `If-Range` would use.
    public func identifiesSameEntity(as other: EntityValidators) -> Bool {
        if self.hasStrongEntityTag || other.hasStrongEntityTag {
            return self.entityTag == other.entityTag
        }
        guard let mine = self.lastModified, let theirs = other.lastModified else { return false }
        return mine == theirs
    }
}
