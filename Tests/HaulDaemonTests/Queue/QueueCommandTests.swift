import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HaulCore
import HaulTestSupport
import Testing

/// Runs the built `haul` against a test daemon, as a user would.
struct HaulCLI {
    struct Result {
        var status: Int32
        var standardOutput: String
        var standardError: String
    }

    let daemon: DaemonProcess

    static var executable: URL {
        DaemonProcess.executable.deletingLastPathComponent().appendingPathComponent("haul")
    }

    /// Runs `haul ARGUMENTS`; one that has not ended after `timeout` is killed (status 9 by
    /// signal) so that a hang fails the test instead of stalling the run.
    ///
    /// `terminal`: standard error is a pseudo-terminal (what a user at a terminal has: `haul
    /// wait` then draws its live display there), read as `standardError`.
    func run(_ arguments: [String], directory: URL? = nil, timeout: Duration = .seconds(120), terminal: Bool = false) async throws -> Result {
        let process = Process()
        process.executableURL = Self.executable
        process.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        environment["HAUL_DATA_DIR"] = self.daemon.dataDirectory.path
        environment["HAUL_RUNTIME_DIR"] = self.daemon.runtimeDirectory.path
        environment["HAUL_DAEMON_PATH"] = DaemonProcess.executable.path
        process.environment = environment
        if let directory { process.currentDirectoryURL = directory }
        let output = Pipe()
        let error = Pipe()
        process.standardOutput = output
        process.standardInput = FileHandle.nullDevice
        let pseudoTerminal = terminal ? try Self.openPseudoTerminal() : nil
        process.standardError = pseudoTerminal?.secondary ?? error
        try process.run()
        // The child has its own copy: reading the main side ends (EIO) once the child is gone.
        try pseudoTerminal?.secondary.close()
        let watchdog = Task {
            try await Task.sleep(for: timeout)
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        }
        defer { watchdog.cancel() }
        async let out = blocking { output.fileHandleForReading.readDataToEndOfFile() }
        async let err = blocking { () -> Data in
            guard let main = pseudoTerminal?.main else { return error.fileHandleForReading.readDataToEndOfFile() }
            defer { close(main) }
            var data = Data()
            var chunk = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = chunk.withUnsafeMutableBytes { read(main, $0.baseAddress, $0.count) }
                if count > 0 { data.append(contentsOf: chunk[0..<count]) } else if count < 0, errno == EINTR { continue } else { return data }
            }
        }
        let (outData, errData) = await (out, err)
        await blocking { process.waitUntilExit() }
        return Result(
            status: process.terminationStatus,
            standardOutput: String(decoding: outData, as: UTF8.self),
            standardError: String(decoding: errData, as: UTF8.self)
        )
    }

    /// A pseudo-terminal: its main side's descriptor, and its other side for a child. Linux's
    /// `/dev/ptmx` and its ioctls (`posix_openpt` and its kin are not in Swift's Glibc module).
    static func openPseudoTerminal() throws -> (main: Int32, secondary: FileHandle) {
        let main = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard main >= 0 else { throw DaemonTestError("cannot open /dev/ptmx") }
        var unlock: Int32 = 0
        var number: UInt32 = 0
        // TIOCSPTLCK and TIOCGPTN (the same numbers on x86-64 and arm64).
        guard ioctl(main, 0x4004_5431, &unlock) == 0, ioctl(main, 0x8004_5430, &number) == 0 else {
            close(main)
            throw DaemonTestError("cannot unlock the pseudo-terminal")
        }
        let secondary = open("/dev/pts/\(number)", O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard secondary >= 0 else {
            close(main)
            throw DaemonTestError("cannot open /dev/pts/\(number)")
        }
        return (main, FileHandle(fileDescriptor: secondary, closeOnDealloc: true))
    }

    func list() async throws -> [QueuedDownloadInfo] {
        let result = try await self.run(["ls", "--json"])
        guard result.status == 0 else { throw DaemonTestError("haul ls failed: \(result.standardError)") }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return try decoder.decode([QueuedDownloadInfo].self, from: Data(result.standardOutput.utf8))
    }
}

