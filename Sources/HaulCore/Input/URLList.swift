/// The entries of a URL list (`haul get -i FILE`, `haul add -i FILE`): one per line, ASCII
/// spaces, tabs and CRs around each dropped, blank lines and lines starting with `#` skipped,
/// as wget and aria2 read theirs.
///
/// Read on the bytes in one pass: splitting the text's UTF-8 view and making substrings cost
/// ~7,000 instructions a line, and a list is read before the first download can start.
public enum URLList {
    /// One URL of the list and the line it was on (from 1), for error messages.
    public struct Entry: Sendable, Hashable {
        public var line: Int
        public var text: String

        public init(line: Int, text: String) {
            self.line = line
            self.text = text
        }
    }

    /// The entries of `text`, in order. Lines end at LF (a CR before it is trimmed away).
    public static func entries(in text: String) -> [Entry] {
        var text = text
        text.makeContiguousUTF8()
        return text.utf8.withContiguousStorageIfAvailable(Self.entries(inBytes:)) ?? Self.entries(inBytes: Array(text.utf8))
    }

    private static func entries<Bytes: RandomAccessCollection<UInt8>>(inBytes bytes: Bytes) -> [Entry] where Bytes.Index == Int {
        var entries: [Entry] = []
        var line = 1
        var start = bytes.startIndex
        while start < bytes.endIndex {
            var end = start
            while end < bytes.endIndex, bytes[end] != UInt8(ascii: "\n") { end += 1 }
            let text = trimmedString(of: bytes[start..<end])
            if let first = text.utf8.first, first != UInt8(ascii: "#") {
                entries.append(Entry(line: line, text: text))
            }
            line += 1
            start = end + 1
        }
        return entries
    }
}
