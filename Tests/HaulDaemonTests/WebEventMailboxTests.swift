import Foundation
import HaulCore
@testable import HaulDaemon
import Testing

@Suite("WebEventMailbox: what waits for a page's event stream")
struct WebEventMailboxTests {
    static func change(_ id: Int64) -> WebEventMailbox.Item {
        .change(.removed(id: id))
    }

    @Test("What was posted is taken at once, all of it, in order; then a take waits for the next post")
    func takesEverythingInOrder() async throws {
        let mailbox = WebEventMailbox()
        for id in 1...5 as ClosedRange<Int64> { mailbox.post(Self.change(id)) }
        mailbox.post(.keepAlive)
        #expect(await mailbox.take() == (1...5).map { Self.change($0) } + [.keepAlive])
        let taker = Task { await mailbox.take() }
        try await Task.sleep(for: .milliseconds(50))
        mailbox.post(Self.change(6))
        #expect(await taker.value == [Self.change(6)], "a waiting take wakes for a post")
    }

    @Test("Beyond its capacity the oldest items are dropped, the newest kept in order")
    func dropsTheOldest() async {
        let mailbox = WebEventMailbox(capacity: 4)
        for id in 1...10 as ClosedRange<Int64> { mailbox.post(Self.change(id)) }
        #expect(await mailbox.take() == (7...10).map { Self.change($0) })
        // Long past its capacity (what was dropped is moved out in bulk): still the newest.
        let full = WebEventMailbox(capacity: 100)
        for id in 1...1_037 as ClosedRange<Int64> { full.post(Self.change(id)) }
        #expect(await full.take() == (938...1_037).map { Self.change($0) })
        full.post(Self.change(2_000))
        #expect(await full.take() == [Self.change(2_000)], "empty after a take")
    }

    @Test("Closing wakes a waiting take with nothing; what was posted before still comes first; posts after are ignored")
    func closes() async throws {
        let waiting = WebEventMailbox()
        let taker = Task { await waiting.take() }
        try await Task.sleep(for: .milliseconds(50))
        waiting.close()
        #expect(await taker.value == nil)

        let mailbox = WebEventMailbox()
        mailbox.post(Self.change(1))
        mailbox.close()
        mailbox.post(Self.change(2))
        #expect(await mailbox.take() == [Self.change(1)])
        #expect(await mailbox.take() == nil)
    }

    @Test("Posts from four threads at once while one task takes: every item arrives once, each thread's in its order")
    func concurrentPosts() async {
        let mailbox = WebEventMailbox(capacity: 100_000)
        let perThread = 5_000
        let taker = Task {
            var received: [Int64] = []
            while received.count < 4 * perThread, let items = await mailbox.take() {
                for case .change(.removed(let id)) in items { received.append(id) }
            }
            return received
        }
        DispatchQueue.concurrentPerform(iterations: 4) { thread in
            for index in 0..<perThread { mailbox.post(Self.change(Int64(thread * 1_000_000 + index))) }
        }
        let received = await taker.value
        #expect(received.count == 4 * perThread)
        for thread in 0..<4 {
            let own = received.filter { $0 / 1_000_000 == thread }.map { Int($0 % 1_000_000) }
            #expect(own == Array(0..<perThread), "thread \(thread)'s items in order")
        }
    }

    @Test("The stream's text: a download event with its record, removed, settings and keep-alive, in order")
    func eventsText() throws {
        let info = QueuedDownloadInfo(
            id: 7, urls: [URL(string: "http://127.0.0.1/a.bin")!], directory: "/tmp", fileName: "a \"b\".bin", path: nil, state: .active,
            bytesDone: 5, totalBytes: 10, errorMessage: nil, checksum: nil, priority: 0, speedLimit: nil,
            createdAt: Date(timeIntervalSince1970: 0), startedAt: nil, finishedAt: nil
        )
        let text = String(decoding: WebUIServer.events([.change(.changed(info)), .change(.removed(id: 9)), .keepAlive]), as: UTF8.self)
        let record = String(decoding: DownloadRecord(info).bytes, as: UTF8.self)
        #expect(text == "event: download\ndata: \(record)\n\nevent: removed\ndata: {\"id\":9}\n\n: keep-alive\n\n")
        let settings = String(decoding: WebUIServer.events([.change(.settings(QueueSettings(defaultDirectory: "/tmp")))]), as: UTF8.self)
        #expect(settings.hasPrefix("event: settings\ndata: {") && settings.hasSuffix("}\n\n"))
    }
}
