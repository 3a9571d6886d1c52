import Foundation
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
}
