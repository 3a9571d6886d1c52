/// Where an interrupted download stands: how many bytes are safely on disk and which
/// representation they belong to.
public struct ResumePoint: Sendable, Hashable, Codable {
    /// Bytes of the entity already written, counted from its start.
    public var offset: Int64
    /// The validators of the representation those bytes came from.
    public var validators: EntityValidators
    /// The complete length of the representation, when the server told it.
    public var entityLength: Int64?

    public init(offset: Int64, validators: EntityValidators, entityLength: Int64?) {
        self.offset = offset
        self.validators = validators
        self.entityLength = entityLength
    }
}
