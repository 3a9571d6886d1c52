import HaulCore

/// One file of a list download (``StoredDownload/fileCount``) as the store keeps it: its URL,
/// and how its last fetch ended. The URLs are saved with the list (one row of text); a file's
/// row is written, in a batch, once its fetch has ended (``TransferStore/recordFiles(of:_:)``).
public typealias StoredListFile = ListFileInfo

extension ListFileInfo {
    /// One row per file that has ended.
    public static let databaseTableName = "listFile"
    /// One row per list: its URLs, a line each.
    public static let listTableName = "listURLs"

    /// How a file's fetch ended, as ``TransferStore/recordFiles(of:_:)`` saves it: the file's
    /// row without its URL (the list's row holds the URLs). What a list's run hands to the
    /// thread that saves its files carries no URL: each is an object the loops use too, and its
    /// count of references went back and forth between the cores' caches with every copy.
    public struct End: Sendable, Hashable {
        public var position: Int
        public var state: State
        public var path: String?
        public var bytes: Int64?
        public var error: String?

        public init(position: Int, state: State, path: String? = nil, bytes: Int64? = nil, error: String? = nil) {
            self.position = position
            self.state = state
            self.path = path
            self.bytes = bytes
            self.error = error
        }
    }
}
