import Foundation
import HaulDaemon
import Testing

@Suite("WorkingSetTrimmer")
struct WorkingSetTrimmerTests {
    /// The resident kilobytes of this process's read-only mappings of the file at `path`.
    static func residentKiB(ofMappingsOf path: String) throws -> Int {
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
                counting = fields.count == 6 && fields[1].hasPrefix("r") && !fields[1].contains("w") && fields[5] == path
            } else if counting, fields.first == "Rss:", fields.count >= 2, let kib = Int(fields[1]) {
                total += kib
            }
        }
        return total
    }

    @Test("Trimming advises every read-only file mapping, and their resident pages go back")
    func trims() throws {
        // A read-only mapping of a file of the test's own, every page touched: resident code
        // of the whole process would not do, since the other tests running at the same time
        // fault their code in meanwhile.
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("haul-trim-\(UUID().uuidString)").path
        try Data(repeating: 7, count: 8 << 20).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let descriptor = open(path, O_RDONLY)
        try #require(descriptor >= 0)
        defer { close(descriptor) }
        let mapping = try #require(mmap(nil, 8 << 20, PROT_READ, MAP_PRIVATE, descriptor, 0))
        try #require(mapping != MAP_FAILED)
        defer { munmap(mapping, 8 << 20) }
        var sum = 0
        for offset in stride(from: 0, to: 8 << 20, by: 4096) { sum &+= Int(mapping.load(fromByteOffset: offset, as: UInt8.self)) }
        #expect(sum == 7 * 2048)
        let before = try Self.residentKiB(ofMappingsOf: path)
        let advised = WorkingSetTrimmer.trim()
        let after = try Self.residentKiB(ofMappingsOf: path)
        #expect(before >= 8 << 10, "every page was touched")
        #expect(advised > 10 << 20, "the test binary, the Swift libraries and the file were found in /proc/self/maps")
        #expect(after < before / 2, "resident pages of the mapping: \(before) KiB → \(after) KiB")
    }
}
