import Foundation
import GRDB
import Synchronization
import HaulCore
import HaulStore
import Testing

@Suite("TransferStore (SQLite, in memory)")
struct TransferStoreTests {
    func makeTask(_ store: TransferStore, session: String = "s") throws -> StoredTask {
        try store.insert(
            StoredTask(
                sessionIdentifier: session,
                url: URL(string: "http://127.0.0.1/a")!,
                requestHeaders: HTTPHeaderFields([("X", "1")]),
                taskDescription: "d",
                isDiscretionary: false,
                partialFilePath: "/tmp/p",
                resourceDeadline: Date().addingTimeInterval(60)
            )
        )
    }

    @Test("Downloads added in a batch read back field for field; dates are stored as GRDB writes them")
    func downloadsRoundTrip() throws {
        let store = try TransferStore.inMemory()
        var full = StoredDownload(
            urls: [URL(string: "http://127.0.0.1/a%20b?q=\"x\"")!, URL(string: "https://[::1]:8443/mirror/ü")!],
            directory: "/srv/dl",
            requestedName: "name \"quoted\" \\ ü.bin",
            checksum: "sha256=00",
            priority: -3,
            speedLimit: 1_000,
            createdAt: Date(timeIntervalSince1970: 1_763_900_000.987_6)
        )
        full.urlIndex = 1
        full.currentURL = URL(string: "http://127.0.0.1/redirected")
        full.partialPath = "/srv/dl/x.1.haul-part"
        full.finalPath = "/srv/dl/x"
        full.state = .error
        full.bytesDone = 1 << 33
        full.totalBytes = 1 << 34
        full.entityTag = "\"abc\""
        full.lastModified = "Sun, 06 Nov 1994 08:49:37 GMT"
        full.errorMessage = "line one\nline two"
        full.failedAttempts = 4
        full.notBefore = Date(timeIntervalSince1970: 0.5)
        full.startedAt = Date(timeIntervalSince1970: 4_102_444_799.001)
        full.finishedAt = Date(timeIntervalSince1970: 1_000_000_000)
        full.gid = "0123456789abcdef"
        full.errorCode = 22
        full.requestHeaders = ["X-A: \"1\"", "Referer: http://r/ü"]
        full.options = ["split": "8", "max-connection-per-server": "16"]
        full.queueRank = -3.25
        let minimal = StoredDownload(urls: [URL(string: "http://127.0.0.1/b")!], directory: "/d", requestedName: nil, checksum: nil, priority: 0, speedLimit: 0)
        let inserted = try store.insert([full, minimal])
        #expect(inserted.map(\.id) == [1, 2])
        // Dates keep their milliseconds (rounded, as GRDB's own formatter writes them).
        func close(_ read: Date?, _ written: Date?) -> Bool {
            guard let read, let written else { return read == nil && written == nil }
            let difference = written.timeIntervalSince1970 - read.timeIntervalSince1970
            return abs(difference) <= 0.000_51
        }
        for (written, id) in zip([full, minimal], [Int64(1), 2]) {
            let read = try #require(try store.download(id: id))
            #expect(close(read.createdAt, written.createdAt))
            #expect(close(read.notBefore, written.notBefore))
            #expect(close(read.startedAt, written.startedAt))
            #expect(close(read.finishedAt, written.finishedAt))
            var expected = written
            expected.id = id
            // A bare insert without a gid gets a random one.
            if written.gid.isEmpty { #expect(DownloadGID.normalized(read.gid) == read.gid) } else { #expect(read.gid == written.gid) }
            expected.gid = read.gid
            expected.createdAt = read.createdAt
            expected.notBefore = read.notBefore
            expected.startedAt = read.startedAt
            expected.finishedAt = read.finishedAt
            #expect(read == expected)
        }
        let texts = try store.read { db in try String.fetchAll(db, sql: "SELECT createdAt FROM queuedDownload ORDER BY id") }
        #expect(texts[0] == String.fromDatabaseValue(full.createdAt.databaseValue), "the text GRDB itself writes")
        #expect(texts[0] == "2025-11-23 12:13:20.988")
        // Updates go through the same columns.
        try store.updateDownload(id: 2) { $0.finishedAt = Date(timeIntervalSince1970: 86_400.25) }
        #expect(close(try store.download(id: 2)?.finishedAt, Date(timeIntervalSince1970: 86_400.25)))
    }

    @Test func tasksGetIdentifiersAndRoundTrip() throws {
        let store = try TransferStore.inMemory()
        let first = try makeTask(store)
        let second = try makeTask(store)
        #expect(first.id == 1)
        #expect(second.id == 2)
        let loaded = try #require(try store.task(id: 1))
        #expect(loaded.requestHeaders["X"] == "1")
        #expect(loaded.state == .suspended)
    }

    @Test func restartTurnsRunningTasksIntoWaitingOnes() throws {
        let store = try TransferStore.inMemory()
        var task = try makeTask(store)
        task.state = .running
        try store.update(task)
        var suspended = try makeTask(store)
        suspended.state = .suspended
        try store.update(suspended)
        let revived = try store.reviveInterruptedTasks()
        #expect(revived.map(\.id) == [task.id])
        #expect(try store.task(id: task.id!)?.state == .waiting)
        #expect(try store.task(id: suspended.id!)?.state == .suspended)
    }

    @Test func checkpointsRecordTheResumePoint() throws {
        let store = try TransferStore.inMemory()
        let task = try makeTask(store)
        let point = ResumePoint(offset: 4096, validators: EntityValidators(entityTag: "\"e\""), entityLength: 10_000)
        try store.checkpoint(taskID: task.id!, point: point, currentURL: URL(string: "http://127.0.0.1/b")!)
        let loaded = try #require(try store.task(id: task.id!))
        #expect(loaded.resumePoint == point)
        #expect(loaded.currentURL.path == "/b")
        try store.checkpoint(taskID: task.id!, point: nil, currentURL: loaded.currentURL)
        #expect(try store.task(id: task.id!)?.resumePoint == nil)
    }

    @Test func completionQueuesEventsUntilAcknowledged() throws {
        let store = try TransferStore.inMemory()
        let task = try makeTask(store, session: "a")
        let other = try makeTask(store, session: "b")
        var finished = PendingEvent(sessionIdentifier: "a", taskID: task.id!, kind: .finishedDownloading)
        finished.heldFilePath = "/tmp/held"
        let events = try store.complete(taskID: task.id!, events: [finished, PendingEvent(sessionIdentifier: "a", taskID: task.id!, kind: .completed)])
        #expect(events.map(\.id) == [1, 2])
        #expect(try store.liveTasks(session: "a").isEmpty)
        #expect(try store.liveTasks(session: "b").map(\.id) == [other.id])
        #expect(try store.pendingEvents(session: "a").map(\.kind) == [.finishedDownloading, .completed])
        #expect(try store.sessionsWithPendingEvents() == ["a"])
        #expect(try store.acknowledge(eventID: 1, session: "b") == nil, "a session cannot acknowledge another's events")
        #expect(try store.acknowledge(eventID: 1, session: "a")?.heldFilePath == "/tmp/held")
        #expect(try store.pendingEvents(session: "a").map(\.id) == [2])
    }

    @Test func aStoreOnDiskSurvivesReopening() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("store-\(UUID().uuidString).sqlite").path
        defer { for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) } }
        do {
            let store = try TransferStore.open(path: path)
            _ = try makeTask(store)
        }
        let reopened = try TransferStore.open(path: path)
        #expect(try reopened.task(id: 1)?.sessionIdentifier == "s")
    }

    @Test("A store on disk keeps statement journals in memory: a batch inserted into a large queue writes no temporary file")
    func statementJournalsStayInMemory() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("store-\(UUID().uuidString).sqlite").path
        defer { for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) } }
        let store = try TransferStore.open(path: path)
        func rows(_ prefix: String, _ count: Int) -> [StoredDownload] {
            (0..<count).map { StoredDownload(urls: [URL(string: "http://127.0.0.1/\(prefix)\($0)")!], directory: "/d", requestedName: nil, checksum: nil, priority: 0, speedLimit: 0) }
        }
        // Random gids put each statement's 32 rows on pages all over the gid index, pages the
        // batch changed already: their journal outgrows SQLite's 64 KiB in memory.
        for batch in 0..<8 { _ = try store.insert(rows("q\(batch)-", 1_000)) }
        let watch = try TemporaryFileWatch(directory: Self.sqliteTemporaryDirectory())
        try store.batch {
            _ = try store.insert(rows("a-", 1_000))
            _ = try store.insert(rows("b-", 1_000))
        }
        #expect(try watch.created().filter { $0.hasPrefix("etilqs_") } == [])
        #expect(try store.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM queuedDownload") } == 10_000)
    }

    /// Where SQLite puts its temporary files: the first of these that is a writable directory.
    static func sqliteTemporaryDirectory() -> String {
        let environment = ProcessInfo.processInfo.environment
        let candidates = [environment["SQLITE_TMPDIR"], environment["TMPDIR"], "/var/tmp", "/usr/tmp", "/tmp", "."]
        return candidates.compactMap { $0 }.first { path in
            var isDirectory: ObjCBool = false
            return FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && isDirectory.boolValue && access(path, W_OK | X_OK) == 0
        } ?? "."
    }

    /// The names of files created in a directory from now on (inotify).
    final class TemporaryFileWatch {
        private let descriptor: Int32

        init(directory: String) throws {
            self.descriptor = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
            guard self.descriptor >= 0, inotify_add_watch(self.descriptor, directory, UInt32(IN_CREATE)) >= 0 else {
                throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
            }
        }

        deinit { close(self.descriptor) }

        func created() throws -> [String] {
            var names: [String] = []
            var buffer = [UInt8](repeating: 0, count: 64 * 1024)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(self.descriptor, $0.baseAddress, $0.count) }
                guard count > 0 else { break }
                var offset = 0
                // Each event: wd, mask, cookie, len (4 bytes each), then len bytes of name.
                while offset + 16 <= count {
                    let length = buffer[offset + 12..<offset + 16].withUnsafeBytes { Int($0.loadUnaligned(as: UInt32.self)) }
                    let name = buffer[offset + 16..<offset + 16 + length].prefix { $0 != 0 }
                    names.append(String(decoding: name, as: UTF8.self))
                    offset += 16 + length
                }
            }
            return names
        }
    }

    struct Refused: Error {}

    /// Runs `body` on a new thread (not a dispatch queue's, which a `sync` call would run on
    /// the caller's own thread) and waits for it.
    static func onOtherThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) throws -> T {
        let result = Mutex<Result<T, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread {
            result.withLock { $0 = Result { try body() } }
            done.signal()
        }.start()
        done.wait()
        return try result.withLock { $0! }.get()
    }

    @Test("A batch is one transaction: its calls see each other's writes, a call that throws leaves only its own change out, other connections see all or nothing")
    func batchIsOneTransaction() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("store-\(UUID().uuidString).sqlite").path
        defer { for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) } }
        let store = try TransferStore.open(path: path)
        let row = StoredDownload(urls: [URL(string: "http://127.0.0.1/a")!], directory: "/d", requestedName: nil, checksum: nil, priority: 0, speedLimit: 0)
        let existing = try store.insert([row])[0].id!
        let seenOutside = try store.batch { () throws -> StoredDownload? in
            let ids = try store.insert([row, row]).map { $0.id! }
            try store.updateDownload(id: ids[0]) { $0.bytesDone = 7 }
            #expect(try store.download(id: ids[0])?.bytesDone == 7, "the batch reads its own write")
            #expect(throws: Refused.self) {
                try store.updateDownload(id: existing) { download in
                    download.bytesDone = 99
                    throw Refused()
                }
            }
            // A batch inside the batch joins it.
            try store.batch { try store.updateDownload(id: ids[1]) { $0.state = .paused } }
            // Another connection (a reader of the pool, on a thread of its own) sees none of it yet.
            return try Self.onOtherThread { try store.download(id: ids[0]) }
        }
        #expect(seenOutside == nil)
        #expect(try store.download(id: existing + 1)?.bytesDone == 7)
        #expect(try store.download(id: existing + 2)?.state == .paused)
        #expect(try store.download(id: existing)?.bytesDone == 0, "the refused change is not saved")
    }

    @Test("The rows of the next waiting downloads come in id order from an id on, waiting ones only, at most as many as asked; an update from a kept row writes what changed since it")
    func waitingRowsAndUpdatesFromKeptRows() throws {
        let store = try TransferStore.inMemory()
        let rows = (0..<6).map { StoredDownload(urls: [URL(string: "http://127.0.0.1/w\($0)")!], directory: "/d", requestedName: "w\($0)", checksum: nil, priority: 0, speedLimit: 0) }
        let ids = try store.insert(rows).map { $0.id! }
        try store.updateDownload(id: ids[2]) { $0.state = .paused }
        #expect(try store.waitingDownloads(from: ids[1], limit: 3).map(\.id) == [ids[1], ids[3], ids[4]])
        #expect(try store.waitingDownloads(from: ids[5], limit: 10).map(\.requestedName) == ["w5"])
        #expect(try store.waitingDownloads(from: ids[5] + 1, limit: 10).isEmpty)
        // A claim held in memory, saved by the next write with its own change.
        let stored = try #require(try store.download(id: ids[0]))
        var claimed = stored
        claimed.state = .active
        claimed.partialPath = "/d/w0.part"
        let saved = try store.updateDownload(claimed, stored: stored) { $0.bytesDone = 7 }
        #expect(saved.state == .active && saved.bytesDone == 7)
        let read = try #require(try store.download(id: ids[0]))
        #expect(read.state == .active && read.partialPath == "/d/w0.part" && read.bytesDone == 7)
        #expect(try store.waitingDownloads(from: ids[0], limit: 1).map(\.id) == [ids[1]])
    }

    @Test("A batch of any size is inserted several rows a statement: ids consecutive in the batch's order, each row its own; a taken gid fails the whole batch; no index of states is kept")
    func batchesOfManyRows() throws {
        let store = try TransferStore.inMemory()
        func rows(_ prefix: String, _ count: Int) -> [StoredDownload] {
            (0..<count).map { StoredDownload(urls: [URL(string: "http://127.0.0.1/\(prefix)\($0)")!], directory: "/d", requestedName: "\(prefix)\($0)", checksum: nil, priority: $0 % 5, speedLimit: 0) }
        }
        var next: Int64 = 1
        // Sizes around the statement's 32 rows and its smaller powers of two.
        for (batch, count) in [1, 3, 31, 32, 33, 63, 1_000].enumerated() {
            let written = rows("b\(batch)-", count)
            let inserted = try store.insert(written)
            #expect(inserted.map(\.id) == (next..<next + Int64(count)).map { Optional($0) })
            next += Int64(count)
            for (row, source) in zip(inserted, written) {
                let read = try #require(try store.download(id: row.id!))
                #expect(read.requestedName == source.requestedName && read.urls == source.urls && read.priority == source.priority)
                #expect(read.gid == row.gid && DownloadGID.normalized(read.gid) == read.gid)
            }
        }
        // A gid already taken, late in a batch (in its second statement), or twice within one
        // statement: nothing of the batch is kept.
        let total = try store.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM queuedDownload") }
        let takenGID = try #require(try store.download(id: 5)).gid
        var clashing = rows("c", 50)
        clashing[40].gid = takenGID
        #expect(throws: (any Error).self) { try store.insert(clashing) }
        var twice = rows("t", 10)
        twice[3].gid = "00000000000000aa"
        twice[7].gid = "00000000000000aa"
        #expect(throws: (any Error).self) { try store.insert(twice) }
        #expect(try store.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM queuedDownload") } == total)
        // The next batch goes on from the ids the table has had.
        #expect(try store.insert(rows("n", 2)).first?.id.map { $0 >= next } == true)
        let indexes = try store.read { db in try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'queuedDownload' AND sql IS NOT NULL ORDER BY name") }
        #expect(indexes == ["queuedDownload_gid"])
    }

    @Test("The read-ahead of waiting rows looks at a window of ids: a long stretch of other downloads after the first ends it there")
    func waitingRowsWindow() throws {
        let store = try TransferStore.inMemory()
        let rows = (0..<600).map { StoredDownload(urls: [URL(string: "http://127.0.0.1/r\($0)")!], directory: "/d", requestedName: nil, checksum: nil, priority: 0, speedLimit: 0) }
        let ids = try store.insert(rows).map { $0.id! }
        _ = try store.updateDownloads(ids: Array(ids[1..<500])) { download in
            download.state = .complete
            return true
        }
        let window = Int(TransferStore.waitingWindow(limit: 64))
        #expect(window < 499)
        #expect(try store.waitingDownloads(from: ids[0], limit: 64).map(\.id) == [ids[0]])
        #expect(try store.waitingDownloads(from: ids[500], limit: 64).map(\.id) == Array(ids[500..<564]))
        #expect(try store.waitingDownloads(from: ids[599], limit: 64).map(\.id) == [ids[599]])
        #expect(try store.waitingDownloads(from: Int64.max - 1, limit: 64).isEmpty)
    }

    @Test("A download is a value: copies share their fields until one changes, then differ only where it changed; an update from an unchanged copy writes nothing, JSON keeps the field names")
    func downloadCopiesAreValues() throws {
        let store = try TransferStore.inMemory()
        let original = try store.insert([StoredDownload(urls: [URL(string: "http://127.0.0.1/v")!], directory: "/d", requestedName: "v", checksum: nil, priority: 1, speedLimit: 0)])[0]
        var copy = original
        #expect(copy == original && copy.hashValue == original.hashValue)
        // Changes in place (an append, a dictionary member, a field) reach the copy only.
        copy.urls.append(URL(string: "http://127.0.0.1/mirror")!)
        copy.options["split"] = "4"
        copy.requestHeaders.append("X-A: 1")
        copy.bytesDone = 9
        #expect(original.urls.count == 1 && original.options.isEmpty && original.requestHeaders.isEmpty && original.bytesDone == 0)
        #expect(copy.urls.count == 2 && copy.options == ["split": "4"] && copy.requestHeaders == ["X-A: 1"] && copy.bytesDone == 9)
        #expect(copy != original)
        // Changing a field back makes the two equal again, field for field.
        copy.urls.removeLast()
        copy.options = [:]
        copy.requestHeaders = []
        copy.bytesDone = 0
        #expect(copy == original && copy.hashValue == original.hashValue)
        // The store writes what differs from the row as stored: nothing for an unchanged copy.
        let unchanged = try store.updateDownload(original, stored: original) { _ in }
        #expect(unchanged == original)
        var twice = original
        let saved = try store.updateDownload(twice, stored: original) { $0.priority = 5 }
        twice.priority = 6
        #expect(saved.priority == 5 && twice.priority == 6 && original.priority == 1)
        #expect(try store.download(id: original.id!)?.priority == 5)
        // Codable sees the same members as before the fields moved into shared storage.
        let object = try #require(try JSONSerialization.jsonObject(with: JSONEncoder().encode(saved)) as? [String: Any])
        #expect(object["priority"] as? Int == 5 && object["gid"] as? String == saved.gid && object["storage"] == nil)
        #expect(try JSONDecoder().decode(StoredDownload.self, from: JSONEncoder().encode(saved)) == saved)
    }

    @Test("A batch whose body throws saves nothing")
    func failedBatchSavesNothing() throws {
        let store = try TransferStore.inMemory()
        let row = StoredDownload(urls: [URL(string: "http://127.0.0.1/a")!], directory: "/d", requestedName: nil, checksum: nil, priority: 0, speedLimit: 0)
        let id = try store.insert([row])[0].id!
        #expect(throws: Refused.self) {
            try store.batch {
                try store.updateDownload(id: id) { $0.bytesDone = 5 }
                _ = try store.insert([row])
                throw Refused()
            }
        }
        #expect(try store.download(id: id)?.bytesDone == 0)
        #expect(try store.download(id: id + 1) == nil)
    }

    @Test("URL lists written by JSONEncoder (escaped slashes) still read; an unreadable one is a clear error")
    func urlColumnFormats() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("store-\(UUID().uuidString).sqlite").path
        defer { for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) } }
        let store = try TransferStore.open(path: path)
        let raw = try DatabaseQueue(path: path)
        let row = StoredDownload(urls: [URL(string: "http://127.0.0.1/a")!], directory: "/d", requestedName: nil, checksum: nil, priority: 0, speedLimit: 0)
        let id = try store.insert([row])[0].id!
        try raw.write { db in
            try db.execute(sql: #"UPDATE queuedDownload SET urls = '["http:\/\/127.0.0.1\/x%20y","https:\/\/m\/\u00fc"]' WHERE id = ?"#, arguments: [id])
        }
        #expect(try store.download(id: id)?.urls == [URL(string: "http://127.0.0.1/x%20y")!, URL(string: "https://m/ü")!])
        try raw.write { db in try db.execute(sql: "UPDATE queuedDownload SET urls = '[\"http://a\", 3' WHERE id = ?", arguments: [id]) }
        let error = #expect(throws: DatabaseError.self) { try store.download(id: id) }
        #expect(error?.message?.contains("download \(id): unreadable urls column") == true)
    }

    @Test("Stored dates are read without a calendar, as GRDB reads them; other forms GRDB accepts still read")
    func storedDates() throws {
        for seconds in [0, 0.5, 951_782_400.001 /* 29 Feb 2000 */, 1_763_900_000.9876, 4_102_444_799.999] as [Double] {
            let date = Date(timeIntervalSince1970: seconds)
            let text = String.fromDatabaseValue(date.databaseValue)!
            let parsed = try #require(text.utf8.withContiguousStorageIfAvailable { UTCTimestamp.parseStored($0) } ?? nil)
            let grdb = try #require(Date.fromDatabaseValue(text.databaseValue))
            #expect(abs(parsed.timeIntervalSince1970 - grdb.timeIntervalSince1970) < 0.000_001, "\(text)")
            #expect(String.fromDatabaseValue(parsed.databaseValue) == text, "written back the same")
        }
        // The writer against GRDB's own text, across years, months, days and milliseconds.
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            let date = Date(timeIntervalSince1970: Double.random(in: -2_208_988_800..<4_102_444_800, using: &generator))
            var written: [UInt8] = []
            UTCTimestamp(date).write(to: &written, separator: UInt8(ascii: " "), milliseconds: true)
            #expect(String(decoding: written, as: UTF8.self) == String.fromDatabaseValue(date.databaseValue), "\(date.timeIntervalSince1970)")
        }
        // Halves of a millisecond round up (toward later) before 1970 too: -1328749534.9115 is
        // 1927-11-23 22:54:25.0885 exactly in ms, written .089 as GRDB does (it was .088).
        for seconds in [-0.0005, -1, -86_400, -86_401, 951_782_400 /* 29 Feb 2000 */, 4_107_542_400 /* 1 Mar 2100 */, 1_709_164_800.9995,
                        -1_328_749_534.9115, -951_782_400.0005, -1.0015, 1.0015, 951_782_400.0005] as [Double] {
            let date = Date(timeIntervalSince1970: seconds)
            var written: [UInt8] = []
            UTCTimestamp(date).write(to: &written, separator: UInt8(ascii: " "), milliseconds: true)
            #expect(String(decoding: written, as: UTF8.self) == String.fromDatabaseValue(date.databaseValue), "\(seconds)")
        }
        // A field past its digits is written whole rather than cut.
        var far: [UInt8] = []
        UTCTimestamp(Date(timeIntervalSince1970: 253_402_300_800)).write(to: &far, separator: UInt8(ascii: "T"), milliseconds: false)
        #expect(String(decoding: far, as: UTF8.self) == "10000-01-01T00:00:00")
        for bad in ["2023-02-29 00:00:00.000", "2023-11-14 24:00:00.000", "2023-11-14T22:13:20.000", "2023-11-14 22:13:20", "2023-11-14 22:13:2x.000"] {
            #expect(bad.utf8.withContiguousStorageIfAvailable { UTCTimestamp.parseStored($0) } ?? nil == nil, "\(bad)")
        }
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("store-\(UUID().uuidString).sqlite").path
        defer { for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) } }
        let store = try TransferStore.open(path: path)
        let row = StoredDownload(urls: [URL(string: "http://127.0.0.1/a")!], directory: "/d", requestedName: nil, checksum: nil, priority: 0, speedLimit: 0)
        let id = try store.insert([row])[0].id!
        try DatabaseQueue(path: path).write { db in
            try db.execute(sql: "UPDATE queuedDownload SET createdAt = '2025-11-23 12:13:20', startedAt = '2025-11-23' WHERE id = ?", arguments: [id])
        }
        let read = try #require(try store.download(id: id))
        #expect(read.createdAt == Date(timeIntervalSince1970: 1_763_900_000))
        #expect(read.startedAt == Date(timeIntervalSince1970: 1_763_856_000))
    }
}
