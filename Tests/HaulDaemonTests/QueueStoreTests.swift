import Foundation
import HaulCore
import HaulStore
import HaulTestSupport
import Logging
import NIOPosix
import Synchronization
import Testing

/// The queue's store interface, the same checks against both engines: the embedded SQLite store
/// and PostgreSQL (a private cluster on 127.0.0.1 that the test starts and stops).
@Suite("Queue store interface: SQLite and PostgreSQL", .serialized)
struct QueueStoreTests {
    enum Engine: String, CaseIterable, CustomTestStringConvertible {
        case sqlite, postgres
        var testDescription: String { self.rawValue }
    }

    /// Starts a private PostgreSQL cluster. initdb and pg_ctl take seconds: they are waited for
    /// on a thread of their own, not on one of the few that run every test's tasks.
    static func startCluster() async throws -> LoopbackPostgres {
        try await blocking { Result { try LoopbackPostgres.start() } }.get()
    }

    /// A cluster (the caller stops it) with database "fleet" and the stores of two daemons on
    /// it, "a" and "b".
    static func twoDaemons() async throws -> (LoopbackPostgres, a: PostgresQueueStore, b: PostgresQueueStore) {
        let cluster = try await Self.startCluster()
        do {
            try cluster.createDatabase("fleet")
            let url = cluster.url(database: "fleet")
            let a = try PostgresQueueStore(url: url, member: "a", logger: Logger(label: "test"))
            return (cluster, a, try PostgresQueueStore(url: url, member: "b", logger: Logger(label: "test")))
        } catch {
            cluster.stop()
            throw error
        }
    }

