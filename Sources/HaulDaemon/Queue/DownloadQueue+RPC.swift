import Foundation
import HaulCore
import HaulStore

/// What aria2's RPC asks of the queue beyond the socket's commands: downloads by gid, the
/// waiting queue in its order (and moving within it), the URIs and options of one download.
/// Reads are answered from memory (the index and the running transfers), as lists are.
extension DownloadQueue {
    /// The download with RPC id `gid`, or aria2's refusal.
    public func id(gid: String) throws(Aria2Fault) -> Int64 {
        guard let normalized = DownloadGID.normalized(gid),
            let id = self.state.withLock({ $0.index.id(gid: normalized) })
        else { throw Aria2Fault("GID \(gid) is not found") }
        return id
    }

    /// One download with its live numbers, from memory.
    public func liveInfo(id: Int64) -> QueuedDownloadInfo? {
        self.state.withLock { state in
            guard let entry = state.index.entry(id: id) else { return nil }
            guard let running = state.running[id] else { return entry.info }
            return Self.overlay(running.stored.info, live: running)
        }
    }

    /// Downloads in `states` (index order: oldest first), with live numbers for running ones.
    public func liveInfos(in states: Set<QueuedDownloadState>) -> [QueuedDownloadInfo] {
        self.state.withLock { state in
            state.index.entries.lazy.filter { states.contains($0.state) }.map { entry in
                guard let running = state.running[entry.id] else { return entry.info }
                return Self.overlay(running.stored.info, live: running)
            }
        }
    }

    /// aria2's waiting queue: waiting and paused downloads in the order they will start.
    public func waitingQueue() -> [QueuedDownloadInfo] {
        self.state.withLock { $0.index.waitingQueue().map(\.info) }
    }

    /// A window of the waiting queue: `window` gets its length and answers the positions.
    public func waitingQueue(window: (Int) throws -> [Int]) rethrows -> [QueuedDownloadInfo] {
        try self.state.withLock { state in
            try state.index.waitingQueue(at: window(state.index.waitingQueueCount)).map(\.info)
        }
    }

    /// A window of the finished, failed and removed downloads in the order they stopped.
    public func stoppedDownloads(window: (Int) throws -> [Int]) rethrows -> [QueuedDownloadInfo] {
        try self.state.withLock { state in try state.index.stoppedQueue(at: window).map(\.info) }
    }

    /// The sum of the running downloads' speeds, in bytes per second.
    public var downloadSpeed: Double {
        self.state.withLock { state in state.running.values.reduce(0) { $0 + ($1.transfer.rate.speed ?? 0) } }
    }

    /// Moves a waiting or paused download within the waiting queue (aria2's `changePosition`);
    /// returns its new position. The scheduler starts downloads in this order (after priority:
    /// the moved download takes the priority of the place it moves to).
    public func changePosition(id: Int64, offset: Int64, how: String) async throws -> Int {
        try await self.onWork {
            let queue = self.waitingQueue()
            guard let current = queue.firstIndex(where: { $0.id == id }) else {
                throw Aria2Fault("GID \(self.liveInfo(id: id)?.gid ?? String(id)) is not in the waiting queue")
            }
            let target = try Aria2Position.target(current: current, count: queue.count, offset: offset, how: how)
            guard target != current else { return current }
            var others = queue
            others.remove(at: current)
            // The place's neighbour decides the priority, so that the scheduler's order and
            // the list's agree.
            let neighbour = target < others.count ? others[target] : others[others.count - 1]
            var renumbered: [StoredDownload] = []
            var rank = Aria2Position.rank(at: target, among: others.map(\.queueOrder))
            if rank == nil {
                // No room between two neighbours: number the whole queue again (0, 2, 4 …).
                var numbering: [Int64: Int] = [:]
                for (position, other) in others.enumerated() { numbering[other.id] = position }
                let positions = numbering
                renumbered = try self.updateDownloads(ids: others.map(\.id)) { row in
                    row.queueRank = Double(positions[row.id!]!) * 2
                    return true
                }
                rank = Double(target) * 2 - 1
            }
            let newRank = rank!
            guard let updated = try self.updateDownload(id: id, { download in
                download.queueRank = newRank
                download.priority = neighbour.priority
            }) else { throw Aria2Fault("GID is not found") }
            // The scheduler re-ranks what waits (adding a waiting entry replaces it). A download
            // started ahead is listed as waiting: moved, it waits again for its new turn (once its
            // run has stopped; one moved ahead of it makes it yield anyway).
            for row in renumbered + [updated] where row.state == .waiting { self.core.enqueue(Self.entry(for: row)) }
            if updated.state != .waiting { _ = self.requeue(id, onlyIfWaiting: true) }
            self.publish(.changed(self.info(for: updated)))
            return target
        }
    }

