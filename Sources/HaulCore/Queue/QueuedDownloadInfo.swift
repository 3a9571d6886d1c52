import Foundation

/// A download of the queue as clients see it: `haul ls --json`, the RPC and the web UI.
public struct QueuedDownloadInfo: Codable, Sendable, Hashable {
    public var id: Int64
    /// The aria2-style id of the RPC (16 hex digits), stable across restarts; chosen by the
    /// daemon unless the client that added the download chose it.
    public var gid: String
    /// The primary URL first, then mirrors.
    public var urls: [URL]
    public var directory: String
    /// The file name: chosen by the user, else from the server once known.
    public var fileName: String?
    /// Where the file is (final path once complete; the partial file's path before).
    public var path: String?
    public var state: QueuedDownloadState
    public var bytesDone: Int64
    public var totalBytes: Int64?
    /// Bytes per second over the last few seconds (active downloads only).
    public var speed: Double?
    /// Seconds to completion at the current speed.
    public var secondsRemaining: Double?
    public var errorMessage: String?
    /// aria2's error code for `errorMessage` (``Aria2ErrorCode``): 3 not found, 9 disk full …
    public var errorCode: Int?
    public var checksum: String?
    public var priority: Int
    /// Bytes per second; 0 or `nil` is unlimited.
    public var speedLimit: Int64?
    /// Extra request headers, `Name: value` each (also `Referer` and `User-Agent`).
    public var requestHeaders: [String]?
    /// Options given through the RPC, as aria2 spells them (`split`, `max-connection-per-server`,
    /// …), for `getOption`; those Haul acts on are also in the fields above.
    public var options: [String: String]?
    /// Where the download stands in the waiting queue when it was moved (aria2's
    /// `changePosition`); `nil`: by age.
    public var queueRank: Double?
    /// Connections fetching it now (running downloads; more than one when segmented).
    public var connections: Int?
    /// Connections it may use (`haul add -x N`); `nil`: the queue's setting.
    public var maximumConnections: Int?
    /// Which bytes are on disk, when they are not one prefix (a segmented download).
    public var segments: ByteRangeSet?
    /// A running segmented download's servers: the primary, then each mirror, with the bytes
    /// it wrote this run, its connections, and why a mirror was dropped.
    public var sources: [SegmentSourceReport]?
    /// The daemon that runs it, when the queue is shared by a fleet (`nil` on one daemon).
    public var runner: String?
    /// A list download's number of files, each fetched from its own URL (`urls` holds the
    /// first); `nil`: one file.
    public var fileCount: Int?
    public var createdAt: Date
    public var startedAt: Date?
    public var finishedAt: Date?

    public init(
        id: Int64,
        urls: [URL],
        directory: String,
        fileName: String?,
        path: String?,
        state: QueuedDownloadState,
        bytesDone: Int64,
        totalBytes: Int64?,
        errorMessage: String?,
        checksum: String?,
        priority: Int,
        speedLimit: Int64?,
        createdAt: Date,
        startedAt: Date?,
        finishedAt: Date?,
        gid: String = ""
    ) {
        self.id = id
        self.gid = gid
        self.urls = urls
        self.directory = directory
        self.fileName = fileName
        self.path = path
        self.state = state
        self.bytesDone = bytesDone
        self.totalBytes = totalBytes
        self.errorMessage = errorMessage
        self.checksum = checksum
        self.priority = priority
        self.speedLimit = speedLimit
        self.createdAt = createdAt
        self.startedAt = startedAt
        self.finishedAt = finishedAt
    }

    /// The waiting queue's order: lower first (by age unless moved).
    public var queueOrder: Double { self.queueRank ?? Double(self.id) }

    /// Fraction done in 0...1, when the total is known.
    public var fraction: Double? {
        guard let total = self.totalBytes, total > 0 else { return nil }
        return min(1, Double(self.bytesDone) / Double(total))
    }

    /// This download with the members of `fields` taken from `projection` (the same download,
    /// projected to those fields: one it leaves out is `nil` now), the others kept.
    public func updated(from projection: QueuedDownloadInfo, fields: [DownloadField]) -> QueuedDownloadInfo {
        var updated = self
        for field in fields {
            // Exhaustive: a field added to ``DownloadField`` does not compile here until it is
            // taken too.
            switch field {
            case .id: break
            case .gid: updated.gid = projection.gid
            case .urls: updated.urls = projection.urls
            case .directory: updated.directory = projection.directory
            case .fileName: updated.fileName = projection.fileName
            case .path: updated.path = projection.path
            case .state: updated.state = projection.state
            case .bytesDone: updated.bytesDone = projection.bytesDone
            case .totalBytes: updated.totalBytes = projection.totalBytes
            case .speed: updated.speed = projection.speed
            case .secondsRemaining: updated.secondsRemaining = projection.secondsRemaining
            case .errorMessage: updated.errorMessage = projection.errorMessage
            case .errorCode: updated.errorCode = projection.errorCode
            case .checksum: updated.checksum = projection.checksum
            case .priority: updated.priority = projection.priority
            case .speedLimit: updated.speedLimit = projection.speedLimit
            case .requestHeaders: updated.requestHeaders = projection.requestHeaders
            case .options: updated.options = projection.options
            case .queueRank: updated.queueRank = projection.queueRank
            case .connections: updated.connections = projection.connections
            case .maximumConnections: updated.maximumConnections = projection.maximumConnections
            case .segments: updated.segments = projection.segments
            case .runner: updated.runner = projection.runner
            case .fileCount: updated.fileCount = projection.fileCount
            case .createdAt: updated.createdAt = projection.createdAt
            case .startedAt: updated.startedAt = projection.startedAt
            case .finishedAt: updated.finishedAt = projection.finishedAt
            }
        }
        return updated
    }
}
