/// Where an interrupted download stands: how many bytes are safely on disk and which
/// representation they belong to.
public struct ResumePoint: Sendable, Hashable, Codable {
    /// Bytes of the entity already written, counted from its start.
    public var offset: Int64
    /// The validators of the representation those bytes came from.
    public var validators: EntityValidators
    /// The complete length of the representation, when the server told it.
    public var entityLength: Int64?
    /// Ranges of the same entity on disk beyond `offset` (a segmented download), synced before
    /// this point was recorded. A reader that ignores them still resumes correctly from
    /// `offset` (and rewrites the same bytes).
    public var segments: ByteRangeSet?
    /// Set when `offset` and `segments` come from a segmented download's map of synced bytes:
    /// the partial file may then hold bytes beyond them that no map vouches for (its size
    /// says nothing), so a reader must not grow the offset to the file's size.
    public var mapped: Bool?

    public init(offset: Int64, validators: EntityValidators, entityLength: Int64?, segments: ByteRangeSet? = nil) {
        self.offset = offset
        self.validators = validators
        self.entityLength = entityLength
        self.segments = segments.flatMap { $0.isEmpty ? nil : $0 }
    }

    /// A segmented download's point: the prefix of `done` as the offset, the rest as segments.
    public init(done: ByteRangeSet, validators: EntityValidators, entityLength: Int64) {
        var rest = done
        let prefix = done.prefixLength
        rest.remove(0..<prefix)
        self.init(offset: prefix, validators: validators, entityLength: entityLength, segments: rest)
        self.mapped = true
    }

    /// Every byte on disk: the prefix and the segments.
    public var done: ByteRangeSet {
        var done = self.segments ?? ByteRangeSet()
        done.insert(0..<self.offset)
        return done
    }
}
