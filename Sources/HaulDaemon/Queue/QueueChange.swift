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
