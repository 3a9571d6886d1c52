import Foundation
import HaulCore
import HaulStore
import HaulTestSupport
import Testing

@testable import HaulDaemon

@Suite("List downloads: one queued download, many files", .serialized)
struct ListDownloadTests {
    /// The list's files: `count` of them, `f0.bin`… with sizes that vary (one above 128 KiB in
    /// five), each `extra` appended to its query.
    static func urls(_ server: FaultInjectingHTTPServer, count: Int, prefix: String = "f", extra: (Int) -> String = { _ in "" }) -> [URL] {
        (0..<count).map { index in server.url("/file/\(prefix)\(index).bin?size=\(Self.size(index))&seed=\(index)\(extra(index))") }
    }

    static func size(_ index: Int) -> Int { index % 5 == 0 ? 200_000 + index : 1_000 + index * 37 }

    static func list(_ urls: [URL], paused: Bool = false) -> NewDownload {
        var download = NewDownload(urls: [], paused: paused)
        download.list = urls
        return download
    }

    /// Checks that each of `indices` is in the harness's directory, whole, under its own name.
    static func expectFiles(_ harness: QueueHarness, _ indices: Range<Int>, prefix: String = "f") throws {
        for index in indices {
            let path = harness.downloads.appendingPathComponent("\(prefix)\(index).bin").path
            #expect(try TestContent.sha256Hex(ofFileAt: path) == TestContent.sha256Hex(size: Int64(Self.size(index)), seed: UInt64(index)), "\(prefix)\(index).bin")
        }
    }

    static func requests(_ server: FaultInjectingHTTPServer, of name: String) -> Int {
        server.requests.filter { $0.uri.hasPrefix("/file/\(name)?") }.count
    }

