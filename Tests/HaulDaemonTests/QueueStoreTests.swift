import Foundation
import HaulCore
import HaulStore
import HaulTestSupport
import Logging
import Testing

/// The queue's store interface, the same checks against both engines: the embedded SQLite store
/// and PostgreSQL (a private cluster on 127.0.0.1 that the test starts and stops).
@Suite("Queue store interface: SQLite and PostgreSQL", .serialized)
struct QueueStoreTests {
    enum Engine: String, CaseIterable, CustomTestStringConvertible {
        case sqlite, postgres
        var testDescription: String { self.rawValue }
    }

    /// A fresh store of `engine`, and how to end it.
    static func open(_ engine: Engine) throws -> (any QueueStore, () -> Void) {
        switch engine {
        case .sqlite:
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("haul-queue-\(UUID().uuidString).sqlite").path
            return (try TransferStore.open(path: path), { for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) } })
        case .postgres:
            let cluster = try LoopbackPostgres.start()
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
    func operations(engine: Engine) throws {
        let (store, close) = try Self.open(engine)
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
        try store.reviveInterruptedDownloads()
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

    @Test("Thousands of downloads are listed in order, in pages, without holding them all", arguments: Engine.allCases)
    func manyDownloads(engine: Engine) throws {
        let (store, close) = try Self.open(engine)
        defer { close() }
        let inserted = try store.insert((0..<2_500).map { Self.download("f\($0)") })
        var ids: [Int64] = []
        try store.forEachDownload { ids.append($0.id!) }
        #expect(ids == inserted.map { $0.id! })
    }
}