@Suite("haul queue commands against hauld", .serialized)
struct QueueCommandTests {
    @Test("add, ls, kill -9 of the daemon mid-queue, wait: every download completes and the history stays")
    func endToEndWithRestart() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let daemon = try DaemonProcess()
        try await daemon.start()
        let cli = HaulCLI(daemon: daemon)
        let target = daemon.dataDirectory.deletingLastPathComponent().appendingPathComponent("files")
        let sizes: [Int64] = [3_000_000, 2_500_000, 20_000]
        for (index, size) in sizes.enumerated() {
            // One connection each: the bound below is what one connection's checkpoint allows.
            let added = try await cli.run(["add", "-x", "1", "--dir", target.path, server.url("/file/e\(index).bin?size=\(size)&seed=\(40 + index)&rate=1500000").absoluteString])
            #expect(added.status == 0, "\(added.standardError)")
            #expect(added.standardOutput.hasPrefix("added \(index + 1): e\(index).bin → \(target.path)"))
        }
        #expect(await waitUntil { server.bodyBytesSent(forKey: "e0.bin") > 800_000 })
        let before = try await cli.list()
        #expect(before.count == 3)
        // `haul wait` started before the kill follows the restarted daemon to the end.
        async let waiting = cli.run(["wait"])
        try await Task.sleep(for: .milliseconds(500))
        await daemon.kill9()
        try await daemon.start()
        var waited = try await waiting
        if waited.status != 0, waited.standardError.contains("hauld is not running") {
            // On a loaded machine `haul wait` may start only after the kill, find no daemon and
            // say so (as it should); the restart is then followed by a wait started after it.
            waited = try await cli.run(["wait"])
        }
        #expect(waited.status == 0, "\(waited.standardOutput) \(waited.standardError)")
        // When `haul wait` had connected before the kill it must have followed the restart (on a
        // slow machine it may connect only afterwards, so the message is not required).
        if waited.standardError.contains("connection to hauld closed") {
            #expect(waited.standardError.contains("reconnected to hauld"), "\(waited.standardError)")
        }
        let after = try await cli.list()
        #expect(after.map(\.state) == [.complete, .complete, .complete])
        for (index, size) in sizes.enumerated() {
            let path = target.appendingPathComponent("e\(index).bin").path
            #expect(try TestContent.sha256Hex(ofFileAt: path) == TestContent.sha256Hex(size: size, seed: UInt64(40 + index)))
            #expect(server.bodyBytesSent(forKey: "e\(index).bin") <= size + 1_400_000, "resumed after the kill, not restarted")
        }
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: target.path)) ?? []).sorted() == ["e0.bin", "e1.bin", "e2.bin"])
        let table = try await cli.run(["ls"])
        #expect(table.standardOutput.contains("Downloading (0)") && table.standardOutput.contains("Finished (3)"))
        let shown = try await cli.run(["show", "1"])
        let fields = Dictionary(shown.standardOutput.split(separator: "\n").map { line -> (String, String) in
            let parts = line.split(separator: ":", maxSplits: 1)
            return (String(parts[0]), parts.count > 1 ? parts[1].trimmingCharacters(in: .whitespaces) : "")
        }) { a, _ in a }
        #expect(fields["state"] == "complete" && fields["file"] == "\(target.path)/e0.bin", "\(shown.standardOutput)")
        let purged = try await cli.run(["purge"])
        #expect(purged.standardOutput == "purged 3 downloads\n")
        #expect(try await cli.list().isEmpty)
        _ = await daemon.terminate()
    }

    @Test("haul add -x 4: one download over four connections; kill -9 of hauld mid-download continues from the synced map")
    func segmentedWithCrash() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let daemon = try DaemonProcess()
        try await daemon.start()
        let cli = HaulCLI(daemon: daemon)
        let target = daemon.dataDirectory.deletingLastPathComponent().appendingPathComponent("files")
        let size: Int64 = 24 << 20
        let added = try await cli.run(["add", "-x", "4", "--dir", target.path, server.url("/file/s.bin?size=\(size)&seed=81&rate=1500000").absoluteString])
        #expect(added.status == 0, "\(added.standardError)")
        // Several lanes at work, and a checkpoint with a map recorded in the store.
        #expect(await waitUntil(timeout: .seconds(20)) {
            server.requests.filter { ($0.header("Range") ?? "").hasSuffix("-") == false && $0.header("Range") != nil }.count >= 2
                && server.bodyBytesSent(forKey: "s.bin") > 4 << 20
        })
        // `haul show` draws the map and counts the connections while it runs.
        let shown = try await cli.run(["show", "1"])
        #expect(shown.standardOutput.contains("connections:") && shown.standardOutput.contains("map:") && shown.standardOutput.contains("█"), "\(shown.standardOutput)")
        #expect(shown.standardOutput.contains("max connections: 4"), "\(shown.standardOutput)")
        try await Task.sleep(for: .milliseconds(1000))  // past a checkpoint (every 0.5 s / 4 MiB)
        await daemon.kill9()
        let sentBefore = try #require(await server.bodyBytesSentOnceClosed(forKey: "s.bin"))
        #expect(sentBefore < size - (4 << 20), "killed mid-download")
        try await daemon.start()
        let waited = try await cli.run(["wait"])
        #expect(waited.status == 0, "\(waited.standardOutput) \(waited.standardError)")
        let after = try await cli.list()
        #expect(after.map(\.state) == [.complete])
        #expect(try TestContent.sha256Hex(ofFileAt: target.appendingPathComponent("s.bin").path) == TestContent.sha256Hex(size: size, seed: 81))
        let again = server.bodyBytesSent(forKey: "s.bin") - size
        #expect(again <= 8 << 20, "fetched again after kill -9: \(again) bytes (\(sentBefore) sent before)")
        print("hauld segmented kill -9: \(again) bytes fetched again of \(size) (\(sentBefore) before the kill)")
        // The setting and its refusal.
        #expect(try await cli.run(["set", "connections", "8"]).status == 0)
        let bad = try await cli.run(["set", "connections", "0"])
        #expect(bad.status != 0 && bad.standardError.contains("1 to 64"), "\(bad.standardError)")
        _ = await daemon.terminate()
    }

    @Test("haul add --list: one download for the list's files; kill -9 of hauld mid-list: the next start finishes it with every file once, whole, and no partial file")
    func listWithCrash() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let daemon = try DaemonProcess()
        try await daemon.start()
        let cli = HaulCLI(daemon: daemon)
        let target = daemon.dataDirectory.deletingLastPathComponent().appendingPathComponent("files")
        // 60 files of 20 KB at ~200 KB/s each, max-per-host (4) at once: ~1.5 s in all.
        let size = 20_000
        let urls = (0..<60).map { server.url("/file/l\($0).bin?size=\(size)&seed=\($0)&rate=200000").absoluteString }
        let listFile = daemon.dataDirectory.deletingLastPathComponent().appendingPathComponent("urls.txt")
        try (urls.joined(separator: "\n") + "\n").write(to: listFile, atomically: true, encoding: .utf8)
        let added = try await cli.run(["add", "--list", "--dir", target.path, "-i", listFile.path])
        #expect(added.status == 0 && added.standardOutput.contains("a list of 60 files"), "\(added.standardOutput) \(added.standardError)")
        #expect(await waitUntil(timeout: .seconds(20)) {
            ((try? FileManager.default.contentsOfDirectory(atPath: target.path)) ?? []).filter { $0.hasSuffix(".bin") }.count >= 10
        })
        await daemon.kill9()
        let placedBefore = ((try? FileManager.default.contentsOfDirectory(atPath: target.path)) ?? []).filter { $0.hasSuffix(".bin") }.count
        #expect(placedBefore < 60, "killed mid-list")
        try await daemon.start()
        let waited = try await cli.run(["wait"])
        #expect(waited.status == 0, "\(waited.standardOutput) \(waited.standardError)")
        let after = try await cli.list()
        #expect(after.count == 1 && after.first?.state == .complete && after.first?.fileCount == 60)
        let names = try FileManager.default.contentsOfDirectory(atPath: target.path).sorted()
        #expect(names == (0..<60).map { "l\($0).bin" }.sorted(), "every file once, no second copy, no partial file: \(names)")
        for index in 0..<60 {
            #expect(try TestContent.sha256Hex(ofFileAt: target.appendingPathComponent("l\(index).bin").path) == TestContent.sha256Hex(size: Int64(size), seed: UInt64(index)))
        }
        // Body bytes sent per file (a response cut by the kill counts what it sent): a file
        // placed before the kill is not fetched again.
        let again = (0..<60).reduce(Int64(0)) { $0 + server.bodyBytesSent(forKey: "l\($1).bin") } - Int64(60 * size)
        print("hauld list kill -9: \(placedBefore) of 60 files placed before the kill, \(again) bytes fetched again")
        #expect(again <= Int64((60 - placedBefore) * size), "at most the files not placed before the kill are fetched again")
        let shown = try await cli.run(["show", "1"])
        #expect(shown.standardOutput.contains("files: 60 done, 0 failed, 0 waiting"), "\(shown.standardOutput)")
        // What --list does not take.
        let refused = try await cli.run(["add", "--list", "-o", "x.bin", urls[0]])
        #expect(refused.status != 0 && refused.standardError.contains("--list takes no --out"), "\(refused.standardError)")
        _ = await daemon.terminate()
    }

    @Test("Pause, set-url and resume keep a segmented download's map: only the missing bytes are fetched, from the new URL")
    func pauseSetURLKeepsMap() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let daemon = try DaemonProcess()
        try await daemon.start()
        let cli = HaulCLI(daemon: daemon)
        let target = daemon.dataDirectory.deletingLastPathComponent().appendingPathComponent("files")
        let size: Int64 = 16 << 20
        let added = try await cli.run(["add", "-x", "4", "--dir", target.path, server.url("/file/p.bin?size=\(size)&seed=95&rate=1500000").absoluteString])
        #expect(added.status == 0, "\(added.standardError)")
        #expect(await waitUntil(timeout: .seconds(20)) { server.bodyBytesSent(forKey: "p.bin") > 6 << 20 })
        #expect(try await cli.run(["pause", "1"]).status == 0)
        // `paused` is recorded at once; the run's last map is recorded once it has stopped
        // (its connections closed, its bytes written): until then the list shows the live map.
        // Wait for no live transfer and the same map in two reads in a row.
        var paused = try #require(try await cli.list().first)
        var settled = false
        for _ in 0..<100 {
            try await Task.sleep(for: .milliseconds(100))
            let next = try #require(try await cli.list().first)
            settled = paused.state == .paused && next.state == .paused && next.connections == nil && next.segments == paused.segments
            paused = next
            if settled { break }
        }
        #expect(paused.state == .paused && settled, "\(paused.state) \(String(describing: paused.connections))")
        let map = try #require(paused.segments, "a paused segmented download keeps its map")
        #expect(map.ranges.count > 1 && map.byteCount == paused.bytesDone && paused.bytesDone > 4 << 20, "\(map.ranges) \(paused.bytesDone)")
        let sentBefore = server.bodyBytesSent(forKey: "p.bin")
        // A new link to the same file (same validators): the map still counts.
        let moved = try await cli.run(["set-url", "1", server.url("/file/p.bin?size=\(size)&seed=95&rate=3000000&signed=2").absoluteString])
        #expect(moved.status == 0, "\(moved.standardError)")
        #expect(try await cli.list().first?.segments == map, "set-url keeps the map")
        #expect(try await cli.run(["resume", "1"]).status == 0)
        let waited = try await cli.run(["wait"])
        #expect(waited.status == 0, "\(waited.standardOutput) \(waited.standardError)")
        #expect(try TestContent.sha256Hex(ofFileAt: target.appendingPathComponent("p.bin").path) == TestContent.sha256Hex(size: size, seed: 95))
        let after = server.bodyBytesSent(forKey: "p.bin") - sentBefore
        // Beyond the missing bytes, only end-game copies of remainders too small to split
        // (under two 1 MiB segments; more of them on a loaded machine).
        #expect(after <= size - paused.bytesDone + (2 << 20), "after the resume \(after) bytes for \(size - paused.bytesDone) missing")
        #expect(server.requests.last?.uri.contains("signed=2") == true)
        _ = await daemon.terminate()
        try await server.shutdown()
    }

    @Test("haul add URL --mirror URL2: segments from both servers at once, haul show tells what each contributes; a mirror with other bytes is caught by the checksum and the file fetched again from the URL alone")
    func mirrorsInParallel() async throws {
        let a = try await FaultInjectingHTTPServer.start()
        let b = try await FaultInjectingHTTPServer.start()
        let daemon = try DaemonProcess()
        try await daemon.start()
        let cli = HaulCLI(daemon: daemon)
        let target = daemon.dataDirectory.deletingLastPathComponent().appendingPathComponent("files")
        let size: Int64 = 16 << 20
        let query = "size=\(size)&seed=91&rate=2000000"
        let added = try await cli.run(["add", "-x", "2", "--dir", target.path, a.url("/file/m.bin?\(query)").absoluteString, "--mirror", b.url("/file/m.bin?\(query)").absoluteString])
        #expect(added.status == 0, "\(added.standardError)")
        #expect(await waitUntil(timeout: .seconds(20)) { a.bodyBytesSent(forKey: "m.bin") > 1 << 20 && b.bodyBytesSent(forKey: "m.bin") > 1 << 20 })
        let shown = try await cli.run(["show", "1"])
        #expect(shown.standardOutput.contains("mirror:") && shown.standardOutput.contains("connection"), "\(shown.standardOutput)")
        let waited = try await cli.run(["wait"])
        #expect(waited.status == 0, "\(waited.standardOutput) \(waited.standardError)")
        #expect(try TestContent.sha256Hex(ofFileAt: target.appendingPathComponent("m.bin").path) == TestContent.sha256Hex(size: size, seed: 91))
        let fromA = a.bodyBytesSent(forKey: "m.bin")
        let fromB = b.bodyBytesSent(forKey: "m.bin")
        // Beyond the file's bytes: the remainder the end game fetches twice (under two 1 MiB
        // segments, the least a steal splits into), plus what a lane's server had sent past the
        // lane's new end when its range was cut or its connection closed: all it wrote while the
        // client did not read, at its 2 MB/s pace. On an idle machine that is 50-300 KiB in all;
        // CI runs with both cores busy measured 2.25 MiB, then 3.6 MiB over the file (each server
        // ~1.8 MB past half: the lanes starved for about a second). Two seconds are allowed; a
        // file fetched twice is 16 MiB over.
        let inFlight: Int64 = 2_000_000 * 2
        print("hauld mirrors: \(fromA + fromB - size) bytes fetched twice of \(size) (primary \(fromA), mirror \(fromB))")
        #expect(fromA > size / 4 && fromB > size / 4 && fromA + fromB <= size + (2 << 20) + inFlight, "primary \(fromA), mirror \(fromB)")

        // A mirror without validators and with other bytes: accepted on length because a
        // checksum is given, caught by it, and the download runs again from the URL alone.
        let digest = TestContent.sha256Hex(size: size, seed: 92)
        let liar = try await cli.run([
            "add", "-x", "2", "--dir", target.path, "--checksum", "sha256=\(digest)",
            a.url("/file/n.bin?size=\(size)&seed=92&rate=4000000").absoluteString,
            "--mirror", b.url("/file/n.bin?size=\(size)&seed=93&etag=none&lastModified=0").absoluteString,
        ])
        #expect(liar.status == 0, "\(liar.standardError)")
        let second = try await cli.run(["wait"])
        #expect(second.status == 0, "\(second.standardOutput) \(second.standardError)")
        #expect(try TestContent.sha256Hex(ofFileAt: target.appendingPathComponent("n.bin").path) == digest)
        #expect(b.bodyBytesSent(forKey: "n.bin") > 0, "the mirror contributed before the checksum caught it")
        #expect(a.bodyBytesSent(forKey: "n.bin") >= size, "fetched again from the primary alone")
        _ = await daemon.terminate()
        try await a.shutdown()
        try await b.shutdown()
    }

    @Test("Clear errors: unknown ids, malformed arguments, unwritable directories, settings")
    func errors() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let daemon = try DaemonProcess()
        try await daemon.start()
        let cli = HaulCLI(daemon: daemon)
        let url = server.url("/file/x?size=10").absoluteString

        let unknown = try await cli.run(["pause", "999"])
        #expect(unknown.status == 1)
        #expect(unknown.standardError.contains("no download with id 999"))
        let badID = try await cli.run(["show", "abc"])
        #expect(badID.status == 2 && badID.standardError.contains("'abc' is not a download id"))
        let badChecksum = try await cli.run(["add", "--checksum", "sha256=xyz", url])
        #expect(badChecksum.status == 2 && badChecksum.standardError.contains("a sha256 checksum has 64 hex digits"))
        let badURL = try await cli.run(["add", "example.org/file.iso"])
        #expect(badURL.status == 2 && badURL.standardError.contains("not an http or https URL"))
        let badLimit = try await cli.run(["add", "--limit", "fast", url])
        #expect(badLimit.status == 2)
        let file = daemon.dataDirectory.deletingLastPathComponent().appendingPathComponent("a-file")
        try Data().write(to: file)
        let badDirectory = try await cli.run(["add", "--dir", file.path + "/sub", url])
        #expect(badDirectory.status == 1 && badDirectory.standardError.contains("cannot create the directory"))
        #expect(try await cli.list().isEmpty, "nothing was queued by the refused commands")

        let set = try await cli.run(["set", "max-concurrent", "2"])
        #expect(set.status == 0 && set.standardOutput.contains("max-concurrent  2"))
        let badSet = try await cli.run(["set", "colour", "blue"])
        #expect(badSet.status == 2 && badSet.standardError.contains("unknown setting 'colour'"))
        let shown = try await cli.run(["set"])
        #expect(shown.standardOutput.contains("max-concurrent  2") && shown.standardOutput.contains("speed-limit     unlimited"))
        _ = await daemon.terminate()

        let stopped = try await cli.run(["ls"])
        #expect(stopped.status == 1 && stopped.standardError.contains("hauld is not running"))
        let restarted = try await cli.run(["ls", "--start"])
        #expect(restarted.status == 0 && restarted.standardError.contains("started hauld"))
        #expect(restarted.standardOutput.contains("Downloading (0)"))
    }

    @Test("A cancelled download stays listed among the finished until haul rm or purge drops it; show tells of it, nothing else acts on it")
    func cancelledStaysListed() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let cli = HaulCLI(daemon: daemon)
        let directory = daemon.dataDirectory.deletingLastPathComponent().appendingPathComponent("cancelled")
        let added = try await cli.run(["add", "--paused", "--dir", directory.path, "http://127.0.0.1:9/a.bin", "http://127.0.0.1:9/b.bin", "http://127.0.0.1:9/c.bin"])
        #expect(added.status == 0, "\(added.standardError)")
        let cancelled = try await cli.run(["cancel", "1", "2"])
        #expect(cancelled.status == 0 && cancelled.standardOutput == "cancelled 1\ncancelled 2\n", "\(cancelled.standardOutput) \(cancelled.standardError)")

        #expect(try await cli.list().map { "\($0.id) \($0.state.rawValue)" } == ["1 removed", "2 removed", "3 paused"])
        let table = try await cli.run(["ls"]).standardOutput
        #expect(table.contains("Downloading (1)") && table.contains("Finished (2)"), "\(table)")
        let shown = try await cli.run(["show", "1"])
        #expect(shown.status == 0 && shown.standardOutput.contains("removed"), "\(shown.standardOutput) \(shown.standardError)")
        let again = try await cli.run(["cancel", "1"])
        #expect(again.status == 1 && again.standardError.contains("download 1 is removed; use 'haul rm 1'"), "\(again.standardError)")
        let resumed = try await cli.run(["resume", "1"])
        #expect(resumed.status == 1 && resumed.standardError.contains("no download with id 1"), "\(resumed.standardError)")
        // Waiting for it ends at once: it was cancelled (status 1, as for a failure).
        let waited = try await cli.run(["wait", "-q", "1"], timeout: .seconds(20))
        #expect(waited.status == 1 && waited.standardOutput == "1 removed \n", "\(waited.standardOutput) \(waited.standardError)")
        // Cancelled while a follower listens: it hears it change, and keeps it (as `haul ls` lists it).
        async let watching = cli.run(["wait", "3"], timeout: .seconds(20))
        try await Task.sleep(for: .milliseconds(500))
        _ = try await cli.run(["cancel", "3"])
        let watched = try await watching
        #expect(watched.status == 1 && watched.standardOutput.contains("3 removed"), "\(watched.standardOutput) \(watched.standardError)")

        let dropped = try await cli.run(["rm", "1"])
        #expect(dropped.status == 0 && dropped.standardOutput == "removed 1\n", "\(dropped.standardOutput) \(dropped.standardError)")
        #expect(try await cli.list().map(\.id) == [2, 3])
        let purged = try await cli.run(["purge"])
        #expect(purged.standardOutput == "purged 2 downloads\n", "\(purged.standardOutput)")
        #expect(try await cli.list().isEmpty)
        _ = await daemon.terminate()
    }

    @Test("haul add --wait: a line for each download as it finishes, exit 0 when all completed and 1 when one failed; refused with --paused or --json")
    func addAndWait() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let daemon = try DaemonProcess()
        try await daemon.start()
        let cli = HaulCLI(daemon: daemon)
        let directory = daemon.dataDirectory.deletingLastPathComponent().appendingPathComponent("waited")
        // Thirty small files (the list is summed up in one line) and one slower one: sent in two
        // batches (16, then 15), the first fetched while the rest are added; every finish of
        // both is heard.
        var urls = (0..<30).map { server.url("/file/w\($0).bin?size=\(10_000 + $0)&seed=\($0)").absoluteString }
        urls.append(server.url("/file/slow.bin?size=600000&seed=77&rate=1500000").absoluteString)
        let list = directory.deletingLastPathComponent().appendingPathComponent("urls.txt")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try urls.joined(separator: "\n").write(to: list, atomically: true, encoding: .utf8)
        let waited = try await cli.run(["add", "--wait", "-d", directory.path, "-i", list.path], timeout: .seconds(60))
        #expect(waited.status == 0, "\(waited.standardOutput) \(waited.standardError)")
        let lines = waited.standardOutput.split(separator: "\n").map(String.init)
        #expect(lines.first == "added 31 downloads (1…31) → \(directory.path)", "\(lines.first ?? "")")
        // Two requests, each its own insert, in order: hauld logs each batch it queued.
        let log = try String(contentsOf: daemon.dataDirectory.deletingLastPathComponent().appendingPathComponent("hauld.log"), encoding: .utf8)
        #expect(log.contains("queued 16 downloads (1…16)") && log.contains("queued 15 downloads (17…31)"), "\(log)")
        let outcomes = lines.dropFirst()
        #expect(Set(outcomes) == Set((0..<30).map { "\($0 + 1) complete \(directory.path)/w\($0).bin" } + ["31 complete \(directory.path)/slow.bin"]), "\(outcomes)")
        #expect(outcomes.count == 31, "each once")
        for index in 0..<30 {
            #expect(try TestContent.sha256Hex(ofFileAt: directory.appendingPathComponent("w\(index).bin").path) == TestContent.sha256Hex(size: Int64(10_000 + index), seed: UInt64(index)))
        }
        // One that fails: its line says why, and the status says so.
        let failed = try await cli.run(["add", "-w", "-d", directory.path, server.url("/status/404").absoluteString, server.url("/file/ok.bin?size=5000&seed=3").absoluteString], timeout: .seconds(60))
        #expect(failed.status == 1, "\(failed.standardOutput) \(failed.standardError)")
        #expect(failed.standardOutput.contains("32 error the server answered 404"), "\(failed.standardOutput)")
        #expect(failed.standardOutput.contains("33 complete \(directory.path)/ok.bin"), "\(failed.standardOutput)")
        for arguments in [["add", "--wait", "--paused", "http://127.0.0.1:9/a"], ["add", "--wait", "--json", "http://127.0.0.1:9/a"]] {
            let refused = try await cli.run(arguments)
            #expect(refused.status != 0 && refused.standardError.contains("--wait"), "\(arguments): \(refused.standardError)")
        }
        #expect(try await cli.list().count == 33, "nothing added by the refused ones")
        _ = await daemon.terminate()
    }

    @Test("queueSubscribe with fields: each change carries its download with those members and id alone, read as a projection; a subscriber without fields hears whole downloads")
    func subscriptionFields() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let daemon = try DaemonProcess()
        try await daemon.start()
        let directory = daemon.dataDirectory.deletingLastPathComponent().appendingPathComponent("projected")
        let projected = try DaemonTestClient(socketPath: daemon.socketPath)
        let whole = try DaemonTestClient(socketPath: daemon.socketPath)
        defer {
            projected.close()
            whole.close()
        }
        let subscribed = try await projected.request(DaemonRequest(.queueSubscribe(.init(events: .finished, fields: [.state, .path, .errorMessage]))))
        #expect(subscribed.error == nil, "\(subscribed.error ?? "")")
        _ = try await whole.request(DaemonRequest(.queueSubscribe(.init(events: .finished))))
        // An unknown field is refused, and says which.
        let other = try DaemonTestClient(socketPath: daemon.socketPath)
        other.sendRaw(Array(#"{"id":7,"method":"queueSubscribe","fields":["state","colour"]}"#.utf8) + [UInt8(ascii: "\n")])
        let refused = await other.readLine()?.response
        other.close()
        #expect(refused?.error?.contains("unknown field 'colour'") == true, "\(refused?.error ?? "no error")")
        let added = try await projected.request(
            DaemonRequest(.queueAdd(.batch([
                NewDownload(urls: [server.url("/file/p.bin?size=20000&seed=5")], directory: directory.path),
                NewDownload(urls: [server.url("/status/404")], directory: directory.path),
            ])))
        )
        #expect(added.error == nil, "\(added.error ?? "")")
        // Each subscriber hears both finishes (any order).
        var heard: [Int64: [String]] = [:]
        while heard.count < 2, let line = await projected.readRawLine() {
            guard let event = DaemonServerLine.downloadChange(line: line)?.event, let download = event.download else { continue }
            let members = try #require(try JSONSerialization.jsonObject(with: Data(line)) as? [String: Any])
            let record = try #require((members["event"] as? [String: Any])?["download"] as? [String: Any])
            heard[download.id] = record.keys.sorted()
            #expect(event.downloadFields != nil, "read as a projection")
            if download.state == .complete {
                #expect(download.path == directory.appendingPathComponent("p.bin").path)
                #expect(download.urls.isEmpty, "nothing but what was asked for")
            } else {
                #expect(download.state == .error && download.errorMessage?.contains("404") == true, "\(download)")
            }
        }
        #expect(heard.values.contains(["id", "path", "state"]) && heard.values.contains(["errorMessage", "id", "state"]), "\(heard)")
        var wholeHeard = 0
        while wholeHeard < 2, let line = await whole.readLine() {
            guard let download = line.event?.download else { continue }
            #expect(download.urls.count == 1 && line.event?.downloadFields == nil, "whole")
            wholeHeard += 1
        }
        _ = await daemon.terminate()
    }

    @Test("haul wait at a terminal draws each download's name, bytes and state live, from the members it asks hauld for, then a line for each as it ended")
    func liveWait() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let daemon = try DaemonProcess()
        try await daemon.start()
        let cli = HaulCLI(daemon: daemon)
        let directory = daemon.dataDirectory.deletingLastPathComponent().appendingPathComponent("live")
        let added = try await cli.run(["add", "-d", directory.path,
                                       server.url("/file/slow.bin?size=400000&seed=4&rate=400000").absoluteString,
                                       server.url("/status/404").absoluteString])
        #expect(added.status == 0, "\(added.standardError)")
        let waited = try await cli.run(["wait", "1", "2"], timeout: .seconds(60), terminal: true)
        #expect(waited.status == 1, "one failed: \(waited.standardOutput) \(waited.standardError)")
        let lines = Set(waited.standardOutput.split(separator: "\n").map(String.init))
        #expect(lines.contains("1 complete \(directory.path)/slow.bin"), "\(waited.standardOutput)")
        #expect(lines.contains { $0.hasPrefix("2 error") && $0.contains("404") }, "\(waited.standardOutput)")
        // Drawn in place on the terminal: the name and the state, redrawn as bytes come.
        #expect(waited.standardError.contains("\u{1B}[2K") && waited.standardError.contains("1 slow.bin"), "\(waited.standardError.debugDescription)")
        #expect(waited.standardError.contains("active") && waited.standardError.contains("complete"), "\(waited.standardError.debugDescription)")
        #expect(try TestContent.sha256Hex(ofFileAt: directory.appendingPathComponent("slow.bin").path) == TestContent.sha256Hex(size: 400_000, seed: 4))
        _ = await daemon.terminate()
    }

    @Test("hauld --log-level notice logs no line for each download that completes, the default does; an unknown level or one beside --verbose is refused with a clear error")
    func logLevel() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        for (arguments, logsCompletions) in [([String](), true), (["--log-level", "notice"], false)] {
            let daemon = try DaemonProcess()
            try await daemon.start(extraArguments: arguments)
            let cli = HaulCLI(daemon: daemon)
            let directory = daemon.dataDirectory.deletingLastPathComponent().appendingPathComponent("logged")
            let added = try await cli.run(["add", "-w", "-d", directory.path, server.url("/file/l.bin?size=3000&seed=2").absoluteString], timeout: .seconds(30))
            #expect(added.status == 0, "\(added.standardError)")
            _ = await daemon.terminate()
            let log = try String(contentsOf: daemon.dataDirectory.deletingLastPathComponent().appendingPathComponent("hauld.log"), encoding: .utf8)
            #expect(log.contains("download 1 complete: ") == logsCompletions, "\(arguments): \(log)")
            #expect(log.contains(" info hauld: hauld ") == logsCompletions, "the start's line is info too: \(log)")
        }
        for arguments in [["--log-level", "loud"], ["--log-level", "info", "--verbose"]] {
            let process = Process()
            process.executableURL = DaemonProcess.executable
            process.arguments = ["--no-web"] + arguments
            let errors = Pipe()
            process.standardError = errors
            process.standardOutput = FileHandle.nullDevice
            try process.run()
            // Off the test's thread: a blocked thread of the cooperative pool can starve the
            // tests running beside it.
            let message = await blocking { String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
            await blocking { process.waitUntilExit() }
            #expect(process.terminationStatus == 64, "\(arguments): \(message)")
            #expect(message.contains(arguments.contains("loud") ? "unknown log level 'loud' (known: trace, debug, info, notice, warning, error, critical)" : "--verbose is --log-level debug"), "\(message)")
        }
    }

    @Test("haul add -i of a list longer than one request carries: every URL added, in order; one URL too long for any request is refused, nothing added")
    func longList() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let cli = HaulCLI(daemon: daemon)
        let directory = daemon.dataDirectory.deletingLastPathComponent().appendingPathComponent("long-list")
        // 900 URLs of ~1,500 bytes: ~1.35 MB of batch, more than one line of the daemon's
        // socket takes (1 MiB). Paused: nothing is fetched.
        let padding = String(repeating: "p", count: 1_450)
        let urls = (0..<900).map { "http://127.0.0.1:9/\(padding)/file-\($0).bin" }
        let list = directory.appendingPathExtension("txt")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try Data((urls.joined(separator: "\n") + "\n").utf8).write(to: list)
        let added = try await cli.run(["add", "--paused", "--dir", directory.path, "-i", list.path])
        #expect(added.status == 0, "\(added.standardError)")
        #expect(added.standardOutput.contains("added 900 downloads"))
        let listed = try await cli.list().sorted { $0.id < $1.id }
        // Compared without printing 1.3 MB of URLs when it fails.
        #expect(listed.count == urls.count)
        #expect(zip(listed, urls).allSatisfy { $0.urls[0].absoluteString == $1 }, "added in the list's order")

        // Without --dir: the summary names the queue's directory, where they went.
        let short = directory.appendingPathComponent("short.txt")
        try Data((0..<25).map { "http://127.0.0.1:9/s\($0).bin\n" }.joined().utf8).write(to: short)
        let addedShort = try await cli.run(["add", "--paused", "-i", short.path])
        let shortRows = try await cli.list().filter { $0.urls[0].lastPathComponent.hasPrefix("s") }
        #expect(shortRows.count == 25 && Set(shortRows.map(\.directory)).count == 1)
        #expect(addedShort.status == 0 && addedShort.standardOutput == "added 25 downloads (901…925) → \(shortRows[0].directory)\n", "\(addedShort.standardOutput) \(addedShort.standardError)")
        // Paused: nothing starts, so nothing is gained by a small first batch; one transaction.
        let log = try String(contentsOf: daemon.dataDirectory.deletingLastPathComponent().appendingPathComponent("hauld.log"), encoding: .utf8)
        #expect(log.contains("queued 25 downloads (901…925)"), "\(log)")
        let json = try await cli.run(["add", "--paused", "--json", "-i", short.path])
        #expect(json.status == 0 && json.standardOutput.contains("\"urls\""), "--json prints whole downloads")

        let huge = directory.appendingPathComponent("huge.txt")
        try Data(("http://127.0.0.1:9/" + String(repeating: "h", count: DaemonProtocol.maximumLineLength) + "\n").utf8).write(to: huge)
        let refusedHuge = try await cli.run(["add", "--paused", "--dir", directory.path, "-i", huge.path])
        #expect(refusedHuge.status == 1)
        #expect(refusedHuge.standardError.contains("more than one request to hauld may carry") && refusedHuge.standardError.contains("nothing was added"), "\(refusedHuge.standardError)")
        #expect(try await cli.list().count == 950, "the refused list added nothing")
        _ = await daemon.terminate()
    }

    @Test("haul add: URLs given and those of -i, in that order, each with every option given (priority, limit, connections, directory, paused)")
    func optionsOfEveryListedURL() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let cli = HaulCLI(daemon: daemon)
        let directory = daemon.dataDirectory.deletingLastPathComponent().appendingPathComponent("options")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let list = directory.appendingPathComponent("list.txt")
        try Data("# two of them\nhttp://127.0.0.1:9/b.bin\n\nhttp://127.0.0.1:9/c.bin\n".utf8).write(to: list)
        let added = try await cli.run(["add", "--paused", "--priority", "7", "--limit", "500K", "-x", "3", "--dir", directory.path, "http://127.0.0.1:9/a.bin", "-i", list.path])
        #expect(added.status == 0, "\(added.standardError)")
        let rows = try await cli.list().sorted { $0.id < $1.id }
        #expect(rows.map { $0.urls.map(\.absoluteString) } == [["http://127.0.0.1:9/a.bin"], ["http://127.0.0.1:9/b.bin"], ["http://127.0.0.1:9/c.bin"]])
        for row in rows {
            #expect(row.priority == 7 && row.speedLimit == 500 * 1024 && row.maximumConnections == 3, "\(row)")
            #expect(row.directory == directory.path && row.state == .paused, "\(row)")
        }
        // A bad line of the list: named by its number, nothing added.
        try Data("http://127.0.0.1:9/d.bin\nftp://127.0.0.1/e.bin\n".utf8).write(to: list)
        let refused = try await cli.run(["add", "--paused", "--dir", directory.path, "-i", list.path])
        #expect(refused.status != 0 && refused.standardError.contains("\(list.path):2: not an http or https URL: 'ftp://127.0.0.1/e.bin'"), "\(refused.standardError)")
        #expect(try await cli.list().count == 3)
        _ = await daemon.terminate()
    }

    @Test("haul watch prints the queue and redraws it as it changes")
    func watch() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let daemon = try DaemonProcess()
        try await daemon.start()
        let cli = HaulCLI(daemon: daemon)
        let process = Process()
        process.executableURL = HaulCLI.executable
        process.arguments = ["watch"]
        process.environment = ProcessInfo.processInfo.environment.merging([
            "HAUL_DATA_DIR": daemon.dataDirectory.path, "HAUL_RUNTIME_DIR": daemon.runtimeDirectory.path,
        ]) { _, new in new }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        try await Task.sleep(for: .milliseconds(400))
        let target = daemon.dataDirectory.deletingLastPathComponent().appendingPathComponent("w")
        _ = try await cli.run(["add", "--dir", target.path, server.url("/file/watched.bin?size=300000&rate=600000").absoluteString])
        #expect(await waitUntil { FileManager.default.fileExists(atPath: target.appendingPathComponent("watched.bin").path) })
        try await Task.sleep(for: .milliseconds(300))
        process.terminate()
        let text = String(decoding: await blocking { output.fileHandleForReading.readDataToEndOfFile() }, as: UTF8.self)
        await blocking { process.waitUntilExit() }
        #expect(text.hasPrefix("Downloading (0)"), "the empty queue first")
        #expect(text.contains("active") && text.contains("watched.bin"), "then the download while it runs")
        #expect(text.contains("Finished (1)"), "then finished")
        _ = await daemon.terminate()
    }

    @Test("The web API needs the token, refuses cross-site writes and foreign host names")
    func webAPIGuard() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let cli = HaulCLI(daemon: daemon)
        let ui = try await cli.run(["ui"])
        #expect(ui.status == 0)
        let address = ui.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)
        let parts = address.components(separatedBy: "/#token=")
        try #require(parts.count == 2 && parts[0].hasPrefix("http://127.0.0.1:"))
        let base = parts[0]
        let token = parts[1]
        #expect(token.count == 64)
        let tokenFile = daemon.dataDirectory.appendingPathComponent("web-token").path
        let mode = (try FileManager.default.attributesOfItem(atPath: tokenFile)[.posixPermissions] as? NSNumber)?.intValue
        #expect(mode == 0o600)

        func send(_ method: String, _ path: String, headers: [String: String] = [:], body: String? = nil) async throws -> (Int, String) {
            var request = URLRequest(url: URL(string: base + path)!)
            request.httpMethod = method
            for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
            request.httpBody = body.map { Data($0.utf8) }
            let (data, response) = try await URLSession.shared.data(for: request)
            return ((response as! HTTPURLResponse).statusCode, String(decoding: data, as: UTF8.self))
        }
        let auth = ["Authorization": "Bearer \(token)"]
        #expect(try await send("GET", "/").0 == 200, "the page itself holds no data")
        #expect(try await send("GET", "/api/downloads").0 == 401)
        #expect(try await send("GET", "/api/downloads", headers: ["Authorization": "Bearer " + String(repeating: "0", count: 64)]).0 == 401)
        #expect(try await send("GET", "/api/downloads", headers: auth).0 == 200)
        #expect(try await send("GET", "/api/downloads?token=\(token)").0 == 401, "only the event stream takes the token in the URL")
        let json = auth.merging(["Content-Type": "application/json"]) { a, _ in a }
        let crossSite = try await send("POST", "/api/downloads", headers: json.merging(["Origin": "http://evil.example"]) { a, _ in a }, body: #"{"urls":["http://127.0.0.1:1/x"]}"#)
        #expect(crossSite.0 == 403)
        let form = try await send("POST", "/api/downloads", headers: auth.merging(["Content-Type": "application/x-www-form-urlencoded"]) { a, _ in a }, body: "urls=x")
        #expect(form.0 == 400 && form.1.contains("send JSON"))
        let malformed = try await send("POST", "/api/downloads", headers: json, body: "{not json")
        #expect(malformed.0 == 400 && malformed.1.contains("malformed JSON"))
        let unknown = try await send("POST", "/api/downloads/77/pause", headers: auth)
        #expect(unknown.0 == 404)
        let rebinding = try await send("GET", "/api/downloads", headers: auth.merging(["Host": "attacker.example"]) { a, _ in a })
        #expect(rebinding.0 == 421)
        #expect(try await cli.list().isEmpty)
        _ = await daemon.terminate()
    }
}
