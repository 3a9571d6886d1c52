import Foundation
import HaulCore
import Synchronization

/// Sends aria2's notifications (`aria2.onDownloadStart` …) to every WebSocket listener: one
/// subscription to the queue, one ``Aria2NotificationTracker``, many listeners.
///
/// Changes arrive on the queue's serial work queue, so each download's notifications are
/// made in the order its changes happened; each listener gets them in that order through its
/// own buffer. A listener that cannot keep up loses the oldest beyond 4,096 (the buffer), never
/// blocking the queue.
final class Aria2Notifier: Sendable {
    private struct State {
        var tracker = Aria2NotificationTracker()
        var listeners: [UInt64: @Sendable (String) -> Void] = [:]
        var nextListener: UInt64 = 0
    }

    private let queue: DownloadQueue
    private let state = Mutex(State())
    private let subscription = Mutex<UInt64?>(nil)

    init(queue: DownloadQueue) {
        self.queue = queue
    }

    /// Subscribes to the queue, knowing every download's state as of now.
    func start() {
        let snapshot = self.queue.stateSnapshot()
        self.state.withLock { state in
            for (id, gid, downloadState) in snapshot { state.tracker.seed(id: id, gid: gid, state: downloadState) }
        }
        // Notifications are about changes of state: progress is not worked out for them.
        let id = self.queue.subscribe(progress: false) { [weak self] change in self?.handle(change) }
        self.subscription.withLock { $0 = id }
    }

    func stop() {
        if let id = self.subscription.withLock({ $0 }) { self.queue.unsubscribe(id) }
    }

    /// Registers `send` for every notification from now on (a JSON text each).
    func addListener(_ send: @escaping @Sendable (String) -> Void) -> UInt64 {
        self.state.withLock { state in
            state.nextListener += 1
            state.listeners[state.nextListener] = send
            return state.nextListener
        }
    }

    func removeListener(_ id: UInt64) {
        _ = self.state.withLock { $0.listeners.removeValue(forKey: id) }
    }

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
