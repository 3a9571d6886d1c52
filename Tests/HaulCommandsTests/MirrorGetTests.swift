import Foundation
import HaulTestSupport
import Testing

/// `haul get URL --mirror URL2`: segments from every server at once, against two fault-injecting
/// servers; a mirror that is not the primary's file never contributes a byte.
@Suite("haul get, mirrors", .serialized)
struct MirrorGetTests {
    static let size: Int64 = 16 << 20

    func get(_ primary: String, mirrors: [String], name: String, extra: [String] = []) async throws -> (HaulProcess.Result, String) {
        let directory = try makeTemporaryDirectory()
        var arguments = ["get", "-x", "2", "--timeout", "5"] + extra + [primary]
        for mirror in mirrors { arguments += ["--mirror", mirror] }
        let result = try await HaulProcess.run(arguments, directory: directory)
        return (result, directory.appendingPathComponent(name).path)
    }

    @Test("Two servers with the same file: both serve segments, no byte is fetched twice beyond the end game, the file is exact")
    func twoServers() async throws {
        let a = try await FaultInjectingHTTPServer.start()
        let b = try await FaultInjectingHTTPServer.start()
        let query = "size=\(Self.size)&seed=71&rate=3000000"
        let (result, path) = try await self.get(a.url("/file/m.bin?\(query)").absoluteString, mirrors: [b.url("/file/m.bin?\(query)").absoluteString], name: "m.bin")
        #expect(result.status == 0, "\(result.standardError)")
        #expect(try TestContent.sha256Hex(ofFileAt: path) == TestContent.sha256Hex(size: Self.size, seed: 71))
        let fromA = a.bodyBytesSent(forKey: "m.bin")
        let fromB = b.bodyBytesSent(forKey: "m.bin")
        // Equal servers share the work (each at least a quarter).
        #expect(fromA > Self.size / 4 && fromB > Self.size / 4, "primary sent \(fromA), mirror \(fromB)")
        // Copies of slow tails (end game) are all that is sent twice. A lane is copied only when
        // it can no longer be split (its rest is under two 1 MiB segments), by one of the other
        // three connections (two per server) at a time: the bound allows three such copies
        // (a loaded test run makes lanes look slow, so copies happen; a range fetched again
        // whole, or a restart, would exceed it).
        #expect(fromA + fromB <= Self.size + 3 * (2 << 20), "sent \(fromA + fromB) for \(Self.size)")
        // The mirror's first request is a plain range; later ones carry its own validator.
        let mirrorRanges = b.requests.compactMap { $0.header("Range") }
        #expect(!mirrorRanges.isEmpty)
        #expect(b.requests.dropFirst().allSatisfy { $0.header("If-Range") == "\"m.bin-\(Self.size)-71\"" })
        #expect(!result.standardError.contains("dropped"), "\(result.standardError)")
        try await a.shutdown()
        try await b.shutdown()
    }

    @Test("Mirrors with another file, another length, no ranges, a lying Content-Range or failing connections are dropped with their reasons; the file is the primary's")
    func badMirrors() async throws {
        let a = try await FaultInjectingHTTPServer.start()
        let b = try await FaultInjectingHTTPServer.start()
        let mirrors = [
            "size=\(Self.size)&seed=73",  // another file (its ETag says so)
            "size=\(Self.size + 1)&seed=72",  // another length
            "size=\(Self.size)&seed=72&ranges=0",  // the whole file for every range
            "size=\(Self.size)&seed=72&badContentRange=1",  // a lying Content-Range
            "size=\(Self.size)&seed=72&fail503=1000",  // never answers usefully
        ].map { b.url("/file/bad.bin?\($0)").absoluteString }
        let (result, path) = try await self.get(a.url("/file/bad.bin?size=\(Self.size)&seed=72&rate=4000000").absoluteString, mirrors: mirrors, name: "bad.bin")
        #expect(result.status == 0, "\(result.standardError)")
        #expect(try TestContent.sha256Hex(ofFileAt: path) == TestContent.sha256Hex(size: Self.size, seed: 72))
        let said = result.standardError
        #expect(said.contains("seed=73 dropped: its ETag \"bad.bin-\(Self.size)-73\" is not the primary's \"bad.bin-\(Self.size)-72\""), "\(said)")
        #expect(said.contains("dropped: its length \(Self.size + 1) bytes is not the primary's \(Self.size)"), "\(said)")
        #expect(said.contains("ranges=0 dropped: the server answered a range request with the whole file (200)"), "\(said)")
        #expect(said.contains("badContentRange=1 dropped: asked for bytes"), "\(said)")
        #expect(said.contains("fail503=1000 dropped:"), "\(said)")
        try await a.shutdown()
        try await b.shutdown()
    }

    @Test("With --checksum a mirror without validators contributes; when the file then fails the checksum it is fetched again from the URL alone")
    func checksumDecides() async throws {
        let a = try await FaultInjectingHTTPServer.start()
        let b = try await FaultInjectingHTTPServer.start()
        let digest = TestContent.sha256Hex(size: Self.size, seed: 74)
        let primary = a.url("/file/c.bin?size=\(Self.size)&seed=74&rate=3000000").absoluteString
        // The same bytes without validators: used, verified by the checksum.
        let good = b.url("/file/c.bin?size=\(Self.size)&seed=74&rate=3000000&etag=none&lastModified=0").absoluteString
        let (result, path) = try await self.get(primary, mirrors: [good], name: "c.bin", extra: ["--checksum", "sha256=\(digest)"])
        #expect(result.status == 0, "\(result.standardError)")
        #expect(try TestContent.sha256Hex(ofFileAt: path) == digest)
        #expect(b.bodyBytesSent(forKey: "c.bin") > Self.size / 4, "the mirror contributed")
        #expect(!result.standardError.contains("checksum mismatch"), "\(result.standardError)")

        // Other bytes without validators: accepted by length, caught by the checksum.
        let liar = b.url("/file/d.bin?size=\(Self.size)&seed=75&etag=none&lastModified=0").absoluteString
        let (second, secondPath) = try await self.get(
            a.url("/file/d.bin?size=\(Self.size)&seed=74&rate=6000000").absoluteString, mirrors: [liar], name: "d.bin",
            extra: ["--checksum", "sha256=\(digest)"]
        )
        #expect(second.status == 0, "\(second.standardError)")
        #expect(try TestContent.sha256Hex(ofFileAt: secondPath) == digest)
        #expect(second.standardError.contains("checksum mismatch") && second.standardError.contains("from mirrors, fetching it again"), "\(second.standardError)")

        // Without mirrors, a wrong checksum is an error and no file is kept.
        let (third, thirdPath) = try await self.get(
            a.url("/file/e.bin?size=\(Self.size)&seed=76").absoluteString, mirrors: [], name: "e.bin", extra: ["--checksum", "sha256=\(digest)"]
        )
        #expect(third.status == 8 && third.standardError.contains("checksum mismatch"), "\(third.status) \(third.standardError)")
        #expect(!FileManager.default.fileExists(atPath: thirdPath))
        try await a.shutdown()
        try await b.shutdown()
    }
}
