import Foundation

/// One file of a list download as clients see it (`queueFiles`, `haul show`): its place in the
/// list, its URL, and how its last fetch ended.
public struct ListFileInfo: Codable, Sendable, Hashable {
    public enum State: String, Codable, Sendable, Hashable, CaseIterable {
        /// Not fetched yet (or being fetched, or to be fetched again).
        case waiting
        /// Fetched whole and placed at `path`.
        case done
        /// Its last fetch failed (`error`); the list's next run tries it again.
        case failed
    }

    /// Its place in the list, from 0.
    public var position: Int
    public var url: URL
    public var state: State
    /// Where the finished file is: saved before it is placed there, so that a restart finds it
    /// (or, not finding it, fetches it again).
    public var path: String?
    public var bytes: Int64?
    public var error: String?

    public init(position: Int, url: URL, state: State = .waiting, path: String? = nil, bytes: Int64? = nil, error: String? = nil) {
        self.position = position
        self.url = url
        self.state = state
        self.path = path
        self.bytes = bytes
        self.error = error
    }
}

/// How many files of a list download are in each state (`queueFiles`).
public struct ListFileCounts: Codable, Sendable, Hashable {
    public var done: Int
    public var failed: Int
    public var waiting: Int

    public init(done: Int = 0, failed: Int = 0, waiting: Int = 0) {
        self.done = done
        self.failed = failed
        self.waiting = waiting
    }
}
