import Foundation
import HaulCore
@testable import HaulDaemon
import Synchronization
import Testing

@Suite("aria2 notifications: the queue is subscribed to only while a WebSocket listens")
struct Aria2NotifierTests {
    @Test("No listener, no subscription; the first subscribes and hears changes, more share it, the last to leave ends it; a later one hears only what happens from then on")
    func subscribedWhileListened() async throws {
        let harness = try QueueHarness()
        let notifier = Aria2Notifier(queue: harness.queue)
        // The harness records every change: its subscription is there throughout.
        let before = harness.queue.subscriberCount
        #expect(!notifier.isSubscribed)
        let heard = Mutex<[String]>([])
        let first = notifier.addListener { text in heard.withLock { $0.append(text) } }
        let second = notifier.addListener { _ in }
        #expect(notifier.isSubscribed)
        #expect(harness.queue.subscriberCount == before + 1, "one subscription for every listener")
        let cancelled = try await harness.queue.add(urls: [URL(string: "http://127.0.0.1:9/a.bin")!], paused: true)
        try await harness.queue.cancel(id: cancelled.id)
        _ = try await harness.queue.download(id: cancelled.id)
        #expect(heard.withLock { $0 }.contains { $0.contains("aria2.onDownloadStop") && $0.contains(cancelled.gid) }, "\(heard.withLock { $0 })")
        notifier.removeListener(first)
        #expect(notifier.isSubscribed, "one listener left")
        notifier.removeListener(second)
        #expect(!notifier.isSubscribed)
        #expect(harness.queue.subscriberCount == before, "nobody listens: no subscription")
        // Unheard while nobody listens; a new listener starts from the states of its arrival.
        let unheard = try await harness.queue.add(urls: [URL(string: "http://127.0.0.1:9/b.bin")!], paused: true)
        let count = heard.withLock { $0.count }
        let later = Mutex<[String]>([])
        let third = notifier.addListener { text in later.withLock { $0.append(text) } }
        #expect(notifier.isSubscribed && harness.queue.subscriberCount == before + 1)
        try await harness.queue.cancel(id: unheard.id)
        _ = try await harness.queue.download(id: unheard.id)
        #expect(later.withLock { $0 }.contains { $0.contains("aria2.onDownloadStop") && $0.contains(unheard.gid) }, "\(later.withLock { $0 })")
        #expect(heard.withLock { $0.count } == count, "a listener gone hears nothing more")
        notifier.removeListener(third)
        notifier.stop()
        #expect(harness.queue.subscriberCount == before)
        await harness.close()
    }
}
