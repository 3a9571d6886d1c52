/// A client's view of the queue, kept from a list and the events of a subscription (`haul wait`,
/// `haul watch`). Pure: the follower feeds it what the connection delivers.
///
/// A connection subscribes first and lists second, so an event can be newer than the list that
/// follows it: the list never overwrites what an event of the same connection told. After a
/// reconnect the list replaces every view from before (a download that finished while the
/// daemon restarted must not stay "active"), and a download the list no longer has counts as
/// removed.
public struct QueueView: Sendable {
    public private(set) var downloads: [Int64: QueuedDownloadInfo] = [:]
    public private(set) var removed: Set<Int64> = []
    /// Downloads an event told of since the current connection subscribed.
    private var heardSinceAttach: Set<Int64> = []

    public init() {}

    /// A new connection is about to subscribe.
    public mutating func beginAttach() {
        self.heardSinceAttach = []
    }

    /// `download` was added or changed; `fields`: it is a projection that holds only those
    /// members (a subscription with `fields`), which replace the known download's, whose other
    /// members stay as they were (one not known yet is kept as it came).
    public mutating func changed(_ download: QueuedDownloadInfo, fields: [DownloadField]? = nil) {
        if let fields, let known = self.downloads[download.id] {
            self.downloads[download.id] = known.updated(from: download, fields: fields)
        } else {
            self.downloads[download.id] = download
        }
        self.heardSinceAttach.insert(download.id)
    }

    public mutating func removed(id: Int64) {
        self.downloads[id] = nil
        self.removed.insert(id)
        self.heardSinceAttach.insert(id)
    }

    /// The connection's list (every download not purged).
    public mutating func listed(_ all: [QueuedDownloadInfo]) {
        let listed = Set(all.map(\.id))
        for download in all where !self.heardSinceAttach.contains(download.id) {
            self.downloads[download.id] = download
        }
        for id in self.downloads.keys where !listed.contains(id) && !self.heardSinceAttach.contains(id) {
            self.downloads[id] = nil
            self.removed.insert(id)
        }
    }
}
