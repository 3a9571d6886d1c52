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
}
