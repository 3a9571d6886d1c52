import Foundation
import HaulDaemon
import Testing

@Suite("WorkingSetTrimmer")
struct WorkingSetTrimmerTests {
    /// The resident kilobytes of this process's read-only file mappings (code and constants).
    static func residentCodeKiB() throws -> Int {
        // Read with read(2): /proc files report a size of 0.
        let descriptor = open("/proc/self/smaps", O_RDONLY)
        try #require(descriptor >= 0)
        defer { close(descriptor) }
        var smaps: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count <= 0 { break }
            smaps.append(contentsOf: chunk[0..<count])
        }
        var total = 0
        var counting = false
        for line in String(decoding: smaps, as: UTF8.self).split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            if let first = fields.first, first.contains("-"), fields.count >= 5 {
                counting = fields.count == 6 && fields[1].hasPrefix("r") && !fields[1].contains("w") && fields[5].hasPrefix("/")
            } else if counting, fields.first == "Rss:", fields.count >= 2, let kib = Int(fields[1]) {
                total += kib
            }
        }
        return total
    }

    @Test("Trimming advises every read-only file mapping and the resident code shrinks")
    func trims() throws {
        let before = try Self.residentCodeKiB()
        let advised = WorkingSetTrimmer.trim()
        let after = try Self.residentCodeKiB()
        print("resident code: \(before) KiB → \(after) KiB; \(advised / 1_048_576) MiB of mappings advised")
        #expect(advised > 10 << 20, "the test binary and the Swift libraries were found in /proc/self/maps")
        #expect(after < before, "pages went back (unless every one is shared with another process)")
    }
}
