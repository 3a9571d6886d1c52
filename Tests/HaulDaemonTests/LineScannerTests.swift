import HaulDaemonClient
import NIOCore
import Testing

@Suite("Request lines as reads arrive")
struct LineScannerTests {
    /// Feeds `stream` in reads of `readSize` bytes, as `ByteToMessageHandler` does (one buffer
    /// that grows by each read, asked again until it has no whole line); the lines, and what
    /// stopped it.
    private func lines(of stream: [UInt8], readSize: Int, limit: Int) -> (lines: [String], tooLong: Bool, scanner: LineScanner) {
        var scanner = LineScanner(maximumLength: limit)
        var buffer = ByteBuffer()
        var lines: [String] = []
        var offset = 0
        while offset < stream.count {
            let end = min(stream.count, offset + readSize)
            buffer.writeBytes(stream[offset..<end])
            offset = end
            do {
                while let line = try scanner.nextLine(in: &buffer) { lines.append(String(buffer: line)) }
            } catch {
                return (lines, true, scanner)
            }
        }
        return (lines, false, scanner)
    }

    @Test("Lines split over many reads, several in one read, empty ones: each as sent")
    func splitsLines() {
        let text = "first\n\nsecond line\nthird\n" + String(repeating: "x", count: 10_000) + "\nlast"
        for readSize in [1, 3, 7, 4096, 100_000] {
            let result = self.lines(of: Array(text.utf8), readSize: readSize, limit: 1 << 20)
            #expect(result.lines == ["first", "", "second line", "third", String(repeating: "x", count: 10_000)], "reads of \(readSize)")
            #expect(!result.tooLong)
        }
    }

    @Test("A line of a mebibyte read 4 KiB at a time is searched once, not from its start at every read")
    func searchesEachByteOnce() {
        let line = [UInt8](repeating: UInt8(ascii: "a"), count: 1 << 20) + [UInt8(ascii: "\n")] + Array("next\n".utf8)
        let result = self.lines(of: line, readSize: 4096, limit: 1 << 20)
        #expect(result.lines.count == 2 && result.lines[1] == "next")
        // Searched from the line's start at every read, it was 128 MiB.
        #expect(result.scanner.bytesSearched == line.count, "\(result.scanner.bytesSearched) bytes searched for \(line.count)")
    }

    @Test("The limit holds exactly, whether the newline comes in the read that passes it or later")
    func limitIsExact() {
        let limit = 10_000
        for readSize in [1, 999, 4096, limit + 1, 50_000] {
            let atLimit = [UInt8](repeating: UInt8(ascii: "b"), count: limit) + [UInt8(ascii: "\n")]
            let taken = self.lines(of: atLimit, readSize: readSize, limit: limit)
            #expect(taken.lines.count == 1 && !taken.tooLong, "a line of the limit, reads of \(readSize)")
            let over = [UInt8](repeating: UInt8(ascii: "b"), count: limit + 1) + [UInt8(ascii: "\n")]
            let refused = self.lines(of: over, readSize: readSize, limit: limit)
            #expect(refused.lines.isEmpty && refused.tooLong, "one byte over, reads of \(readSize)")
        }
        // Refused before its newline comes: garbage without one cannot grow the buffer.
        let endless = self.lines(of: [UInt8](repeating: UInt8(ascii: "c"), count: 3 * limit), readSize: 1000, limit: limit)
        #expect(endless.tooLong && endless.lines.isEmpty)
    }
}
