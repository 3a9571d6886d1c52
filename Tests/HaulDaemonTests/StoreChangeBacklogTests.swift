@testable import HaulDaemon
import HaulStore
import Testing

@Suite("StoreChangeBacklog: other daemons' changes gathered for one read")
struct StoreChangeBacklogTests {
    @Test("The first change schedules a turn, later ones ride along; each download once, in the order first announced; a turn empties it")
    func gathers() {
        var backlog = StoreChangeBacklog()
        let scheduled = [backlog.add(.download(7)), backlog.add(.download(3)), backlog.add(.download(7)), backlog.add(.settings)]
        #expect(scheduled == [true, false, false, false], "only the first schedules a turn")
        let turn = backlog.take()
        #expect(turn == .init(settings: true, resync: false, ids: [7, 3]), "a download announced twice is read once, in the order first announced")
        let empty = backlog.take()
        #expect(empty == .init(settings: false, resync: false, ids: []), "empty after a turn")
        let again = backlog.add(.download(3))
        #expect(again, "after a turn the next change schedules again")
        let next = backlog.take()
        #expect(next.ids == [3])
    }

    @Test("A gap (resync) reads the whole list: the downloads noted before and after it are part of it")
    func resyncAbsorbsDownloads() {
        var backlog = StoreChangeBacklog()
        let scheduled = [backlog.add(.download(1)), backlog.add(.resync), backlog.add(.download(2))]
        #expect(scheduled == [true, false, false])
        let turn = backlog.take()
        #expect(turn == .init(settings: false, resync: true, ids: []))
    }
}
