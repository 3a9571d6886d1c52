import HaulCore
import HaulEngine

/// One server a segmented download fetched from (Haul extension): the primary URL or a mirror.
public struct HaulDownloadSource: Sendable, Hashable {
    public var url: URL
    /// The task's own URL (whose answer defined the file); `false` for a mirror.
    public var isPrimary: Bool
    /// Bytes of the file written from this server in the task's current run.
    public var bytes: Int64
    /// Connections fetching from it now.
    public var connections: Int
    /// Why the mirror contributes nothing (more), `nil` while it may.
    public var droppedReason: String?

    init(_ report: SegmentSourceReport) {
        self.url = report.url
        self.isPrimary = report.isPrimary
        self.bytes = report.bytes
        self.connections = report.connections
        self.droppedReason = report.dropped
    }
}

extension TransferSessionDownloadTask {
    /// Haul extension: other URLs of the same file. A segmented download (see
    /// `haulMaximumConnectionsPerDownload`; with mirrors a download is segmented even at one
    /// connection per server) fetches ranges from the task's URL and every mirror at once, up
    /// to that many connections per server, giving more of the file to the faster ones.
    ///
    /// The task's own URL defines the file. A mirror's bytes are used only when its first
    /// answer is a `206` for a file of the same length with the same validators (the same strong
    /// `ETag`, or the same `Last-Modified`) — or, with ``haulMirrorsVerifiedByChecksum``, the
    /// same length. Any other mirror is dropped (see ``haulSources``) and the download goes on
    /// without it. Set before the first `resume()`; later changes apply to the next run (after
    /// a pause or a retry from resume data).
    public var haulMirrors: [URL] {
        get { self.inner.withLock { $0.mirrors } }
        set { self.inner.withLock { $0.mirrors = newValue } }
    }

    /// Haul extension: the caller checks the finished file against a checksum, so a mirror
    /// whose validators differ from the primary's (another server's `ETag` for the same file)
    /// may contribute when its length agrees. `false` by default. When the checksum then fails,
    /// fetch the file again without mirrors: their bytes cannot be told apart afterwards.
    public var haulMirrorsVerifiedByChecksum: Bool {
        get { self.inner.withLock { $0.mirrorsVerifiedByChecksum } }
        set { self.inner.withLock { $0.mirrorsVerifiedByChecksum = newValue } }
    }

    /// Haul extension: the servers of a segmented download in its current (or last) run — the
    /// primary first, then each mirror — with the bytes each wrote, its connections and why a
    /// mirror was dropped. Empty while the download is not segmented.
    public var haulSources: [HaulDownloadSource] {
        (self.inner.withLock { $0.run }?.sourceReports ?? []).map(HaulDownloadSource.init)
    }
}
