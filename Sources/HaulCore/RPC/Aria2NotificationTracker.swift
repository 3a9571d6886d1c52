/// Turns the queue's changes into aria2's notifications: `aria2.onDownloadStart` when a
/// download becomes active (also after an unpause), `onDownloadPause`, `onDownloadStop` (removed),
/// `onDownloadComplete` and `onDownloadError`, each once per change of state, in the order
/// the changes happen. Progress within a state notifies nothing. A download that ends straight
/// from waiting (a small file's run can take its slot and finish between two changes the queue
/// tells) ran all the same: `onDownloadStart` comes before its end, as aria2 sends it.
///
/// A value type with no I/O: feed it every change, send what it answers.
public struct Aria2NotificationTracker: Sendable {
    public static let methods = [
        "aria2.onDownloadStart", "aria2.onDownloadPause", "aria2.onDownloadStop", "aria2.onDownloadComplete",
        "aria2.onDownloadError", "aria2.onBtDownloadComplete",
    ]

    private var known: [Int64: (gid: String, state: QueuedDownloadState)] = [:]

    public init() {}

    /// Records a download's state without notifying (what was there before anyone listened).
    public mutating func seed(id: Int64, gid: String, state: QueuedDownloadState) {
        self.known[id] = (gid, state)
    }

    /// A download was added or changed: the notifications to send, in order, if its state
    /// changed into one that has one (and the start of one that ended straight from waiting). A
    /// download seen for the first time notifies only when it is active.
    public mutating func changed(id: Int64, gid: String, state: QueuedDownloadState) -> [String] {
        let previous = self.known.updateValue((gid, state), forKey: id)?.state
        guard previous != state else { return [] }
        if previous == nil, state != .active { return [] }
        guard let method = Self.method(for: state) else { return [] }
        if previous == .waiting, state == .complete || state == .error { return ["aria2.onDownloadStart", method] }
        return [method]
    }

    /// A download left the list: `onDownloadStop` with its gid when it was still in progress
    /// (a finished one already had its notification).
    public mutating func removed(id: Int64) -> (method: String, gid: String)? {
        guard let previous = self.known.removeValue(forKey: id) else { return nil }
        guard previous.state.isInProgress else { return nil }
        return ("aria2.onDownloadStop", previous.gid)
    }

    static func method(for state: QueuedDownloadState) -> String? {
        switch state {
        case .active: "aria2.onDownloadStart"
        case .paused: "aria2.onDownloadPause"
        case .removed: "aria2.onDownloadStop"
        case .complete: "aria2.onDownloadComplete"
        case .error: "aria2.onDownloadError"
        case .waiting: nil
        }
    }
}
