import Foundation
import HaulCore
@testable import HaulDaemon
import Testing

@Suite("A queue list for the event loop")
struct QueueListAtOnceTests {
    @Test("Answered from the index while the queue's state is free; declined at once, not waited for, while another thread holds it")
    func declinesWhileLocked() async throws {
        let harness = try QueueHarness()
        _ = try await harness.queue.add((0..<3).map { NewDownload(urls: [URL(string: "http://127.0.0.1:9/list\($0).bin")!], paused: true) })
        let page = QueuePage(limit: 10)
        let free = try #require(harness.queue.recordsIfUnlocked(page))
        let waited = harness.queue.recordsAndSettings(page)
        #expect(free.total == 3 && waited.total == 3)
        #expect(free.records == waited.records)
        #expect(free.settings == waited.settings)

        // Another thread holds the state (as a drain or an add of many does).
        let held = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        let queue = harness.queue
        Thread.detachNewThread {
            queue.state.withLock { _ in
                held.signal()
                release.wait()
            }
            done.signal()
        }
        held.wait()
        let asked = ContinuousClock.now
        #expect(harness.queue.recordsIfUnlocked(page) == nil)
        #expect(ContinuousClock.now - asked < .milliseconds(200), "declined without waiting for the lock")
        release.signal()
        done.wait()
        #expect(harness.queue.recordsIfUnlocked(page)?.total == 3)
        await harness.close()
    }
}
