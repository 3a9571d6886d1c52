import NIOCore

#if canImport(Glibc)
import Glibc
#endif

/// Finds the lines of a byte stream as its reads arrive: each byte is searched for the newline
/// once, however many reads a long line takes (a `queueAdd` of thousands of downloads is one
/// line of up to a mebibyte, read 2-64 KiB at a time; a list of thousands is one answer). The
/// daemon's socket reads requests with it, the client's event loop reads answers and events.
///
/// It used to be searched from the line's start at every read: 3,400 instructions a download of
/// a 5,000-download line, and for a line of the limit read 64 KiB at a time, 8 MiB searched.
package struct LineScanner {
    /// The longest line taken; a longer one is ``LineTooLong``, whether its newline is here yet
    /// or not.
    package let maximumLength: Int
    /// How many of the buffer's readable bytes are known to hold no newline.
    private var searched = 0
    /// Bytes searched for a newline, in all (each byte of the stream at most once).
    package private(set) var bytesSearched = 0

    package init(maximumLength: Int) {
        self.maximumLength = maximumLength
    }

    /// The next whole line in `buffer`, read from it with its newline; `nil` while its newline
    /// has not arrived (call again with the same buffer, more bytes appended).
    ///
    /// - Throws: ``LineTooLong`` once the line is known to be longer than ``maximumLength``.
    package mutating func nextLine(in buffer: inout ByteBuffer) throws(LineTooLong) -> ByteBuffer? {
        let readable = buffer.readableBytes
        let start = min(self.searched, readable)
        let newline = buffer.withUnsafeReadableBytes { bytes -> Int? in
            guard readable > start, let base = bytes.baseAddress,
                let found = memchr(base + start, Int32(UInt8(ascii: "\n")), readable - start)
            else { return nil }
            return base.distance(to: UnsafeRawPointer(found))
        }
        self.bytesSearched += (newline.map { $0 + 1 } ?? readable) - start
        guard let length = newline else {
            self.searched = readable
            if readable > self.maximumLength { throw LineTooLong() }
            return nil
        }
        self.searched = 0
        // A long line whose end came in the same read as its rest is refused as well.
        if length > self.maximumLength { throw LineTooLong() }
        let line = buffer.readSlice(length: length)!
        buffer.moveReaderIndex(forwardBy: 1)
        return line
    }

    package struct LineTooLong: Error {}
}
