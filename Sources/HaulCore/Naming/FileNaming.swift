import Foundation

/// Chooses safe local file names for downloads: from `Content-Disposition` (RFC 6266, with
/// RFC 8187 `filename*`), else from the URL, always sanitised so that a server cannot place a
/// file outside the destination directory or hide it.
public enum FileNaming {
    /// Longest name, in UTF-8 bytes, that common Linux file systems accept.
    public static let maximumNameBytes = 255

    /// The path of `name` in `directory` (one separator between them, as
    /// `NSString.appendingPathComponent` joins them, without bridging both strings to
    /// `NSString` and back: a queued file's start joins its partial path).
    public static func path(of name: String, in directory: String) -> String {
        directory.isEmpty || directory.hasSuffix("/") ? directory + name : directory + "/" + name
    }

    /// The name to save a download under.
    ///
    /// - Parameters:
    ///   - contentDisposition: the response's `Content-Disposition`, if any.
    ///   - url: the URL the body came from (after redirects).
    /// - Returns: a sanitised, non-empty file name without path separators.
    public static func suggestedFilename(contentDisposition: String?, url: URL) -> String {
        if let header = contentDisposition, let name = filename(fromContentDisposition: header),
            let safe = sanitize(name)
        {
            return safe
        }
        // The path as written, decoded once here: `url.path` decodes it already (so a name
        // with "%2541" in it was decoded twice), and decoding the whole path costs ~3,000
        // instructions a file where the last component is all that is used.
        let last = String(lastPathComponent(of: url.path(percentEncoded: true)))
        let decoded = last.utf8.contains(UInt8(ascii: "%")) ? (last.removingPercentEncoding ?? last) : last
        return sanitize(decoded) ?? "index.html"
    }

    /// The last non-empty `/`-separated component of `path` (empty when there is none), found
    /// by scanning the UTF-8 bytes back from the end: `/` is ASCII, so the bounds are valid
    /// indices of the string. (`split` on characters cost ~6,500 instructions a name.)
    static func lastPathComponent(of path: String) -> Substring {
        let utf8 = path.utf8
        let slash = UInt8(ascii: "/")
        var end = utf8.endIndex
        while end > utf8.startIndex, utf8[utf8.index(before: end)] == slash { end = utf8.index(before: end) }
        var start = end
        while start > utf8.startIndex, utf8[utf8.index(before: start)] != slash { start = utf8.index(before: start) }
        return path[start..<end]
    }

    /// Extracts the file name parameter of a `Content-Disposition` value, preferring `filename*`.
    /// Returns `nil` when there is none; the result is not yet sanitised.
    public static func filename(fromContentDisposition value: String) -> String? {
        let parameters = parseParameters(value)
        if let extended = parameters["filename*"], let decoded = decodeExtendedValue(extended) {
            return decoded
        }
        return parameters["filename"]
    }

