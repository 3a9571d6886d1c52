import Foundation
import HaulCore
import HaulDaemon
import Logging
import Testing

@Suite("DaemonLogHandler")
struct DaemonLogHandlerTests {
    /// What `body` logs through a logger whose handler writes to a pipe, as text.
    static func logged(level: Logger.Level = .info, _ body: (inout Logger) -> Void) throws -> String {
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        defer { close(ends[0]) }
        var logger = Logger(label: "hauld") { label in DaemonLogHandler(label: label, descriptor: ends[1]) }
        logger.logLevel = level
        body(&logger)
        close(ends[1])
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(ends[0], $0.baseAddress, $0.count) }
            if count <= 0 { break }
            bytes.append(contentsOf: chunk[0..<count])
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    @Test("A line: UTC time to the millisecond, level, label, message, then metadata sorted by key")
    func format() throws {
        let before = Date()
        let text = try Self.logged { logger in
            logger[metadataKey: "zone"] = "z"
            logger.info("download 7 complete: /tmp/a.bin (16384 bytes)", metadata: ["id": "7", "bytes": "16384"])
        }
        let after = Date()
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.count == 2 && lines[1].isEmpty, "one line, ended by a newline: \(text)")
        let line = String(lines[0])
        #expect(line.hasSuffix(" info hauld: download 7 complete: /tmp/a.bin (16384 bytes) bytes=16384 id=7 zone=z"))
        // 2026-11-26T04:52:53.208Z
        let stamp = String(line.prefix(24))
        #expect(stamp.count == 24 && stamp.hasSuffix("Z") && Array(stamp)[10] == "T" && Array(stamp)[19] == ".")
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let date = try #require(formatter.date(from: stamp), "not an ISO 8601 UTC time: \(stamp)")
        #expect(date.timeIntervalSince(before) > -0.002 && after.timeIntervalSince(date) > -0.002)
    }

    @Test("Levels below the logger's are not written; every line of many threads stays whole")
    func levelsAndWholeLines() throws {
        let text = try Self.logged(level: .notice) { logger in
            logger.info("hidden")
            // 160 lines of ~150 bytes: below what a pipe holds unread (64 KiB).
            let shared = logger
            DispatchQueue.concurrentPerform(iterations: 8) { thread in
                for number in 0..<20 { shared.notice("thread \(thread) line \(number) \(String(repeating: "x", count: 100))") }
            }
        }
        #expect(!text.contains("hidden"))
        let lines = text.split(separator: "\n")
        #expect(lines.count == 160)
        for line in lines {
            #expect(line.contains(" notice hauld: thread ") && line.hasSuffix(String(repeating: "x", count: 100)), "mixed line: \(line)")
        }
    }

    @Test("The service group names hauld's service by its description, \"hauld\": not by printing every property (the RPC secret among them), which took 26 M instructions of each start")
    func serviceName() {
        let directory = URL(fileURLWithPath: "/nonexistent/haul")
        let service = DaemonService(
            paths: DaemonPaths(dataDirectory: directory, runtimeDirectory: directory),
            rpc: Aria2RPCServer.Configuration(secret: "s3cret-token"),
            logger: Logger(label: "test")
        )
        #expect("\(service)" == "hauld")
    }
}
