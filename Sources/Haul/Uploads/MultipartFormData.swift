import Foundation
import HaulCore

/// A `multipart/form-data` body (RFC 7578) built from fields and files, as forms upload them.
///
/// ```swift
/// var form = MultipartFormData()
/// form.append("Ada", named: "author")
/// try form.appendFile(at: URL(fileURLWithPath: "report.pdf"), named: "attachment")
/// var request = URLRequest(url: uploadURL)
/// request.httpMethod = "POST"
/// request.setValue(form.contentType, forHTTPHeaderField: "Content-Type")
/// let (body, response) = try await session.upload(for: request, from: form.encoded())
/// ```
///
/// Large files need not be loaded: ``write(to:)`` streams the body into a file for
/// `uploadTask(with:fromFile:)`.
public struct MultipartFormData: Sendable {
    enum Content: Sendable {
        case data(Data)
        case file(URL)
    }

    struct Part: Sendable {
        var name: String
        var filename: String?
        var mimeType: String?
        var content: Content
    }

    /// The boundary between parts: random, so it cannot occur in ordinary content.
    public let boundary: String
    private var parts: [Part] = []

    public init(boundary: String = "haul-" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()) {
        self.boundary = boundary
    }

    /// The request's `Content-Type` value.
    public var contentType: String { "multipart/form-data; boundary=\(self.boundary)" }

    /// A text field.
    public mutating func append(_ value: String, named name: String) {
        self.parts.append(Part(name: name, filename: nil, mimeType: nil, content: .data(Data(value.utf8))))
    }

    /// A file from memory; the MIME type comes from `filename`'s extension when not given.
    public mutating func append(_ data: Data, named name: String, filename: String, mimeType: String? = nil) {
        let type = mimeType ?? MIMEType.forPathExtension((filename as NSString).pathExtension)
        self.parts.append(Part(name: name, filename: filename, mimeType: type, content: .data(data)))
    }

    /// A file from disk, read when the body is encoded or written.
    ///
    /// - Throws: `CocoaError(.fileReadNoSuchFile)` when there is no readable regular file.
    public mutating func appendFile(at url: URL, named name: String, filename: String? = nil, mimeType: String? = nil) throws {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory), !isDirectory.boolValue,
            FileManager.default.isReadableFile(atPath: url.path)
        else {
            throw CocoaError(.fileReadNoSuchFile, userInfo: [NSFilePathErrorKey: url.path])
        }
        let filename = filename ?? url.lastPathComponent
        let type = mimeType ?? MIMEType.forPathExtension(url.pathExtension)
        self.parts.append(Part(name: name, filename: filename, mimeType: type, content: .file(url)))
    }

    /// The whole body in memory.
    public func encoded() throws -> Data {
        var body = Data()
        try self.forEachChunk { body.append($0) }
        return body
    }

    /// Writes the body to `url` (1 MiB at a time for files), for large uploads from a file.
    public func write(to url: URL) throws {
        guard FileManager.default.createFile(atPath: url.path, contents: nil) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: url.path])
        }
        let handle = try FileHandle(forWritingTo: url)
        defer { try? handle.close() }
        try self.forEachChunk { try handle.write(contentsOf: $0) }
    }

    /// The body's length in bytes.
    public func contentLength() throws -> Int64 {
        var total: Int64 = 0
        for part in self.parts {
            total += Int64(self.header(for: part).utf8.count) + 2
            switch part.content {
            case .data(let data): total += Int64(data.count)
            case .file(let url):
                let size = (try FileManager.default.attributesOfItem(atPath: url.path)[.size] as? NSNumber)?.int64Value ?? 0
                total += size
            }
        }
        return total + Int64("--\(self.boundary)--\r\n".utf8.count)
    }

    private func forEachChunk(_ body: (Data) throws -> Void) throws {
        for part in self.parts {
            try body(Data(self.header(for: part).utf8))
            switch part.content {
            case .data(let data):
                try body(data)
            case .file(let url):
                let handle = try FileHandle(forReadingFrom: url)
                defer { try? handle.close() }
                while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty { try body(chunk) }
            }
            try body(Data("\r\n".utf8))
        }
        try body(Data("--\(self.boundary)--\r\n".utf8))
    }

    private func header(for part: Part) -> String {
        var header = "--\(self.boundary)\r\nContent-Disposition: form-data; name=\"\(Self.quoted(part.name))\""
        if let filename = part.filename { header += "; filename=\"\(Self.quoted(filename))\"" }
        header += "\r\n"
        if let mimeType = part.mimeType { header += "Content-Type: \(mimeType)\r\n" }
        return header + "\r\n"
    }

    /// Escapes a name for a quoted parameter as browsers do (RFC 7578 §4.2): `"` → `%22`,
    /// CR and LF → `%0D` / `%0A`.
    static func quoted(_ text: String) -> String {
        text.replacingOccurrences(of: "\"", with: "%22").replacingOccurrences(of: "\r", with: "%0D").replacingOccurrences(of: "\n", with: "%0A")
    }
}