    /// aria2's `changeUri`: deletes the URIs in `delete` (each once), then inserts `add` at
    /// `position` (the end when `nil`). Bytes are kept: the next request carries `If-Range`
    /// with the validators on record, so they are reused only for the same entity. Returns how
    /// many were deleted and added.
    public func changeURIs(id: Int64, delete: [String], add: [String], position: Int?) async throws -> (deleted: Int, added: Int) {
        var newURLs: [URL] = []
        for text in add {
            guard let url = URL.http(text) else { throw Aria2Fault("not an http or https URI: \(text)") }
            newURLs.append(url)
        }
        let added = newURLs
        return try await self.onWork {
            let download = try self.existing(id)
            guard download.state.isInProgress else {
                throw Aria2Fault("download \(download.gid) is \(download.state.rawValue); its URIs cannot change")
            }
            guard !download.isList else { throw Aria2Fault("download \(download.gid) is a list of files; its URIs cannot change") }
            var urls = download.urls
            var deleted = 0
            for text in delete {
                if let index = urls.firstIndex(where: { $0.absoluteString == text }) {
                    urls.remove(at: index)
                    deleted += 1
                }
            }
            let at = max(0, min(urls.count, position ?? urls.count))
            urls.insert(contentsOf: added, at: at)
            guard !urls.isEmpty else { throw Aria2Fault("a download needs at least one URI") }
            let finalURLs = urls
            let primaryChanged = urls[0] != download.urls[0]
            let wasActive = download.state == .active
            // A running transfer keeps its connection unless its URL went away.
            if wasActive, primaryChanged { _ = self.requeue(id, onlyIfWaiting: false) }
            guard let updated = try self.updateDownload(id: id, { row in
                row.urls = finalURLs
                if primaryChanged || row.urlIndex >= finalURLs.count {
                    row.urlIndex = 0
                    row.currentURL = nil
                }
            }) else { throw Aria2Fault("GID is not found") }
            if updated.state == .waiting { self.core.enqueue(Self.entry(for: updated)) }
            self.publish(.changed(updated.info))
            return (deleted, added.count)
        }
    }

