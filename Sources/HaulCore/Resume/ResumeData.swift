import Foundation

/// The resume data of a download: a small, versioned, self-describing JSON document that says
/// where the partial file is and which entity its bytes belong to. It never holds the body.
///
/// Produced by `cancel(byProducingResumeData:)` and carried in a failed download's error; given
/// back to `downloadTask(withResumeData:)`.
public struct ResumeData: Sendable, Hashable, Codable {
    /// The value of `format` in every Haul resume-data document.
    public static let formatIdentifier = "dev.haul.resume-data"
    /// The newest layout this build writes and the newest it reads.
    public static let currentVersion = 1
    /// Larger input is refused before parsing: genuine resume data is a few hundred bytes.
    public static let maximumEncodedSize = 64 * 1024

    public var format: String
    public var version: Int
    /// The URL the bytes came from (after redirects).
    public var url: URL
    /// The URL of the original request.
    public var originalURL: URL
    /// The request's header fields, replayed on resume.
    public var requestHeaders: HTTPHeaderFields
    /// The absolute path of the partial file holding `resumePoint.offset` bytes.
    public var partialFilePath: String
    /// How far the download got and which entity it belongs to.
    public var resumePoint: ResumePoint
    /// When the resume data was produced.
    public var createdAt: Date

    public init(
        url: URL,
        originalURL: URL,
        requestHeaders: HTTPHeaderFields,
        partialFilePath: String,
        resumePoint: ResumePoint,
        createdAt: Date = Date()
    ) {
        self.format = Self.formatIdentifier
        self.version = Self.currentVersion
        self.url = url
        self.originalURL = originalURL
        self.requestHeaders = requestHeaders
        self.partialFilePath = partialFilePath
        self.resumePoint = resumePoint
        self.createdAt = createdAt
    }

    /// Encodes the document as compact JSON with sorted keys.
    public func encoded() -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // The text `.iso8601` writes, formatted by hand (`.iso8601` loads ICU's time zones).
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(UTCTimestamp.iso8601(date))
        }
        // Encoding plain value types into JSON cannot fail.
        return try! encoder.encode(self)
    }

    /// Decodes and validates resume data.
    ///
    /// - Throws: ``ResumeDataError`` when the bytes are not Haul resume data, come from a newer
    ///   version, or describe something impossible (negative offset, relative path, non-HTTP URL).
    public static func decode(_ data: Data) throws(ResumeDataError) -> ResumeData {
        guard !data.isEmpty else { throw .empty }
        guard data.count <= maximumEncodedSize else { throw .tooLarge(byteCount: data.count) }
        // Resume data nests three levels; Foundation's JSON readers trap on some deep texts.
        guard !JSONNesting.exceeds(in: data) else { throw .notResumeData }
        guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw .notResumeData
        }
        guard object["format"] as? String == formatIdentifier else { throw .notResumeData }
        guard let version = object["version"] as? Int else { throw .notResumeData }
        guard version <= currentVersion, version >= 1 else { throw .unsupportedVersion(version) }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            // What Haul writes, read by hand; any other ISO 8601 form through Foundation.
            if let date = UTCTimestamp.parseISO8601(text) ?? (try? Date.ISO8601FormatStyle().parse(text)) {
                return date
            }
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not an ISO 8601 date: \(text)")
        }
        let value: ResumeData
        do {
            value = try decoder.decode(ResumeData.self, from: data)
        } catch {
            throw .malformed("\(error)")
        }
        guard ["http", "https"].contains(value.url.scheme?.lowercased() ?? "") else {
            throw .malformed("URL \(value.url.absoluteString) is not http or https")
        }
        guard value.resumePoint.offset >= 0 else { throw .malformed("negative offset") }
        if let length = value.resumePoint.entityLength, length < value.resumePoint.offset {
            throw .malformed("offset beyond the entity length")
        }
        if let segments = value.resumePoint.segments, let last = segments.ranges.last {
            guard let length = value.resumePoint.entityLength, last.upperBound <= length else {
                throw .malformed("segments beyond the entity length")
            }
        }
        guard value.partialFilePath.hasPrefix("/") else { throw .malformed("partial file path is not absolute") }
        guard value.resumePoint.validators.ifRangeValue != nil else { throw .malformed("no validator to resume with") }
        return value
    }
}

/// Why bytes given as resume data were refused.
public enum ResumeDataError: Error, Sendable, Hashable, CustomStringConvertible {
    case empty
    case tooLarge(byteCount: Int)
    case notResumeData
    case unsupportedVersion(Int)
    case malformed(String)

    public var description: String {
        switch self {
        case .empty: "resume data is empty"
        case .tooLarge(let count): "resume data is \(count) bytes, more than any genuine resume data"
        case .notResumeData: "the data is not Haul resume data"
        case .unsupportedVersion(let version): "resume data version \(version) is not supported by this build"
        case .malformed(let detail): "resume data is malformed: \(detail)"
        }
    }
}
