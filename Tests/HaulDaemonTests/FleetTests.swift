import Foundation
import HaulCore
import HaulStore
import HaulTestSupport
import Logging
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Several `hauld` processes on one queue in PostgreSQL (a private cluster on 127.0.0.1),
/// downloading from the fault-injecting server into one shared directory.
@Suite("A fleet of hauld on one PostgreSQL queue", .serialized)
struct FleetTests {
    /// Daemons started on the cluster's database, each with its own data directory.
    struct Fleet {
        let cluster: LoopbackPostgres
        let url: String
        var daemons: [String: DaemonProcess] = [:]

        static func make() throws -> Fleet {
            let cluster = try LoopbackPostgres.start()
            do {
                try cluster.createDatabase("fleet")
            } catch {
                cluster.stop()
                throw error
            }
            return Fleet(cluster: cluster, url: cluster.url(database: "fleet"))
        }

        /// Starts daemon `name`; `store` replaces the database URL (a proxy's port).
        mutating func start(_ name: String, lease: Double, maximumTransfers: Int, store: String? = nil) async throws {
            let daemon = try DaemonProcess()
            try await daemon.start(extraArguments: [
                "--no-web", "--store", store ?? self.url, "--name", name, "--lease-seconds", "\(lease)",
                "--maximum-transfers", "\(maximumTransfers)",
            ])
            self.daemons[name] = daemon
        }

        func log(_ name: String) -> String {
            let path = self.daemons[name]!.dataDirectory.deletingLastPathComponent().appendingPathComponent("hauld.log").path
            return (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        }

        func request(_ name: String, _ command: DaemonRequest.Command) async throws -> DaemonResponse {
            let client = try DaemonTestClient(socketPath: self.daemons[name]!.socketPath)
            defer { client.close() }
            let response = try await client.request(DaemonRequest(command))
            if let error = response.error { throw DaemonTestError("\(name): \(error)") }
            return response
        }

        func downloads(_ name: String) async throws -> [QueuedDownloadInfo] {
            try await self.request(name, .queueList(QueuePage())).downloads ?? []
        }

        func stop() async {
            for daemon in self.daemons.values {
                _ = await daemon.terminate()
                daemon.cleanUp()
            }
            self.cluster.stop()
        }
    }

    /// Polls `body` until it answers non-nil (or the time is up).
    static func poll<T>(timeout: Duration = .seconds(60), _ body: () async throws -> T?) async -> T? {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let value = try? await body() { return value }
            try? await Task.sleep(for: .milliseconds(100))
        }
        return nil
    }

    static func key(_ number: Int) -> String { "fleet\(number).bin" }

    /// The downloads a daemon's log says it took over from another.
    static func takenOver(in log: String) -> Set<Int64> {
        var ids = Set<Int64>()
        for line in log.split(separator: "\n") {
            guard let range = line.range(of: ": download ") else { continue }
            let rest = line[range.upperBound...]
            let parts = rest.split(separator: " ", maxSplits: 3)
            if parts.count >= 3, parts[1] == "taken", parts[2] == "over", let id = Int64(parts[0]) { ids.insert(id) }
        }
        return ids
    }