    @Test("A list's files land whole under their servers' names; the list is one download, complete, with the bytes of all, its path the directory")
    func completes() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let harness = try QueueHarness()
        let urls = Self.urls(server, count: 40)
        let added = try await harness.queue.add([Self.list(urls)])
        #expect(added.count == 1 && added[0].fileCount == 40 && added[0].urls == [urls[0]])
        let done = try await harness.wait(for: added[0].id, .complete)
        try Self.expectFiles(harness, 0..<40)
        let total = (0..<40).reduce(0) { $0 + Int64(Self.size($1)) }
        #expect(done.bytesDone == total && done.totalBytes == total)
        #expect(done.path == harness.downloads.path && done.fileCount == 40)
        #expect(harness.files().count == 40, "no partial file is left: \(harness.files().filter { !$0.hasSuffix(".bin") })")
        #expect((0..<40).allSatisfy { Self.requests(server, of: "f\($0).bin") == 1 }, "each file is fetched once")
        // The store has each file done, at its path.
        let store = try TransferStore.open(path: harness.storePath)
        let files = try store.files(of: added[0].id)
        #expect(files.count == 40 && files.allSatisfy { $0.state == .done })
        #expect(files[3].path == harness.downloads.appendingPathComponent("f3.bin").path && files[3].bytes == Int64(Self.size(3)))
        await harness.close()
    }

    @Test("Files of one list with one name, ending together, each get a name of their own: none is overwritten, none lost")
    func oneNameManyFiles() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let harness = try QueueHarness()
        // A free name is looked up before the list's lock and checked under it against the names
        // its other files took meanwhile (`ListRun.ended`); a name taken on disk after that is
        // caught again when the file is placed. Either way no file may land on another's.
        let urls = (1...16).map { server.url("/file/same.bin?size=\(20_000 + $0)&seed=\(100 + $0)") }
        let added = try await harness.queue.add([Self.list(urls)])
        let ended = try await harness.wait(for: added[0].id, timeout: .seconds(30)) { !$0.state.isInProgress }
        #expect(ended.state == .complete, "\(ended.errorMessage ?? "")")
        let names = try FileManager.default.contentsOfDirectory(atPath: harness.downloads.path).filter { $0.hasPrefix("same") }
        #expect(names.count == 16, "\(names.sorted())")
        let digests = try names.map { try TestContent.sha256Hex(ofFileAt: harness.downloads.appendingPathComponent($0).path) }
        let expected = (1...16).map { TestContent.sha256Hex(size: Int64(20_000 + $0), seed: UInt64(100 + $0)) }
        #expect(Set(digests) == Set(expected) && Set(digests).count == 16, "every URL's bytes once")
        await harness.close()
        try await server.shutdown()
    }

    @Test("A file that fails for good does not stop the others: the list ends in error naming how many and the first; a name taken gets a number")
    func failureDoesNotStopTheOthers() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let harness = try QueueHarness()
        try Data("mine".utf8).write(to: harness.downloads.appendingPathComponent("f2.bin"))
        var urls = Self.urls(server, count: 12)
        urls.insert(server.url("/status/404"), at: 5)
        let added = try await harness.queue.add([Self.list(urls)])
        let ended = try await harness.wait(for: added[0].id, timeout: .seconds(30)) { !$0.state.isInProgress }
        #expect(ended.state == .error)
        #expect(ended.errorMessage?.contains("1 of 13 files failed") == true, "\(ended.errorMessage ?? "")")
        #expect(ended.errorMessage?.contains("/status/404") == true && ended.errorMessage?.contains("404") == true)
        #expect(ended.errorCode == 3, "aria2's code for a resource not found")
        #expect(try String(contentsOf: harness.downloads.appendingPathComponent("f2.bin"), encoding: .utf8) == "mine", "a file already there is left alone")
        let numbered = harness.downloads.appendingPathComponent("f2 (1).bin").path
        #expect(try TestContent.sha256Hex(ofFileAt: numbered) == TestContent.sha256Hex(size: Int64(Self.size(2)), seed: 2))
        try Self.expectFiles(harness, 3..<12)
        #expect(ended.bytesDone == (0..<12).reduce(0) { $0 + Int64(Self.size($1)) }, "its bytes are those of the files it placed")
        #expect(server.requests.filter { $0.uri == "/status/404" }.count == 1, "a 404 is not asked again within the run")
        // Which file failed, and why (`queueFiles`, `haul show`).
        let failed = try await harness.queue.files(.init(downloadID: added[0].id, states: [.failed]))
        #expect(failed.counts == ListFileCounts(done: 12, failed: 1, waiting: 0) && failed.total == 1)
        #expect(failed.files.map(\.position) == [5] && failed.files.first?.url == urls[5])
        #expect(failed.files.first?.error?.contains("404") == true, "\(failed.files)")
        let page = try await harness.queue.files(.init(downloadID: added[0].id, offset: 10, limit: 2))
        #expect(page.files.map(\.position) == [10, 11] && page.total == 13 && page.files.allSatisfy { $0.state == .done && $0.path != nil })
        await harness.close()
    }

    @Test("A file cut off is tried again at once; one failing for a while makes the list retry later, fetching only what is not done")
    func transientFailures() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let harness = try QueueHarness()
        var urls = Self.urls(server, count: 10)
        // Reset once mid-body: fetched again within the run.
        urls.append(server.url("/file/cut.bin?size=60000&seed=70&cutAfter=20000&cutTimes=1"))
        // 503 twice: the list fails (retryable) twice, and each retry fetches this file alone.
        urls.append(server.url("/file/busy.bin?size=3000&seed=71&fail503=2&retryAfter=0"))
        let added = try await harness.queue.add([Self.list(urls)])
        let done = try await harness.wait(for: added[0].id, .complete)
        try Self.expectFiles(harness, 0..<10)
        #expect(try TestContent.sha256Hex(ofFileAt: harness.downloads.appendingPathComponent("cut.bin").path) == TestContent.sha256Hex(size: 60000, seed: 70))
        #expect(try TestContent.sha256Hex(ofFileAt: harness.downloads.appendingPathComponent("busy.bin").path) == TestContent.sha256Hex(size: 3000, seed: 71))
        #expect(Self.requests(server, of: "cut.bin") == 2)
        #expect(Self.requests(server, of: "busy.bin") == 3, "a 503 is not asked again within the run: the queue's backoff is")
        #expect((0..<10).allSatisfy { Self.requests(server, of: "f\($0).bin") == 1 }, "a retry of the list fetches no file it has")
        #expect(done.bytesDone == (0..<10).reduce(60000 + 3000) { $0 + Int64(Self.size($1)) })
        #expect(harness.files().count == 12)
        await harness.close()
    }

    @Test("A list run that placed files before failing made progress: its retries count from one again, so a list that keeps moving is not given up on")
    func progressResetsAttempts() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        // The harness gives up after 3 attempts. Each of five runs places one more of these.
        let harness = try QueueHarness()
        var urls = Self.urls(server, count: 4)
        for times in 1...4 { urls.append(server.url("/file/slow\(times).bin?size=2000&seed=\(80 + times)&fail503=\(times)&retryAfter=0")) }
        let added = try await harness.queue.add([Self.list(urls)])
        _ = try await harness.wait(for: added[0].id, .complete)
        for times in 1...4 {
            #expect(Self.requests(server, of: "slow\(times).bin") == times + 1)
            #expect(try TestContent.sha256Hex(ofFileAt: harness.downloads.appendingPathComponent("slow\(times).bin").path) == TestContent.sha256Hex(size: 2000, seed: UInt64(80 + times)))
        }
        await harness.close()
    }

    @Test("Paused mid-list, the files done stay; resumed, it fetches the rest, none twice that was done, and leaves no partial file")
    func pauseAndResume() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let harness = try QueueHarness()
        // Files 4 and 7 hold after a first part until the gate opens.
        let urls = Self.urls(server, count: 10) { [4, 7].contains($0) ? "&gate=held&holdAfter=500" : "" }
        let added = try await harness.queue.add([Self.list(urls)])
        let id = added[0].id
        _ = try await harness.wait(for: id) { _ in (0..<10).filter { ![4, 7].contains($0) }.allSatisfy { FileManager.default.fileExists(atPath: harness.downloads.appendingPathComponent("f\($0).bin").path) } }
        try await harness.queue.pause(id: id)
        let paused = try await harness.wait(for: id, .paused)
        #expect(paused.bytesDone >= (0..<10).filter { ![4, 7].contains($0) }.reduce(0) { $0 + Int64(Self.size($1)) })
        #expect(!harness.files().contains { $0.hasSuffix(".haul-part") }, "\(harness.files())")
        server.openGate("held")
        try await harness.queue.resume(id: id)
        _ = try await harness.wait(for: id, .complete)
        try Self.expectFiles(harness, 0..<10)
        #expect(harness.files().count == 10)
        #expect((0..<10).filter { ![4, 7].contains($0) }.allSatisfy { Self.requests(server, of: "f\($0).bin") == 1 })
        #expect(Self.requests(server, of: "f4.bin") == 2 && Self.requests(server, of: "f7.bin") == 2)
        await harness.close()
    }

    @Test("hauld stopped mid-list: the next start finishes it without a second copy, and fetches again a done file gone from disk")
    func restart() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("haul-list-\(UUID().uuidString)")
        let urls = Self.urls(server, count: 8) { $0 == 6 ? "&gate=restart&holdAfter=100" : "" }
        let first = try QueueHarness(root: root)
        let id = try await first.queue.add([Self.list(urls)])[0].id
        // Every file but the held one placed (the large ones may end after later small ones).
        _ = try await first.wait(for: id) { _ in
            (0..<8).filter { $0 != 6 }.allSatisfy { FileManager.default.fileExists(atPath: first.downloads.appendingPathComponent("f\($0).bin").path) }
        }
        await first.close()
        // A file the list had placed is deleted while hauld is down: the list is not complete
        // without it.
        try FileManager.default.removeItem(at: first.downloads.appendingPathComponent("f1.bin"))
        server.openGate("restart")
        let second = try QueueHarness(root: root)
        _ = try await second.wait(for: id, .complete)
        try Self.expectFiles(second, 0..<8)
        #expect(second.files().count == 8, "no second copy, no partial file: \(second.files())")
        #expect(Self.requests(server, of: "f1.bin") == 2 && Self.requests(server, of: "f0.bin") == 1)
        await second.close()
    }

    @Test("Removed, a list leaves the files it placed and deletes its own rows; paused at once, it fetches nothing")
    func removeAndPaused() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let harness = try QueueHarness()
        let urls = Self.urls(server, count: 6, prefix: "r") { $0 == 5 ? "&gate=never&holdAfter=10" : "" }
        let id = try await harness.queue.add([Self.list(urls)])[0].id
        _ = try await harness.wait(for: id) { _ in
            (0..<5).allSatisfy { FileManager.default.fileExists(atPath: harness.downloads.appendingPathComponent("r\($0).bin").path) }
        }
        try await harness.queue.cancel(id: id, deleteFromList: true)
        try await Task.sleep(for: .milliseconds(200))
        try Self.expectFiles(harness, 0..<5, prefix: "r")
        #expect(!harness.files().contains { $0.hasSuffix(".haul-part") }, "\(harness.files())")
        let store = try TransferStore.open(path: harness.storePath)
        #expect(try store.files(of: id).isEmpty, "the list's file rows went with it")
        let paused = try await harness.queue.add([Self.list(Self.urls(server, count: 3, prefix: "p"), paused: true)])[0]
        try await Task.sleep(for: .milliseconds(200))
        #expect(try await harness.queue.download(id: paused.id).state == .paused)
        #expect(Self.requests(server, of: "p0.bin") == 0)
        await harness.close()
    }

    @Test("Two lists into one directory whose files all have one name: every file lands under a name of its own, none overwritten, both complete")
    func sameNames() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let harness = try QueueHarness()
        let first = (0..<20).map { server.url("/file/same.bin?size=3000&seed=\($0)&key=a\($0)") }
        let second = (20..<40).map { server.url("/file/same.bin?size=3000&seed=\($0)&key=b\($0)") }
        let added = try await harness.queue.add([Self.list(first), Self.list(second)])
        for download in added { _ = try await harness.wait(for: download.id, .complete) }
        let names = harness.files()
        #expect(names.count == 40 && Set(names).count == 40, "\(names)")
        let digests = Set(try names.map { try TestContent.sha256Hex(ofFileAt: harness.downloads.appendingPathComponent($0).path) })
        #expect(digests == Set((0..<40).map { TestContent.sha256Hex(size: 3000, seed: UInt64($0)) }), "each file's bytes once")
        await harness.close()
    }

    @Test("What a list download cannot be is refused before anything is added")
    func refused() async throws {
        let harness = try QueueHarness()
        let url = URL(string: "http://127.0.0.1:9/a")!
        var withURLs = Self.list([url])
        withURLs.urls = [url]
        var named = Self.list([url])
        named.fileName = "x"
        var summed = Self.list([url])
        summed.checksum = "md5=" + String(repeating: "0", count: 32)
        var segmented = Self.list([url])
        segmented.connections = 4
        for request in [withURLs, named, summed, segmented, Self.list([]), Self.list([url, URL(string: "ftp://127.0.0.1/b")!])] {
            await #expect(throws: DaemonError.self) { _ = try await harness.queue.add([NewDownload(urls: [url]), request]) }
        }
        #expect(try await harness.queue.list().isEmpty, "all or none")
        let list = try await harness.queue.add([Self.list([url], paused: true)])[0]
        await #expect(throws: DaemonError.self) { _ = try await harness.queue.setURL(id: list.id, url: url) }
        let single = try await harness.queue.add([NewDownload(urls: [url], paused: true)])[0]
        await #expect(throws: DaemonError.self) { _ = try await harness.queue.files(.init(downloadID: single.id)) }
        await harness.close()
    }
}
