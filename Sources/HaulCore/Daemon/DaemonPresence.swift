import Foundation

/// A daemon of the fleet as the shared store knows it.
public struct DaemonPresence: Sendable, Hashable, Codable {
    public var name: String
    public var pid: Int32
    public var startedAt: Date
    /// The last heartbeat, on the store's clock.
    public var seenAt: Date
    /// The downloads it holds a live lease on.
    public var downloads: [Int64]

    public init(name: String, pid: Int32, startedAt: Date, seenAt: Date, downloads: [Int64]) {
        self.name = name
        self.pid = pid
        self.startedAt = startedAt
        self.seenAt = seenAt
        self.downloads = downloads
    }
}
