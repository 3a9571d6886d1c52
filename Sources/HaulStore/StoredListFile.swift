import Foundation

/// One file of a list download (``StoredDownload/fileCount``): its URL, and how its last fetch
/// ended. The URLs are saved with the list (one row of text); a file's row is written, in a
/// batch, once its fetch has ended.
public struct StoredListFile: Sendable, Hashable {
    /// One row per file that has ended.
    public static let databaseTableName = "listFile"
    /// One row per list: its URLs, a line each.
    public static let listTableName = "listURLs"

    public enum State: String, Sendable, Hashable {
        /// Not fetched yet, or to be fetched again (its file went missing before the list
        /// finished).
        case waiting
        /// Fetched whole and placed at ``path``: ``bytes`` long.
        case done
        /// Its last fetch failed (``error``); the list's next run tries it again.
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
