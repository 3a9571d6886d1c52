import Foundation
import HaulCore
import Testing

/// What `haul wait` and `haul watch` believe about the queue, across a daemon restart.
@Suite("QueueView: a client's view from lists and events")
struct QueueViewTests {
    static func download(_ id: Int64, _ state: QueuedDownloadState, bytes: Int64 = 0) -> QueuedDownloadInfo {
        var info = DownloadRecordTests.info(id: id, state: state)
        info.bytesDone = bytes
        return info
    }

    @Test("An event newer than the list that follows it is kept")
    func eventBeforeList() {
        var view = QueueView()
        view.beginAttach()
        view.changed(Self.download(1, .complete, bytes: 10))
        view.listed([Self.download(1, .active, bytes: 5), Self.download(2, .waiting)])
        #expect(view.downloads[1]?.state == .complete)
        #expect(view.downloads[2]?.state == .waiting)
        view.removed(id: 2)
        #expect(view.downloads[2] == nil)
        #expect(view.removed == [2])
    }

    @Test("After a reconnect the fresh list replaces views from before the restart")
    func reconnect() {
        var view = QueueView()
        view.beginAttach()
        view.listed([Self.download(1, .active), Self.download(2, .active), Self.download(3, .paused)])
        view.changed(Self.download(2, .active, bytes: 100))
        // hauld restarts; meanwhile 1 and 2 finish and 3 is dropped from the list.
        view.beginAttach()
        view.listed([Self.download(1, .complete), Self.download(2, .complete)])
        #expect(view.downloads[1]?.state == .complete, "not the stale 'active' from before the restart")
        #expect(view.downloads[2]?.state == .complete, "an event of the old connection is no newer than the new list")
        #expect(view.downloads[3] == nil)
        #expect(view.removed == [3])
    }

    @Test("A projected change (a subscription with fields) replaces only the members asked for, clearing one it left out; an unknown download is kept as it came")
    func projectedChange() {
        var view = QueueView()
        view.beginAttach()
        var retrying = Self.download(1, .active, bytes: 7)
        retrying.errorMessage = "the connection was reset; retrying"
        view.listed([retrying])
        var finished = QueuedDownloadInfo(
            id: 1, urls: [], directory: "", fileName: nil, path: "/d/f.bin", state: .complete, bytesDone: 0, totalBytes: nil,
            errorMessage: nil, checksum: nil, priority: 0, speedLimit: nil, createdAt: Date(timeIntervalSince1970: 0),
            startedAt: nil, finishedAt: nil
        )
        let asked: [DownloadField] = [.id, .state, .path, .errorMessage]
        view.changed(finished, fields: asked)
        let merged = view.downloads[1]
        #expect(merged?.state == .complete && merged?.path == "/d/f.bin")
        #expect(merged?.errorMessage == nil, "asked for and absent: cleared")
        #expect(merged?.urls == retrying.urls && merged?.bytesDone == 7 && merged?.directory == retrying.directory, "not asked for: kept")
        finished.id = 2
        view.changed(finished, fields: asked)
        #expect(view.downloads[2] == finished)
    }
}
