import HaulCore

/// What subscribers of the download queue hear (`haul watch`, `haul wait`, the web UI).
public enum QueueChange: Sendable, Hashable {
    /// A download was added or changed: state, progress (at most 4 times a second per
    /// download), name, error.
    case changed(QueuedDownloadInfo)
    /// A download left the list (`rm`, `purge`).
    case removed(id: Int64)
    /// The global settings changed.
    case settings(QueueSettings)
}

extension QueueChange {
    /// Whether a download reached the end of its life here: complete, failed or cancelled, or
    /// gone from the list. What a subscriber of finishes only hears (`queueSubscribe` with
    /// `"events": "finished"`, ``DaemonRequest/QueueSubscription``).
    var isFinish: Bool {
        switch self {
        case .changed(let info): !info.state.isInProgress
        case .removed: true
        case .settings: false
        }
    }
}