    /// Makes `name` safe to create inside a directory: keeps only the last path component,
    /// drops control characters and leading dots, and shortens it to ``maximumNameBytes``.
    ///
    /// - Returns: `nil` when nothing usable remains.
    public static func sanitize(_ name: String) -> String? {
        if Self.isPlain(name) { return name }
        let lastComponent = name.split(whereSeparator: { $0 == "/" || $0 == "\\" }).last.map(String.init) ?? ""
        var cleaned = String(
            String.UnicodeScalarView(
                lastComponent.unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7F }
            )
        )
        // Spaces and dots in turn until neither leads: ". .." must not come out as "..".
        while true {
            cleaned = cleaned.trimmingCharacters(in: .whitespaces)
            guard cleaned.hasPrefix(".") else { break }
            while cleaned.hasPrefix(".") { cleaned.removeFirst() }
        }
        guard !cleaned.isEmpty else { return nil }
        return truncate(cleaned, toBytes: maximumNameBytes)
    }

    /// Whether `name` needs no change: printable ASCII without separators, not starting with a
    /// dot or a space, not ending with a space, short enough. (Most names; no Foundation work.)
    private static func isPlain(_ name: String) -> Bool {
        let utf8 = name.utf8
        guard let first = utf8.first, let last = utf8.last, utf8.count <= maximumNameBytes,
              first != UInt8(ascii: "."), first != UInt8(ascii: " "), last != UInt8(ascii: " ")
        else { return false }
        return utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: "\\") || $0 == 0x20 }
    }

    /// The `index`-th alternative to `name` for avoiding a clash: `report (1).pdf`,
    /// `archive (2).tar.gz`.
    public static func numberedAlternative(to name: String, index: Int) -> String {
        let (stem, suffix) = splitExtension(name)
        let marker = " (\(index))"
        let room = maximumNameBytes - marker.utf8.count - suffix.utf8.count
        return truncate(stem, toBytes: max(1, room)) + marker + suffix
    }

    /// The first name among `name` (number 0), `name (1)`, `name (2)`, … from number `first` on
    /// for which `isTaken` is false, and its number. Asks `isTaken` once per name tried: a caller
    /// that hands out many copies of one name passes the last number it gave plus one, and the
    /// run costs one question a name instead of one per name given before.
    public static func firstAvailableName(
        for name: String, from first: Int = 0, isTaken: (String) -> Bool
    ) -> (name: String, number: Int) {
        var number = max(0, first)
        while true {
            let candidate = number == 0 ? name : numberedAlternative(to: name, index: number)
            if !isTaken(candidate) { return (candidate, number) }
            number += 1
        }
    }

    /// A free number for a name whose number `taken` is in use (0: the plain name), found in
    /// about 2·log₂(n) questions where n numbers in a row are taken — not n, as counting up one
    /// by one would: a directory holding `data`, `data (1)` … `data (9999)` is answered in 27.
    ///
    /// Numbers are made counting up, so those in use run without gaps, and then the answer is
    /// the lowest free one. Where they have gaps (files deleted), it is a free number past the
    /// last run of taken ones that the search steps on, not always the lowest: the answer is
    /// free, which is what matters, since the caller's own placement refuses a taken name.
    /// `isTaken` is asked with numbers above `taken` only; it is asked at most 64 times.
    public static func freeNumber(after taken: Int, isTaken: (Int) -> Bool) -> Int {
        // Doubling steps find a free number, then halving steps find where the run of taken
        // ones ends between it and the last taken number seen.
        var low = max(0, taken)  // taken
        var step = 1
        var high = low + step
        var questions = 0
        while questions < 64 {
            questions += 1
            guard isTaken(high) else { break }
            low = high
            if step < 1 << 30 { step *= 2 }
            high = low + step
        }
        while high - low > 1, questions < 64 {
            questions += 1
            let middle = low + (high - low) / 2
            if isTaken(middle) { low = middle } else { high = middle }
        }
        return high
    }

    static func splitExtension(_ name: String) -> (stem: String, suffix: String) {
        let lower = name.lowercased()
        for double in [".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst", ".tar.lz"] where lower.hasSuffix(double) {
            let cut = name.index(name.endIndex, offsetBy: -double.count)
            if cut > name.startIndex { return (String(name[..<cut]), String(name[cut...])) }
        }
        if let dot = name.lastIndex(of: "."), dot > name.startIndex {
            return (String(name[..<dot]), String(name[dot...]))
        }
        return (name, "")
    }

    static func truncate(_ text: String, toBytes limit: Int) -> String {
        guard text.utf8.count > limit else { return text }
        let (stem, suffix) = splitExtension(text)
        let keepSuffix = suffix.utf8.count < limit / 2 ? suffix : ""
        var result = ""
        var used = keepSuffix.utf8.count
        for character in (keepSuffix.isEmpty ? text : stem) {
            let size = String(character).utf8.count
            if used + size > limit { break }
            result.append(character)
            used += size
        }
        return result + keepSuffix
    }

    /// Splits `type; a=b; c="d"` into lower-cased parameter names and unquoted values.
    static func parseParameters(_ value: String) -> [String: String] {
        var result: [String: String] = [:]
        var index = value.startIndex
        // Skip the disposition type.
        while index < value.endIndex, value[index] != ";" { index = value.index(after: index) }
        while index < value.endIndex {
            index = value.index(after: index)  // past ';'
            while index < value.endIndex, value[index] == " " || value[index] == "\t" {
                index = value.index(after: index)
            }
            var name = ""
            while index < value.endIndex, value[index] != "=", value[index] != ";" {
                name.append(value[index])
                index = value.index(after: index)
            }
            guard index < value.endIndex, value[index] == "=" else { continue }
            index = value.index(after: index)
            var parameterValue = ""
            if index < value.endIndex, value[index] == "\"" {
                index = value.index(after: index)
                while index < value.endIndex, value[index] != "\"" {
                    if value[index] == "\\", value.index(after: index) < value.endIndex {
                        index = value.index(after: index)
                    }
                    parameterValue.append(value[index])
                    index = value.index(after: index)
                }
                if index < value.endIndex { index = value.index(after: index) }
                while index < value.endIndex, value[index] != ";" { index = value.index(after: index) }
            } else {
                while index < value.endIndex, value[index] != ";" {
                    parameterValue.append(value[index])
                    index = value.index(after: index)
                }
                parameterValue = parameterValue.trimmingASCIIWhitespace()
            }
            let key = name.trimmingASCIIWhitespace().lowercased()
            if !key.isEmpty, result[key] == nil { result[key] = parameterValue }
        }
        return result
    }

    /// Decodes an RFC 8187 ext-value: `UTF-8'lang'percent-encoded`.
    static func decodeExtendedValue(_ value: String) -> String? {
        let parts = value.split(separator: "'", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        let charset = parts[0].lowercased()
        guard charset == "utf-8" || charset == "iso-8859-1" else { return nil }
        let encoded = String(parts[2])
        if charset == "utf-8" { return encoded.removingPercentEncoding }
        // ISO-8859-1: each percent-escaped byte is one scalar.
        var bytes: [UInt8] = []
        var iterator = encoded.utf8.makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%"), let high = iterator.next(), let low = iterator.next(),
                let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16)
            {
                bytes.append(value)
            } else {
                bytes.append(byte)
            }
        }
        return String(String.UnicodeScalarView(bytes.map { Unicode.Scalar($0) }))
    }
}
