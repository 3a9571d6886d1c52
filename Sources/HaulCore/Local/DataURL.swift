import Foundation

/// A `data:` URL (RFC 2397): `data:[<mediatype>][;base64],<data>`.
public struct DataURL: Sendable, Hashable {
    /// The media type without parameters, lowercased (`text/plain` when none is given).
    public var mimeType: String
    /// The `charset` parameter, if any (`US-ASCII` when no media type is given).
    public var textEncodingName: String?
    public var bytes: Data

    public enum ParseError: Error, Sendable, Hashable, CustomStringConvertible {
        case notDataURL
        case missingComma
        case badBase64
        case badPercentEncoding

        public var description: String {
            switch self {
            case .notDataURL: "not a data: URL"
            case .missingComma: "a data: URL needs a ',' before its data"
            case .badBase64: "the data: URL's base64 data is malformed"
            case .badPercentEncoding: "the data: URL's data has malformed percent-encoding"
            }
        }
    }

    public init(parsing text: String) throws(ParseError) {
        guard text.count >= 5, text.prefix(5).lowercased() == "data:" else { throw .notDataURL }
        let rest = text.dropFirst(5)
        guard let comma = rest.firstIndex(of: ",") else { throw .missingComma }
        var parameters = rest[..<comma].split(separator: ";", omittingEmptySubsequences: false).map {
            $0.trimmingCharacters(in: .whitespaces)
        }
        let payload = String(rest[rest.index(after: comma)...])
        var isBase64 = false
        if let last = parameters.last, last.lowercased() == "base64" {
            isBase64 = true
            parameters.removeLast()
        }
        let type = parameters.first ?? ""
        if type.isEmpty {
            self.mimeType = "text/plain"
            self.textEncodingName = "US-ASCII"
        } else {
            self.mimeType = type.lowercased()
            self.textEncodingName = nil
        }
        for parameter in parameters.dropFirst() {
            let pair = parameter.split(separator: "=", maxSplits: 1)
            if pair.count == 2, pair[0].lowercased() == "charset" {
                self.textEncodingName = String(pair[1])
            }
        }
        let decoded = try Self.percentDecoded(payload)
        if isBase64 {
            let compact = String(decoding: decoded, as: UTF8.self).filter { !$0.isWhitespace }
            let padded = compact + String(repeating: "=", count: (4 - compact.count % 4) % 4)
            guard let data = Data(base64Encoded: padded) else { throw .badBase64 }
            self.bytes = data
        } else {
            self.bytes = decoded
        }
    }

    /// Percent-decodes to bytes (the data need not be UTF-8).
    static func percentDecoded(_ text: String) throws(ParseError) -> Data {
        var bytes = Data()
        var iterator = Array(text.utf8).makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = iterator.next().flatMap(Self.hexValue), let low = iterator.next().flatMap(Self.hexValue) else {
                throw .badPercentEncoding
            }
            bytes.append(high << 4 | low)
        }
        return bytes
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

/// MIME types of common file extensions, for `file:` responses and multipart uploads.
public enum MIMEType {
    /// `application/octet-stream` when the extension is unknown.
    public static func forPathExtension(_ pathExtension: String) -> String {
        self.table[pathExtension.lowercased()] ?? "application/octet-stream"
    }

    /// The text encoding a `file:` response reports for text types.
    public static func textEncodingName(for mimeType: String) -> String? {
        mimeType.hasPrefix("text/") || mimeType == "application/json" || mimeType.hasSuffix("+xml") || mimeType == "application/xml"
            ? "utf-8" : nil
    }

    static let table: [String: String] = [
        "txt": "text/plain", "text": "text/plain", "log": "text/plain", "md": "text/markdown", "csv": "text/csv",
        "html": "text/html", "htm": "text/html", "css": "text/css", "js": "text/javascript", "mjs": "text/javascript",
        "json": "application/json", "xml": "application/xml", "svg": "image/svg+xml", "rss": "application/rss+xml",
        "png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp",
        "bmp": "image/bmp", "ico": "image/vnd.microsoft.icon", "tif": "image/tiff", "tiff": "image/tiff", "heic": "image/heic",
        "avif": "image/avif",
        "mp3": "audio/mpeg", "wav": "audio/wav", "ogg": "audio/ogg", "oga": "audio/ogg", "flac": "audio/flac", "m4a": "audio/mp4",
        "aac": "audio/aac", "opus": "audio/opus",
        "mp4": "video/mp4", "m4v": "video/mp4", "mov": "video/quicktime", "webm": "video/webm", "mkv": "video/x-matroska",
        "avi": "video/x-msvideo", "ogv": "video/ogg",
        "pdf": "application/pdf", "zip": "application/zip", "gz": "application/gzip", "tgz": "application/gzip",
        "tar": "application/x-tar", "bz2": "application/x-bzip2", "xz": "application/x-xz", "zst": "application/zstd",
        "7z": "application/x-7z-compressed", "rar": "application/vnd.rar", "iso": "application/x-iso9660-image",
        "deb": "application/vnd.debian.binary-package", "rpm": "application/x-rpm", "dmg": "application/x-apple-diskimage",
        "wasm": "application/wasm", "bin": "application/octet-stream", "exe": "application/vnd.microsoft.portable-executable",
        "doc": "application/msword", "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "xls": "application/vnd.ms-excel", "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "ppt": "application/vnd.ms-powerpoint", "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        "odt": "application/vnd.oasis.opendocument.text", "epub": "application/epub+zip", "rtf": "application/rtf",
        "woff": "font/woff", "woff2": "font/woff2", "ttf": "font/ttf", "otf": "font/otf",
        "yaml": "application/yaml", "yml": "application/yaml", "toml": "application/toml", "sh": "application/x-sh",
    ]
}
