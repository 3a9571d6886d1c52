import Foundation
import HaulCore
import Synchronization

/// Sends aria2's notifications (`aria2.onDownloadStart` …) to every WebSocket listener: one
/// subscription to the queue while anyone listens, one ``Aria2NotificationTracker``, many
/// listeners.
///
/// Changes arrive on the queue's serial work queue, so each download's notifications are
/// made in the order its changes happened; each listener gets them in that order through its
/// own buffer. A listener that cannot keep up loses the oldest beyond 4,096 (the buffer), never
/// blocking the queue.
///
/// The queue is subscribed to only while a listener is connected: a subscriber of every change
/// makes hauld record each end of a busy queue at once, where with nobody listening ends are
/// committed together (`--enable-rpc` with no WebSocket open: 438 K → 386 K instructions a
/// queued file of 16 KiB, callgrind).
final class Aria2Notifier: Sendable {
    private struct State {
        var tracker = Aria2NotificationTracker()
        var listeners: [UInt64: @Sendable (String) -> Void] = [:]
        var nextListener: UInt64 = 0
    }

    private let queue: DownloadQueue
    private let state = Mutex(State())
    /// The queue's subscription, while anyone listens. Its lock is taken before `state`'s.
    private let subscription = Mutex<UInt64?>(nil)

    init(queue: DownloadQueue) {
        self.queue = queue
    }

    /// Subscribes to the queue (when not already), knowing every download's state as of now:
    /// notifications are about changes from the moment a first listener came.
    private func subscribeIfNeeded() {
        self.subscription.withLock { subscription in
            guard subscription == nil else { return }
            let snapshot = self.queue.stateSnapshot()
            self.state.withLock { state in
                state.tracker = Aria2NotificationTracker()
                for (id, gid, downloadState) in snapshot { state.tracker.seed(id: id, gid: gid, state: downloadState) }
            }
            // Notifications are about changes of state: progress is not worked out for them.
            subscription = self.queue.subscribe(progress: false) { [weak self] change in self?.handle(change) }
        }
    }

    /// Ends the queue's subscription when nobody listens (any more).
    private func unsubscribeIfUnheard() {
        self.subscription.withLock { subscription in
            guard let id = subscription, self.state.withLock({ $0.listeners.isEmpty }) else { return }
            self.queue.unsubscribe(id)
            subscription = nil
        }
    }

    /// Ends the queue's subscription, listeners or not (the RPC server stops).
    func stop() {
        self.subscription.withLock { subscription in
            if let id = subscription { self.queue.unsubscribe(id) }
            subscription = nil
        }
    }

    /// Registers `send` for every notification from now on (a JSON text each); the first
    /// listener subscribes the notifier to the queue.
    func addListener(_ send: @escaping @Sendable (String) -> Void) -> UInt64 {
        let id = self.state.withLock { state in
            state.nextListener += 1
            state.listeners[state.nextListener] = send
            return state.nextListener
        }
        self.subscribeIfNeeded()
        return id
    }

    /// Forgets listener `id`; the last one to leave ends the queue's subscription.
    func removeListener(_ id: UInt64) {
        _ = self.state.withLock { $0.listeners.removeValue(forKey: id) }
        self.unsubscribeIfUnheard()
    }

    /// Whether the notifier is subscribed to the queue now (for tests).
    var isSubscribed: Bool { self.subscription.withLock { $0 != nil } }

    private func handle(_ change: QueueChange) {
        let (notifications, listeners) = self.state.withLock { state -> ([(String, String)], [@Sendable (String) -> Void]) in
            let notifications: [(String, String)]
            switch change {
            case .changed(let info):
                notifications = state.tracker.changed(id: info.id, gid: info.gid, state: info.state).map { ($0, info.gid) }
            case .removed(let id):
                notifications = state.tracker.removed(id: id).map { [($0.method, $0.gid)] } ?? []
            case .settings:
                notifications = []
            }
            return (notifications, notifications.isEmpty ? [] : Array(state.listeners.values))
        }
        for (method, gid) in notifications {
            let text = String(decoding: Aria2Envelope.notification(method, gid: gid).bytes, as: UTF8.self)
            for listener in listeners { listener(text) }
        }
    }
}