    /// aria2's `changeOption` for one download: the speed limit at once (also while it runs);
    /// the directory, name, checksum and headers while it is not running; the other aria2
    /// options are recorded.
    public func changeOptions(id: Int64, _ options: [(String, JSONValue)]) async throws {
        var limit: Int64?
        var fields: [String: String] = [:]
        var headers: [String]?
        for (name, value) in options {
            if name == "header" {
                headers = try Aria2Options.headers(value)
                continue
            }
            let text = try Aria2Options.text(value, name: name)
            switch name {
            case "max-download-limit":
                guard let rate = SpeedLimit.parse(text) else { throw Aria2Fault("option max-download-limit: '\(text)' is not a rate") }
                limit = rate
            case "dir", "out", "checksum", "referer", "user-agent":
                fields[name] = text
            default:
                guard Aria2Options.recorded.contains(name) else { continue }
                try Aria2Options.checkRecorded(name, text)
                fields[name] = text
            }
        }
        if let dir = fields["dir"] {
            guard dir.hasPrefix("/") else { throw Aria2Fault("option dir: '\(dir)' is not an absolute path") }
            try Self.prepareDirectory(dir)
        }
        if let out = fields["out"], FileNaming.sanitize(out) != out {
            throw Aria2Fault("option out: '\(out)' is not a plain file name")
        }
        var checksum: String?
        if let text = fields["checksum"] {
            do { checksum = try ChecksumSpec(parsing: text).description } catch { throw Aria2Fault("option checksum: \(error)") }
        }
        let newChecksum = checksum
        let newHeaders = headers
        let changes = fields
        if let limit { _ = try await self.setSpeedLimit(id: id, bytesPerSecond: limit) }
        let touchesFile = changes["dir"] != nil || changes["out"] != nil || newChecksum != nil || newHeaders != nil
            || changes["referer"] != nil || changes["user-agent"] != nil
        let recorded = changes.filter { Aria2Options.recorded.contains($0.key) }
        guard touchesFile || !recorded.isEmpty else { return }
        try await self.onWork {
            let download = try self.existing(id)
            if touchesFile {
                guard download.state == .waiting || download.state == .paused || download.state == .error else {
                    throw Aria2Fault("download \(download.gid) is \(download.state.rawValue); pause it before changing dir, out, checksum or headers")
                }
            }
            guard let updated = try self.updateDownload(id: id, { row in
                if let dir = changes["dir"], dir != row.directory {
                    // The partial file lives beside its destination: a new directory starts anew.
                    if let partial = row.partialPath { unlink(partial) }
                    row.partialPath = nil
                    row.bytesDone = 0
                    row.directory = dir
                }
                if let out = changes["out"] {
                    row.requestedName = out
                    row.fileName = out
                }
                if let newChecksum { row.checksum = newChecksum }
                var lines = row.requestHeaders
                if let newHeaders {
                    // Referer and User-Agent, set as options of their own, survive a new header list.
                    lines = newHeaders + row.requestHeaders.filter { Self.isOptionHeader($0) }
                }
                if let referer = changes["referer"] {
                    lines.removeAll { $0.lowercased().hasPrefix("referer:") }
                    lines.append("Referer: \(referer)")
                }
                if let agent = changes["user-agent"] {
                    lines.removeAll { $0.lowercased().hasPrefix("user-agent:") }
                    lines.append("User-Agent: \(agent)")
                }
                row.requestHeaders = lines
                for (name, value) in recorded { row.options[name] = value }
            }) else { throw Aria2Fault("GID is not found") }
            self.publish(.changed(self.info(for: updated)))
        }
    }

    /// `Referer` and `User-Agent` lines: aria2 sets them as options of their own.
    static func isOptionHeader(_ line: String) -> Bool {
        let lower = line.lowercased()
        return lower.hasPrefix("referer:") || lower.hasPrefix("user-agent:")
    }

    /// aria2's `removeDownloadResult`: drops one finished, failed or removed download from the
    /// history (its file stays).
    public func removeResult(id: Int64) async throws {
        try await self.onWork {
            guard let download = try self.store.download(id: id) else { throw Aria2Fault("GID is not found") }
            guard !download.state.isInProgress else {
                throw Aria2Fault("download \(download.gid) is \(download.state.rawValue), not stopped")
            }
            // Kept bytes of a failed download go with its entry.
            if download.state != .complete, let partial = download.partialPath { unlink(partial) }
            try self.deleteDownload(id: id)
            self.publish(.removed(id: id))
        }
    }
}


extension DownloadQueue {
    /// Records aria2 global options that Haul keeps without acting on them (`split`,
    /// `user-agent` …): saved with the settings, answered by `getGlobalOption`, and the
    /// defaults of downloads added through the RPC.
    public func setRPCOptions(_ options: [String: String]) async throws -> QueueSettings {
        try await self.onWork {
            var settings = self.settings
            var merged = settings.rpcOptions ?? [:]
            merged.merge(options) { $1 }
            settings.rpcOptions = merged
            try self.store.save(settings)
            self.state.withLock { $0.settings = settings }
            self.publish(.settings(settings))
            return settings
        }
    }

    /// Every download's id, gid and state, for a listener that starts now.
    public func stateSnapshot() -> [(id: Int64, gid: String, state: QueuedDownloadState)] {
        self.state.withLock { state in state.index.entries.map { ($0.id, $0.info.gid, $0.state) } }
    }
}
