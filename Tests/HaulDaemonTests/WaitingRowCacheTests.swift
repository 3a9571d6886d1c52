import Foundation
import HaulCore
import HaulStore
import Testing

@testable import HaulDaemon

@Suite("Rows of waiting downloads kept for their claims")
struct WaitingRowCacheTests {
    static func row(_ id: Int64, _ state: QueuedDownloadState = .waiting, name: String = "f.bin") -> StoredDownload {
        var row = StoredDownload(urls: [URL(string: "http://127.0.0.1/\(name)")!], directory: "/tmp", requestedName: name, checksum: nil, priority: 0, speedLimit: 0, createdAt: Date())
        row.id = id
        row.state = state
        return row
    }

    @Test("Kept while waiting and while there is room; replaced by each saved row; taken by a claim; never with a limit of 0")
    func keeping() {
        var cache = WaitingRowCache(limit: 2)
        cache.saved(Self.row(1))
        cache.saved(Self.row(2, .paused))
        cache.saved(Self.row(3))
        cache.saved(Self.row(4))
        #expect(cache.rows.keys.sorted() == [1, 3], "paused ones are not kept; no room for 4")
        cache.saved(Self.row(1, name: "renamed.bin"))
        #expect(cache.rows[1]?.requestedName == "renamed.bin", "a kept row follows its saves, room or not")
        cache.saved(Self.row(3, .paused))
        #expect(!cache.contains(3), "no longer waiting: forgotten")
        #expect(cache.take(1)?.requestedName == "renamed.bin")
        #expect(cache.take(1) == nil, "a claim takes it out")
        cache.saved(Self.row(5))
        cache.remove(5)
        #expect(cache.rows.isEmpty)
        var off = WaitingRowCache(limit: 0)
        off.saved(Self.row(1))
        #expect(off.rows.isEmpty)
    }
}