    /// A fresh store of `engine`, and how to end it.
    static func open(_ engine: Engine) async throws -> (any QueueStore, () -> Void) {
        switch engine {
        case .sqlite:
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("haul-queue-\(UUID().uuidString).sqlite").path
            return (try TransferStore.open(path: path), { for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) } })
        case .postgres:
            let cluster = try await Self.startCluster()
            do {
                try cluster.createDatabase("haul")
                return (try PostgresQueueStore(url: cluster.url(database: "haul"), logger: Logger(label: "test")), { cluster.stop() })
            } catch {
                cluster.stop()
                throw error
            }
        }
    }

    static func download(_ name: String, state: QueuedDownloadState = .waiting) -> StoredDownload {
        var download = StoredDownload(
            urls: [URL(string: "http://127.0.0.1/\(name)")!, URL(string: "https://[::1]:8443/mirror/ü/\(name)")!],
            directory: "/srv/dl", requestedName: "\(name) \"q\" ü", checksum: nil, priority: 0, speedLimit: 0,
            createdAt: Date(timeIntervalSince1970: 1_763_900_000.5)
        )
        download.state = state
        return download
    }

    @Test("Every operation, the same on both engines", arguments: Engine.allCases)
    func operations(engine: Engine) async throws {
        let (store, close) = try await Self.open(engine)
        defer { close() }
        #expect(store.storeDescription.hasPrefix(engine == .sqlite ? "sqlite:" : "postgres://"))

        // Insert a batch: ids in order, gids given, every field read back.
        var full = Self.download("a", state: .error)
        full.gid = "0123456789abcdef"
        full.bytesDone = 1 << 33
        full.totalBytes = 1 << 34
        full.entityTag = "\"abc\""
        full.segments = ByteRangeSet([0..<10, 20..<30])
        full.connections = 4
        full.requestHeaders = ["X-A: \"1\""]
        full.options = ["split": "8"]
        full.errorMessage = "line one\nline two"
        let inserted = try store.insert([full, Self.download("b"), Self.download("c", state: .active)])
        #expect(inserted.count == 3 && inserted[0].id! < inserted[1].id! && inserted[1].id! < inserted[2].id!)
        #expect(inserted.allSatisfy { $0.gid.count == 16 })
        let read = try #require(try store.download(id: inserted[0].id!))
        #expect(read.urls == full.urls && read.requestedName == full.requestedName && read.state == .error)
        #expect(read.bytesDone == 1 << 33 && read.totalBytes == 1 << 34 && read.entityTag == "\"abc\"")
        #expect(read.segments == full.segments && read.connections == 4 && read.options == ["split": "8"])
        #expect(read.errorMessage == "line one\nline two" && read.gid == "0123456789abcdef")
        #expect(abs(read.createdAt.timeIntervalSince1970 - 1_763_900_000.5) < 0.002)
        #expect(try store.download(id: 999_999) == nil)
        // Many read together: those that exist, each once, whole; a missing one is left out.
        let together = try store.downloads(ids: [inserted[2].id!, 999_999, inserted[0].id!])
        #expect(Set(together.map(\.id)) == [inserted[0].id, inserted[2].id] && together.count == 2)
        #expect(together.first { $0.id == inserted[0].id }?.segments == full.segments)
        #expect(try store.downloads(ids: []).isEmpty && store.downloads(ids: [inserted[1].id!]).map(\.id) == [inserted[1].id])

        // A taken gid fails the whole batch.
        var clash = Self.download("d")
        clash.gid = "0123456789abcdef"
        #expect(throws: (any Error).self) { _ = try store.insert([Self.download("e"), clash]) }
        var count = 0
        try store.forEachDownload { _ in count += 1 }
        #expect(count == 3, "all or none")

        // Changes see the stored row; a missing one is nil.
        let changed = try store.updateDownload(id: inserted[1].id!) { $0.bytesDone = 42 }
        let reread = try store.download(id: inserted[1].id!)
        #expect(changed?.bytesDone == 42 && reread?.bytesDone == 42)
        #expect(try store.updateDownload(id: 999_999) { $0.bytesDone = 1 } == nil)
        let some = try store.updateDownloads(ids: inserted.map { $0.id! }) { download in
            guard download.state == .waiting else { return false }
            download.state = .paused
            return true
        }
        #expect(some.map(\.id) == [inserted[1].id])

        // After a restart, active downloads wait again.
        try store.reviveInterruptedDownloads(of: "test-daemon")
        #expect(try store.download(id: inserted[2].id!)?.state == .waiting)

        // Purge removes finished, failed and removed ones; delete removes one.
        #expect(try store.purgeFinishedDownloads() == 1)
        try store.deleteDownload(id: inserted[1].id!)
        var left: [Int64] = []
        try store.forEachDownload { left.append($0.id!) }
        #expect(left == [inserted[2].id!])

        // Settings: none before the first change.
        #expect(try store.queueSettings() == nil)
        var settings = QueueSettings(defaultDirectory: "/srv")
        settings.maximumConcurrentDownloads = 7
        try store.save(settings)
        settings.maximumConnectionsPerHost = 3
        try store.save(settings)
        #expect(try store.queueSettings() == settings)
    }

    @Test("The embedded store's promises of where finished files go: each named row gets its path and length and nothing else, the rest are untouched, and a promise that names no row changes nothing")
    func placementPromises() async throws {
        let (opened, close) = try await Self.open(.sqlite)
        defer { close() }
        let store = try #require(opened as? TransferStore)
        var rows = try store.insert((0..<5).map { Self.download("p\($0).bin") })
        rows[1] = try #require(try store.updateDownload(id: rows[1].id!) { $0.state = .active })
        let promises = [1, 2, 4].map { PlacementPromise(id: rows[$0].id!, path: "/srv/dl/p\($0) (promised).bin", totalBytes: Int64(1000 + $0)) }
        try store.promisePlacements(promises + [PlacementPromise(id: 99_999, path: "/srv/dl/none.bin", totalBytes: 1)])
        for (index, row) in rows.enumerated() {
            let read = try #require(try store.download(id: row.id!))
            var expected = row
            if [1, 2, 4].contains(index) {
                expected.finalPath = "/srv/dl/p\(index) (promised).bin"
                expected.totalBytes = Int64(1000 + index)
            }
            #expect(read == expected, "row \(index)")
        }
        #expect(try store.download(id: 99_999) == nil)
        try store.promisePlacements([])
    }

    @Test("Thousands of downloads are listed in order, in pages, without holding them all", arguments: Engine.allCases)
    func manyDownloads(engine: Engine) async throws {
        let (store, close) = try await Self.open(engine)
        defer { close() }
        let inserted = try store.insert((0..<2_500).map { Self.download("f\($0)") })
        var ids: [Int64] = []
        try store.forEachDownload { ids.append($0.id!) }
        #expect(ids == inserted.map { $0.id! })
    }

    @Test("A shared store: claims skip what another daemon holds, fencing refuses stale leases, expired leases are reclaimed, the host budget is the fleet's, changes are announced")
    func leases() async throws {
        let (cluster, a, b) = try await Self.twoDaemons()
        defer { cluster.stop() }
        #expect(a.isShared && b.isShared)

        let heard = Mutex<[QueueStoreChange]>([])
        let observation = try #require(b.observeChanges { change in heard.withLock { $0.append(change) } })
        defer { observation.cancel() }
        #expect(await Self.wait { heard.withLock { $0.contains(.resync) } }, "the listener announces that it listens")

        let rows = try a.insert([Self.download("one"), Self.download("two"), Self.download("three")])
        let ids = rows.map { $0.id! }
        func claim(_ store: PostgresQueueStore, _ id: Int64, connections: Int = 1, lease: Double = 1, perHost: Int = 0) throws -> QueueClaimOutcome {
            try store.claim(QueueClaim(downloadID: id, daemon: store.member, leaseSeconds: lease, host: "h", connections: connections, maximumPerHost: perHost)) {
                $0.state = .active
            }
        }

        // a claims; b cannot while a's lease lives. The lease outlives the steps up to its
        // renewal however slow the machine; the renewal then shortens it to one second.
        guard case .claimed(let claimed, let leaseA, 1) = try claim(a, ids[0], lease: 30) else { Issue.record("a's claim failed"); return }
        #expect(claimed.state == .active && claimed.runner == "a" && leaseA.generation == 1)
        guard case .heldElsewhere("a", let seen?) = try claim(b, ids[0]) else { Issue.record("b claimed a held download"); return }
        #expect(seen.runner == "a" && seen.state == .active, "the row as b's claim read it")
        #expect(try b.download(id: ids[0])?.runner == "a", "every reader sees who runs it")
        #expect(await Self.wait { heard.withLock { $0.contains(.download(ids[0])) } }, "b heard of a's claim")
        heard.withLock { $0.removeAll() }

        // a writes under its lease and renews it.
        #expect(try a.updateDownload(id: ids[0], lease: leaseA, release: false) { $0.bytesDone = 100 }?.bytesDone == 100)
        #expect(try a.renewLeases([ids[0]: leaseA], seconds: 1) == [ids[0]])

        // The lease expires unrenewed: b reclaims it and claims it under a new generation.
        try await Task.sleep(for: .milliseconds(1300))
        let reclaimed = try b.reclaimExpiredLeases()
        #expect(reclaimed.map { $0.download.id } == [ids[0]] && reclaimed.first?.previousHolder == "a")
        #expect(reclaimed.first?.download.state == .waiting && reclaimed.first?.download.bytesDone == 100)
        guard case .claimed(_, let leaseB, _) = try claim(b, ids[0], lease: 30) else { Issue.record("b's claim failed"); return }
        #expect(leaseB.generation == 2)

        // a comes back: its writes and renewals are refused; the row keeps b's bytes.
        #expect(throws: QueueLeaseLost.self) { try a.updateDownload(id: ids[0], lease: leaseA, release: false) { $0.bytesDone = 1 } }
        // Before placing a finished file, a confirms its lease: refused too; b's is current.
        #expect(throws: QueueLeaseLost.self) { try a.confirmLease(id: ids[0], lease: leaseA) }
        try b.confirmLease(id: ids[0], lease: leaseB)
        #expect(try a.renewLeases([ids[0]: leaseA], seconds: 30).isEmpty)
        #expect(try b.download(id: ids[0])?.bytesDone == 100)

        // The fleet's budget for host h: 3 connections. b holds 1; a gets 2 of the 4 it asks
        // for, then nothing is left.
        guard case .claimed(_, _, 2) = try claim(a, ids[1], connections: 4, lease: 30, perHost: 3) else { Issue.record("budget not shared"); return }
        guard case .hostBusy = try claim(a, ids[2], connections: 1, lease: 30, perHost: 3) else { Issue.record("over the host budget"); return }

        // Heartbeats list both daemons with what each holds.
        _ = try a.heartbeat(daemon: "a", pid: 1, startedAt: Date(), liveSeconds: 30)
        let fleet = try b.heartbeat(daemon: "b", pid: 2, startedAt: Date(), liveSeconds: 30)
        #expect(fleet.map(\.name) == ["a", "b"])
        #expect(fleet.first { $0.name == "a" }?.downloads == [ids[1]] && fleet.first { $0.name == "b" }?.downloads == [ids[0]])
        try a.leave(daemon: "a")
        #expect(try b.heartbeat(daemon: "b", pid: 2, startedAt: Date(), liveSeconds: 30).map(\.name) == ["b"])

        // Released, it is anyone's again; a restarted daemon revives only its own.
        try b.updateDownload(id: ids[0], lease: leaseB, release: true) { $0.state = .waiting }
        #expect(try a.download(id: ids[0])?.runner == nil)
        try b.reviveInterruptedDownloads(of: "b")
        #expect(try b.download(id: ids[1])?.state == .active, "a's live lease is not b's to revive")
        try a.reviveInterruptedDownloads(of: "a")
        #expect(try b.download(id: ids[1])?.state == .waiting && b.download(id: ids[1])?.runner == nil)
        #expect(await Self.wait { heard.withLock { $0.contains(.download(ids[1])) } })
    }

    @Test("A shared store: a claim of a download another daemon holds takes the first of its alternatives that waits and nobody holds, by the same call; with none free it is refused as before")
    func claimAlternatives() async throws {
        let (cluster, a, b) = try await Self.twoDaemons()
        defer { cluster.stop() }
        let ids = try a.insert((1...6).map { Self.download("f\($0)") }).map { $0.id! }
        func claim(_ store: PostgresQueueStore, _ id: Int64, alternatives: [Int64] = [], connections: Int = 1, perHost: Int = 0) throws -> QueueClaimOutcome {
            try store.claim(QueueClaim(downloadID: id, daemon: store.member, leaseSeconds: 30, host: "h", connections: connections, maximumPerHost: perHost, alternatives: alternatives)) {
                $0.state = .active
            }
        }
        // a holds 1 and 2; 3 is paused.
        for id in ids.prefix(2) { guard case .claimed = try claim(a, id) else { Issue.record("a's claim of \(id) failed"); return } }
        _ = try a.updateDownload(id: ids[2]) { $0.state = .paused }
        // b asks for 1 offering 2, 3, 5, 4: 2 is held, 3 waits no more, 5 is the first free in b's order.
        guard case .claimed(let taken, let lease, 1) = try claim(b, ids[0], alternatives: [ids[1], ids[2], ids[4], ids[3]]) else {
            Issue.record("no alternative claimed"); return
        }
        #expect(taken.id == ids[4] && taken.state == .active && taken.runner == "b" && lease.daemon == "b")
        #expect(try a.download(id: ids[4])?.runner == "b" && a.download(id: ids[3])?.runner == nil, "5 claimed, 4 untouched")
        #expect(try a.download(id: ids[0])?.runner == "a", "1 stays a's")
        // One that waits no more is passed over the same way.
        guard case .claimed(let next, _, _) = try claim(b, ids[2], alternatives: [ids[3]]) else { Issue.record("paused one not passed over"); return }
        #expect(next.id == ids[3])
        // Nothing free among them: refused, as without alternatives, with the row asked for.
        guard case .heldElsewhere("a", let seen?) = try claim(b, ids[0], alternatives: [ids[1], ids[2], ids[4]]) else { Issue.record("not refused"); return }
        #expect(seen.id == ids[0])
        // The host budget counts for the alternative claimed: 3 connections, a holds 2, b 2.
        guard case .hostBusy = try claim(b, ids[0], alternatives: [ids[5]], perHost: 4) else { Issue.record("over the host budget"); return }
        guard case .claimed(let last, _, 1) = try claim(b, ids[0], alternatives: [ids[5]], connections: 2, perHost: 5) else { Issue.record("budget miscounted"); return }
        #expect(last.id == ids[5])
    }

    @Test("A shared store: a claim, and a write under a lease, never write over a change made between their read and their write; a lease reclaimed meanwhile is not written under")
    func noWriteOverAChangeMadeMeanwhile() async throws {
        let (cluster, a, b) = try await Self.twoDaemons()
        defer { cluster.stop() }
        let id = try a.insert([Self.download("f")])[0].id!
        // b changes the row while a's claim holds what it read (its first read only).
        let reads = Mutex(0)
        let outcome = try a.claim(QueueClaim(downloadID: id, daemon: "a", leaseSeconds: 30, host: "h", connections: 1, maximumPerHost: 4)) { row in
            if reads.withLock({ $0 += 1; return $0 }) == 1 { _ = try b.updateDownload(id: id) { $0.priority = 7 } }
            row.state = .active
        }
        guard case .claimed(let claimed, let lease, 1) = outcome else { Issue.record("not claimed: \(outcome)"); return }
        #expect(reads.withLock { $0 } == 2, "read again after the change")
        #expect(claimed.priority == 7 && claimed.state == .active)
        let stored = try b.download(id: id)
        #expect(stored?.priority == 7 && stored?.state == .active && stored?.runner == "a")
        // The same for a write under the lease.
        let writes = Mutex(0)
        let written = try a.updateDownload(id: id, lease: lease, release: false) { row in
            if writes.withLock({ $0 += 1; return $0 }) == 1 { _ = try b.updateDownload(id: id) { $0.speedLimit = 1_000 } }
            row.bytesDone = 42
        }
        #expect(writes.withLock { $0 } == 2)
        #expect(written?.speedLimit == 1_000 && written?.bytesDone == 42)
        let after = try b.download(id: id)
        #expect(after?.speedLimit == 1_000 && after?.bytesDone == 42 && after?.priority == 7 && after?.runner == "a")
        // Written over the caller's copy without a read while it is the row as stored; a copy
        // that is not (b changed the row since) is not written over: read again, b's change kept.
        guard let current = after else { Issue.record("no row"); return }
        let direct = try a.updateDownload(id: id, lease: lease, release: false, last: current) { $0.bytesDone = 43 }
        #expect(direct?.bytesDone == 43 && direct?.speedLimit == 1_000)
        _ = try b.updateDownload(id: id) { $0.priority = 9 }
        let stale = try a.updateDownload(id: id, lease: lease, release: false, last: direct) { $0.bytesDone = 44 }
        #expect(stale?.bytesDone == 44 && stale?.priority == 9)
        let kept = try b.download(id: id)
        #expect(kept?.bytesDone == 44 && kept?.priority == 9 && kept?.speedLimit == 1_000 && kept?.runner == "a")
        // A lease that runs out and is reclaimed between the read and the write: refused,
        // nothing written.
        let other = try a.insert([Self.download("g")])[0].id!
        guard case .claimed(_, let short, _) = try a.claim(QueueClaim(downloadID: other, daemon: "a", leaseSeconds: 0.5, host: "h", connections: 1, maximumPerHost: 0), { $0.state = .active })
        else { Issue.record("second claim failed"); return }
        #expect(throws: QueueLeaseLost.self) {
            try a.updateDownload(id: other, lease: short, release: true) { row in
                Thread.sleep(forTimeInterval: 0.8)
                let reclaimed = try b.reclaimExpiredLeases().map(\.download.id)
                #expect(reclaimed == [other])
                row.state = .complete
            }
        }
        let reclaimed = try b.download(id: other)
        #expect(reclaimed?.state == .waiting && reclaimed?.runner == nil, "not written after the lease was reclaimed")
        // Reclaimed and claimed again by the same daemon, the row as it was read: the old lease
        // (an older generation) is refused all the same.
        guard case .claimed(_, let first, _) = try a.claim(QueueClaim(downloadID: other, daemon: "a", leaseSeconds: 0.5, host: "h", connections: 1, maximumPerHost: 0), { $0.state = .active })
        else { Issue.record("third claim failed"); return }
        #expect(throws: QueueLeaseLost.self) {
            try a.updateDownload(id: other, lease: first, release: true) { row in
                if row.state == .active, try b.download(id: other)?.runner == "a" {
                    Thread.sleep(forTimeInterval: 0.8)
                    _ = try b.reclaimExpiredLeases()
                    // (Through b's connection: a's is busy with this write.)
                    guard case .claimed = try b.claim(QueueClaim(downloadID: other, daemon: "a", leaseSeconds: 30, host: "h", connections: 1, maximumPerHost: 0), { $0.state = .active })
                    else { Issue.record("claimed again"); return }
                }
                row.state = .complete
            }
        }
        #expect(try b.download(id: other)?.state == .active, "not written under the old lease")
    }

    @Test("A shared store: claims racing for one host from four daemons at once grant no more connections than its budget")
    func racingClaimsKeepTheHostBudget() async throws {
        let (cluster, a, b) = try await Self.twoDaemons()
        defer { cluster.stop() }
        let url = cluster.url(database: "fleet")
        let stores = [a, b] + (try ["c", "d"].map { try PostgresQueueStore(url: url, member: $0, logger: Logger(label: "test")) })
        let budget = 5
        for round in 0..<6 {
            let ids = try a.insert((0..<(4 * 4)).map { Self.download("r\(round)-\($0)") }).map { $0.id! }
            let granted = Mutex<[Int64: (connections: Int, lease: QueueLease, store: Int)]>([:])
            let failures = Mutex<[String]>([])
            DispatchQueue.concurrentPerform(iterations: stores.count) { index in
                let store = stores[index]
                for id in ids[(index * 4)..<(index * 4 + 4)] {
                    do {
                        let claim = QueueClaim(downloadID: id, daemon: store.member, leaseSeconds: 30, host: "h", connections: 2, maximumPerHost: budget)
                        if case .claimed(_, let lease, let connections) = try store.claim(claim, { $0.state = .active }) {
                            granted.withLock { $0[id] = (connections, lease, index) }
                        }
                    } catch {
                        failures.withLock { $0.append("\(error)") }
                    }
                }
            }
            #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
            let claims = granted.withLock { $0 }
            let total = claims.values.reduce(0) { $0 + $1.connections }
            #expect(total == budget, "round \(round): \(claims.mapValues(\.connections)) connections granted against a budget of \(budget)")
            // Everything goes back before the next round.
            for (id, claim) in claims {
                _ = try stores[claim.store].updateDownload(id: id, lease: claim.lease, release: true) { $0.state = .complete }
            }
        }
    }

    /// Polls `condition` for up to five seconds (sleeping without holding a thread).
    @Test("A statement the store never answers: reported while it waits, given up after the timeout, and the next call connects again")
    func unansweredStatement() async throws {
        let cluster = try await Self.startCluster()
        defer { cluster.stop() }
        try cluster.createDatabase("silent")
        let proxy = try await LoopbackPartitionProxy.start(targetPort: cluster.port)
        let url = "postgres://\(cluster.user)@127.0.0.1:\(proxy.port)/silent"
        let store = try PostgresQueueStore(url: url, member: "a", queryTimeout: .seconds(1), logger: Logger(label: "test"))
        let beat = { @Sendable in Result { try store.heartbeat(daemon: "a", pid: 1, startedAt: Date(), liveSeconds: 3) } }
        _ = try await blocking(beat).get()
        #expect(store.callsInFlight(longerThan: .zero).isEmpty, "nothing in flight between calls")

        proxy.partition()
        let began = ContinuousClock.now
        async let outcome = blocking(beat)
        var reported: [String] = []
        while reported.isEmpty, ContinuousClock.now - began < .seconds(5) {
            try await Task.sleep(for: .milliseconds(50))
            reported = store.callsInFlight(longerThan: .milliseconds(300))
        }
        #expect(reported.count == 1)
        #expect(reported.first?.hasPrefix("lease connection: running 'INSERT INTO haul_daemon") == true, "\(reported)")
        let failure = await outcome
        let waited = ContinuousClock.now - began
        #expect(throws: PostgresQueueStore.StoreError.self) { try failure.get() }
        #expect(waited < .seconds(3), "given up after the 1-s timeout (and at most a second more), not \(waited)")
        #expect(store.callsInFlight(longerThan: .zero).isEmpty)

        proxy.heal()
        let daemons = try await blocking(beat).get()
        #expect(daemons.map(\.name) == ["a"], "the next call connects again")
        try await proxy.shutdown()
    }

    @Test("A store call whose event loop is stuck gives up on its own clock; the next call connects again", .timeLimit(.minutes(1)))
    func stuckEventLoop() async throws {
        let cluster = try await Self.startCluster()
        defer { cluster.stop() }
        try cluster.createDatabase("stuck")
        // The store's own loop, so that blocking it stops nothing else in the test process.
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        // The store goes (closing its connections on the loop) before the loop does.
        try await Self.callOnStuckLoop(group: group, url: cluster.url(database: "stuck"))
        try await group.shutdownGracefully()
    }

    private static func callOnStuckLoop(group: MultiThreadedEventLoopGroup, url: String) async throws {
        let store = try PostgresQueueStore(url: url, member: "a", queryTimeout: .seconds(1), eventLoopGroup: group, logger: Logger(label: "test"))
        let beat = { @Sendable in Result { try store.heartbeat(daemon: "a", pid: 1, startedAt: Date(), liveSeconds: 3) } }
        _ = try await blocking(beat).get()

        // The loop runs a job that does not return: its timers (the statement's time out among
        // them) cannot fire, and the answer cannot be read.
        let release = DispatchSemaphore(value: 0)
        group.next().execute { release.wait() }
        let began = ContinuousClock.now
        let failure = await blocking(beat)
        let waited = ContinuousClock.now - began
        #expect(throws: PostgresQueueStore.StoreError.self) { try failure.get() }
        #expect("\(failure)".contains("no answer from the store"), "\(failure)")
        // Dispatch's timed wait and the test's clock differ by some milliseconds (a CI run saw
        // 1.991 s): the bound is the time out and a second, less a tenth for the clocks.
        #expect(waited >= .milliseconds(1_900) && waited < .seconds(4), "the time out and a second: \(waited)")

        release.signal()
        let daemons = try await blocking(beat).get()
        #expect(daemons.map(\.name) == ["a"], "the next call connects again")
    }

    @Test("A cluster whose test process died is stopped and deleted by the next process's first start")
    func abandonedCluster() async throws {
        let cluster = try await Self.startCluster()
        defer { cluster.stop() }
        // A process that has ended: its pid names nobody now.
        let ended = Process()
        ended.executableURL = URL(fileURLWithPath: "/bin/true")
        try ended.run()
        await blocking { ended.waitUntilExit() }
        try Data("\(ended.processIdentifier)".utf8).write(to: cluster.directory.appendingPathComponent("owner.pid"))
        let alive = try await Self.startCluster()
        defer { alive.stop() }

        let stopped = await blocking { LoopbackPostgres.stopAbandonedClusters() }
        #expect(stopped == 1)
        #expect(!FileManager.default.fileExists(atPath: cluster.directory.path))
        #expect(FileManager.default.fileExists(atPath: alive.directory.path), "a cluster of this process stays")
        #expect(throws: (any Error).self, "its server no longer listens") { _ = try RawHTTPConnection(port: cluster.port, timeoutSeconds: 2) }
        #expect(throws: Never.self, "the live one still does") { _ = try RawHTTPConnection(port: alive.port, timeoutSeconds: 2) }
    }

    static func wait(_ condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return condition()
    }
}