    static func listing(_ directory: URL) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).sorted()
    }

    @Test("Three daemons, 60 downloads: each completes once with the server's bytes, never fetched by two daemons at once; a daemon killed mid-run has its downloads finished by the others")
    func threeDaemons() async throws {
        var fleet = try Fleet.make()
        let server = try await FaultInjectingHTTPServer.start()
        let directory = try makeTemporaryDirectory()
        let size: Int64 = 1 << 20
        for name in ["d0", "d1", "d2"] { try await fleet.start(name, lease: 2, maximumTransfers: 4) }
        // The host budget is the fleet's: 12 connections for the three daemons together.
        _ = try await fleet.request("d0", .queueSettings(.init(settingKey: "max-per-host", settingValue: "12")))
        let requests = (0..<60).map { number in
            NewDownload(
                urls: [server.url("/file/\(Self.key(number))?size=\(size)&seed=\(1000 + number)&rate=500000")],
                directory: directory.path, connections: 1
            )
        }
        _ = try await fleet.request("d1", .queueAdd(.batch(requests)))

        // Every daemon takes a share; then d0 dies holding some.
        let shares = await Self.poll { () -> [DaemonPresence]? in
            let members = try await fleet.request("d2", .fleetStatus).fleet ?? []
            return members.count == 3 && members.allSatisfy({ !$0.downloads.isEmpty }) ? members : nil
        }
        let held = try #require(shares?.first { $0.name == "d0" }?.downloads, "all three daemons run downloads")
        // Any door shows the fleet: the CLI of d2 lists the daemons and who runs what.
        let cli = HaulCLI(daemon: fleet.daemons["d2"]!)
        let status = try await cli.run(["daemon", "status"])
        #expect(status.status == 0, "\(status.standardError)")
        #expect(status.standardOutput.contains("daemons (3)") && status.standardOutput.contains("d2 *"), "\(status.standardOutput)")
        #expect(status.standardOutput.contains("store: postgres://"))
        let listed = try await cli.run(["ls"])
        #expect(listed.standardOutput.contains("[d0]") && listed.standardOutput.contains("[d1]"), "\(listed.standardOutput)")
        #expect(held.count <= 4, "max-concurrent is per daemon")
        // After a checkpoint (every half second): more than 600 kB of each at 500 kB/s.
        #expect(await waitUntil { held.allSatisfy { server.bodyBytesSent(forKey: Self.key(Int($0) - 1)) > 600_000 } })
        await fleet.daemons["d0"]!.kill9()
        let killedAt = ContinuousClock.now

        let finished = await Self.poll(timeout: .seconds(120)) { () -> [QueuedDownloadInfo]? in
            let all = try await fleet.downloads("d1")
            return all.count == 60 && all.allSatisfy({ $0.state == .complete }) ? all : nil
        }
        let unfinished = finished == nil ? ((try? await fleet.downloads("d1")) ?? []).filter { $0.state != .complete }.map { "\($0.id) \($0.state.rawValue) \($0.errorMessage ?? "")" } : []
        let downloads = try #require(finished, "all 60 complete; not: \(unfinished)")
        let takeover = ContinuousClock.now - killedAt

        // Exactly once: one file per download, the server's bytes, nothing else left behind.
        #expect(Self.listing(directory).count == 60, "\(Self.listing(directory))")
        for (number, download) in downloads.sorted(by: { $0.id < $1.id }).enumerated() {
            let path = try #require(download.path)
            #expect((path as NSString).lastPathComponent == Self.key(number))
            #expect(try TestContent.sha256Hex(ofFileAt: path) == TestContent.sha256Hex(size: size, seed: UInt64(1000 + number)))
        }
        // Never two daemons on one download at the same time (the server counts responses in
        // flight per file); bytes fetched twice only for downloads taken over (d0's, or one a
        // starved daemon fenced), after their last checkpoint.
        let peaks = server.peakActiveResponsesPerKey
        #expect(peaks.values.allSatisfy { $0 == 1 }, "\(peaks.filter { $0.value > 1 })")
        let survivors = fleet.log("d1") + fleet.log("d2")
        let takenOver = Self.takenOver(in: survivors)
        #expect(!takenOver.isEmpty && held.contains { takenOver.contains($0) }, "d0's downloads were taken over")
        var again: Int64 = 0
        for number in 0..<60 {
            let sent = server.bodyBytesSent(forKey: Self.key(number))
            if takenOver.contains(Int64(number + 1)) {
                again += sent - size
                #expect(sent <= size + 600_000, "download \(number + 1): \(sent) bytes sent")
            } else {
                #expect(sent == size, "download \(number + 1) was fetched once: \(sent) bytes sent")
            }
        }
        #expect(survivors.contains("taken over from d0: continuing at"), "the shared partial files were continued")
        let members = try await fleet.request("d1", .fleetStatus).fleet ?? []
        #expect(members.map(\.name) == ["d1", "d2"], "d0 is gone from the fleet")
        print("fleet: 60 × 1 MiB on 3 daemons, d0 killed holding \(held.count); \(again) bytes fetched again; all done \(takeover) after the kill (lease 2 s)")
        await fleet.stop()
        try await server.shutdown()
    }

    @Test("A daemon cut off from PostgreSQL stops writing before its leases expire; another takes its downloads over; back, it does not resume them")
    func partition() async throws {
        var fleet = try Fleet.make()
        let server = try await FaultInjectingHTTPServer.start()
        let proxy = try await LoopbackPartitionProxy.start(targetPort: fleet.cluster.port)
        let directory = try makeTemporaryDirectory()
        let size: Int64 = 3 << 20
        let cutOff = fleet.url.replacingOccurrences(of: ":\(fleet.cluster.port)/", with: ":\(proxy.port)/")
        try await fleet.start("cut", lease: 3, maximumTransfers: 3, store: cutOff)
        _ = try await fleet.request("cut", .queueSettings(.init(settingKey: "max-per-host", settingValue: "12")))
        let requests = (0..<6).map { number in
            NewDownload(
                urls: [server.url("/file/part\(number).bin?size=\(size)&seed=\(2000 + number)&rate=700000")],
                directory: directory.path, connections: 1
            )
        }
        _ = try await fleet.request("cut", .queueAdd(.batch(requests)))
        let held = await Self.poll { () -> [Int64]? in
            let mine = try await fleet.request("cut", .fleetStatus).fleet?.first?.downloads ?? []
            return mine.count == 3 ? mine : nil
        }
        let cutHeld = try #require(held)
        try await fleet.start("whole", lease: 3, maximumTransfers: 6)
        #expect(await waitUntil { cutHeld.allSatisfy { server.bodyBytesSent(forKey: "part\($0 - 1).bin") > 300_000 } })

        proxy.partition()
        let partitionedAt = ContinuousClock.now
        // The cut-off daemon fences itself; the other takes the downloads over.
        #expect(await waitUntil(timeout: .seconds(20)) { fleet.log("cut").contains("stopped: its lease could not be renewed") })
        let fencedAfter = ContinuousClock.now - partitionedAt
        #expect(await waitUntil(timeout: .seconds(30)) { fleet.log("whole").contains("taken over from cut") })
        let finished = await Self.poll(timeout: .seconds(60)) { () -> [QueuedDownloadInfo]? in
            let all = try await fleet.downloads("whole")
            return all.count == 6 && all.allSatisfy({ $0.state == .complete }) ? all : nil
        }
        let downloads = try #require(finished)
        proxy.heal()
        // Back: it hears that the downloads are done and holds nothing.
        let back = await Self.poll(timeout: .seconds(30)) { () -> [DaemonPresence]? in
            let members = try await fleet.request("cut", .fleetStatus).fleet ?? []
            return members.count == 2 ? members : nil
        }
        #expect(back?.first { $0.name == "cut" }?.downloads == [])
        try await Task.sleep(for: .seconds(1))

        #expect(Self.listing(directory).count == 6, "\(Self.listing(directory))")
        for (number, download) in downloads.sorted(by: { $0.id < $1.id }).enumerated() {
            #expect(try TestContent.sha256Hex(ofFileAt: try #require(download.path)) == TestContent.sha256Hex(size: size, seed: UInt64(2000 + number)))
        }
        let peaks = server.peakActiveResponsesPerKey
        #expect(peaks.values.allSatisfy { $0 == 1 }, "never two daemons at once: \(peaks)")
        #expect(fencedAfter < .seconds(3), "stopped within the lease (\(fencedAfter))")
        #expect(try await fleet.downloads("cut").allSatisfy { $0.state == .complete }, "the daemon that was cut off sees the others' work")
        print("partition: fenced \(fencedAfter) after the cut (lease 3 s)")
        await fleet.stop()
        try await proxy.shutdown()
        try await server.shutdown()
    }

    @Test("PostgreSQL goes away mid-download and comes back: the daemon pauses its work, reconnects and finishes every file exactly")
    func storeRestart() async throws {
        var fleet = try Fleet.make()
        let server = try await FaultInjectingHTTPServer.start()
        let directory = try makeTemporaryDirectory()
        let size: Int64 = 3 << 20
        try await fleet.start("solo", lease: 3, maximumTransfers: 3)
        let requests = (0..<3).map { number in
            NewDownload(urls: [server.url("/file/back\(number).bin?size=\(size)&seed=\(3000 + number)&rate=600000")], directory: directory.path, connections: 1)
        }
        _ = try await fleet.request("solo", .queueAdd(.batch(requests)))
        #expect(await waitUntil { (0..<3).allSatisfy { server.bodyBytesSent(forKey: "back\($0).bin") > 400_000 } })
        let cluster = fleet.cluster
        try await blocking { Result { try cluster.restart(after: .seconds(3)) } }.get()
        #expect(await waitUntil(timeout: .seconds(30)) { fleet.log("solo").contains("the store answers again") })
        let finished = await Self.poll(timeout: .seconds(60)) { () -> [QueuedDownloadInfo]? in
            let all = try await fleet.downloads("solo")
            return all.count == 3 && all.allSatisfy({ $0.state == .complete }) ? all : nil
        }
        let downloads = try #require(finished, "\(fleet.log("solo").suffix(3000))")
        for (number, download) in downloads.sorted(by: { $0.id < $1.id }).enumerated() {
            #expect(try TestContent.sha256Hex(ofFileAt: try #require(download.path)) == TestContent.sha256Hex(size: size, seed: UInt64(3000 + number)))
        }
        #expect(Self.listing(directory).count == 3)
        #expect(server.peakActiveResponsesPerKey.values.allSatisfy { $0 == 1 })
        await fleet.stop()
        try await server.shutdown()
    }

    @Test("A daemon of the fleet stopped between placing finished files and saving their ends: the daemon that claims each next takes a promised file it finds whole, fetches the rest, and leaves no second copy")
    func promisedPlacementTakenOver() async throws {
        var fleet = try Fleet.make()
        let server = try await FaultInjectingHTTPServer.start()
        let refusing = try RefusingPort()
        let directory = try makeTemporaryDirectory()
        // A daemon that dies as the kill -9 would leave it: each download claimed under a lease
        // that runs out, its file's place promised (as `finish` does under the lease), and, for
        // the first, the file placed; none of the ends saved.
        let ghost = try PostgresQueueStore(url: fleet.url, member: "ghost", logger: Logger(label: "test"))
        let size: Int64 = 300_000
        func row(_ url: URL, _ name: String) -> StoredDownload {
            var download = StoredDownload(urls: [url], directory: directory.path, requestedName: name, checksum: nil, priority: 0, speedLimit: 0)
            download.fileName = name
            return download
        }
        let rows = try ghost.insert([
            // Placed: its server refuses, so only the file found can complete it.
            row(URL(string: "http://127.0.0.1:\(refusing.port)/placed.bin")!, "placed.bin"),
            // Promised, not placed: fetched.
            row(server.url("/file/fetched.bin?size=\(size)&seed=71"), "fetched.bin"),
            // Promised, and a file of another length is there: not taken; fetched beside it.
            row(server.url("/file/other.bin?size=\(size)&seed=72"), "other.bin"),
        ])
        let placed = TestContent.bytes(0..<size, seed: 70)
        for download in rows {
            let id = try #require(download.id)
            guard case .claimed(_, let lease, _) = try ghost.claim(QueueClaim(downloadID: id, daemon: "ghost", leaseSeconds: 4, host: "127.0.0.1", connections: 1, maximumPerHost: 0), { row in
                // As the queue claims: active, and who ran it last.
                row.state = .active
                row.lastRunner = "ghost"
            }) else {
                Issue.record("the ghost's claim of \(id) failed")
                return
            }
            let path = directory.appendingPathComponent(download.fileName!).path
            try ghost.updateDownload(id: id, lease: lease, release: false) { row in
                row.finalPath = path
                row.totalBytes = size
            }
        }
        try Data(placed).write(to: directory.appendingPathComponent("placed.bin"))
        try Data(placed.prefix(1000)).write(to: directory.appendingPathComponent("other.bin"))

        // A live daemon takes them over once the ghost's leases run out.
        try await fleet.start("live", lease: 2, maximumTransfers: 4)
        let finished = await Self.poll(timeout: .seconds(60)) { () -> [QueuedDownloadInfo]? in
            let all = try await fleet.downloads("live")
            return all.count == 3 && all.allSatisfy({ $0.state == .complete }) ? all : nil
        }
        let states = finished == nil ? ((try? await fleet.downloads("live")) ?? []).map { "\($0.id) \($0.state.rawValue) \($0.errorMessage ?? "")" } : []
        let downloads = try #require(finished, "\(states) \(fleet.log("live").suffix(3000))")
        let byName = Dictionary(uniqueKeysWithValues: downloads.map { ($0.urls[0].lastPathComponent, $0) })
        #expect(byName["placed.bin"]?.path == directory.appendingPathComponent("placed.bin").path)
        #expect(try Data(contentsOf: directory.appendingPathComponent("placed.bin")) == Data(placed), "the placed file is kept as it was")
        #expect(fleet.log("live").contains("placed by ghost before it stopped, recorded now"), "\(fleet.log("live").suffix(2000))")
        #expect(byName["fetched.bin"]?.path == directory.appendingPathComponent("fetched.bin").path)
        #expect(try TestContent.sha256Hex(ofFileAt: directory.appendingPathComponent("fetched.bin").path) == TestContent.sha256Hex(size: size, seed: 71))
        #expect(byName["other.bin"]?.path == directory.appendingPathComponent("other (1).bin").path)
        #expect(try TestContent.sha256Hex(ofFileAt: directory.appendingPathComponent("other (1).bin").path) == TestContent.sha256Hex(size: size, seed: 72))
        #expect(try Data(contentsOf: directory.appendingPathComponent("other.bin")).count == 1000, "a file that is not the download's stays")
        #expect(Self.listing(directory) == ["fetched.bin", "other (1).bin", "other.bin", "placed.bin"])
        await fleet.stop()
        try await server.shutdown()
    }

    @Test("Small files of one host with the default settings: a fleet daemon runs as many at once as the host's budget allows, each claiming its share of it")
    func smallFilesShareTheHostBudget() async throws {
        var fleet = try Fleet.make()
        let server = try await FaultInjectingHTTPServer.start()
        let directory = try makeTemporaryDirectory()
        // 16 connections a download and 4 a host by default: a claim of all of them kept every
        // other download of the host waiting, one at a time, each asking again a second later.
        try await fleet.start("solo", lease: 3, maximumTransfers: 8)
        let size: Int64 = 150_000
        let requests = (0..<8).map { number in
            NewDownload(urls: [server.url("/file/share\(number).bin?size=\(size)&seed=\(500 + number)&rate=150000")], directory: directory.path)
        }
        _ = try await fleet.request("solo", .queueAdd(.batch(requests)))
        let finished = await Self.poll(timeout: .seconds(60)) { () -> [QueuedDownloadInfo]? in
            let all = try await fleet.downloads("solo")
            return all.count == 8 && all.allSatisfy({ $0.state == .complete }) ? all : nil
        }
        #expect(finished != nil, "\(fleet.log("solo").suffix(2000))")
        for number in 0..<8 {
            let path = directory.appendingPathComponent("share\(number).bin").path
            #expect(try TestContent.sha256Hex(ofFileAt: path) == TestContent.sha256Hex(size: size, seed: UInt64(500 + number)))
        }
        #expect(server.peakOpenConnections == 4, "the host's four connections in use at once, not one: \(server.peakOpenConnections)")
        await fleet.stop()
        try await server.shutdown()
    }
}
