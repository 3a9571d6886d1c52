import Foundation

/// Every download of the queue in memory, oldest first, each as its state, its search text
/// and its JSON record (those two made when first needed, then kept): what lists, counts and
/// "every paused one" are answered from, so that none of them reads the store or encodes
/// 10,000 downloads again. The store stays the durable copy; its one writer puts every row it
/// saves here.
///
/// A value type with no I/O: `put` after every saved change, `remove` after every delete.
/// Ids ascend with age (the store's row ids), so adding is an append and finding is a binary
/// search.
public struct DownloadIndex: Sendable {
    public struct Entry: Sendable {
        public var id: Int64
        public var state: QueuedDownloadState
        /// Whether the record and search text, once made, are kept (see
        /// ``DownloadIndex/put(_:prepared:)``).
        var keepsPrepared: Bool
        /// File name and URLs, lowercased, for ``QueuePage/search``, once a search needed it.
        var preparedSearchText: String?
        /// The JSON record, once a list needed it.
        var preparedRecord: DownloadRecord?
        /// The download as the record says it (for answers in other shapes: the RPC's status).
        public var info: QueuedDownloadInfo
        /// Which put made this entry (``DownloadIndex/keep(_:madeFrom:)`` checks it has not changed).
        var revision: UInt64

        /// The download's JSON record for lists.
        public var record: DownloadRecord { self.preparedRecord ?? DownloadRecord(self.info) }

        /// The record kept, or the info to make it from and the put that made this entry (see
        /// ``DownloadIndex/keep(_:madeFrom:)``).
        public var recordSource: RecordSource {
            if let record = self.preparedRecord { return .kept(record) }
            return .info(self.info, Revision(id: self.id, value: self.revision))
        }
    }

    public private(set) var entries: [Entry] = []
    private var counts: [QueuedDownloadState: Int] = [:]
    /// The RPC's ids.
    private var gids: [String: Int64] = [:]
    /// The revision of the latest put.
    private var revision: UInt64 = 0

    public init() {}

    public var count: Int { self.entries.count }

    /// Adds `info` or replaces the entry with its id. With `prepared`, its JSON record and
    /// search text are made when a list or a search first needs them, and kept for every later
    /// one (most finished downloads are never listed one by one: making them as each ended was
    /// a twentieth of a small file's bookkeeping, and of a restart's). Without, they are made
    /// for each request and not kept: for a running download, whose row changes as it starts
    /// and checkpoints while lists show its live numbers instead.
    public mutating func put(_ info: QueuedDownloadInfo, prepared: Bool = true) {
        self.revision &+= 1
        let entry = Entry(id: info.id, state: info.state, keepsPrepared: prepared, info: info, revision: self.revision)
        self.counts[entry.state, default: 0] += 1
        if let last = self.entries.last, last.id >= info.id {
            let position = self.position(of: info.id)
            if position < self.entries.count, self.entries[position].id == info.id {
                self.counts[self.entries[position].state]! -= 1
                // A download's gid is set as it is added and never changes: a put that
                // replaces its entry (each start, checkpoint and end) hashes no string.
                let gidChanged = self.entries[position].info.gid != info.gid
                self.entries[position] = entry
                guard gidChanged else { return }
            } else {
                self.entries.insert(entry, at: position)
            }
        } else {
            self.entries.append(entry)
        }
        if !info.gid.isEmpty { self.gids[info.gid] = info.id }
    }

    /// Download `id` is in `state` now and nothing else of it changed (a run started ahead got
    /// its slot): the entry's state, its info's and the counts, without a put of a whole info.
    /// An id not listed is ignored.
    public mutating func setState(_ state: QueuedDownloadState, id: Int64) {
        let position = self.position(of: id)
        guard position < self.entries.count, self.entries[position].id == id, self.entries[position].state != state else { return }
        self.revision &+= 1
        self.counts[self.entries[position].state, default: 1] -= 1
        self.counts[state, default: 0] += 1
        self.entries[position].state = state
        self.entries[position].info.state = state
        self.entries[position].preparedRecord = nil
        self.entries[position].revision = self.revision
    }

    public mutating func remove(id: Int64) {
        let position = self.position(of: id)
        guard position < self.entries.count, self.entries[position].id == id else { return }
        self.counts[self.entries[position].state]! -= 1
        self.gids[self.entries[position].info.gid] = nil
        self.entries.remove(at: position)
    }

    /// Drops every entry in `states`; returns their ids.
    public mutating func removeAll(in states: Set<QueuedDownloadState>) -> [Int64] {
        let goneEntries = self.entries.filter { states.contains($0.state) }
        guard !goneEntries.isEmpty else { return [] }
        for entry in goneEntries { self.gids[entry.info.gid] = nil }
        let gone = goneEntries.map(\.id)
        self.entries.removeAll { states.contains($0.state) }
        for state in states { self.counts[state] = nil }
        return gone
    }

    public func entry(id: Int64) -> Entry? {
        let position = self.position(of: id)
        guard position < self.entries.count, self.entries[position].id == id else { return nil }
        return self.entries[position]
    }

    /// The id of the download with RPC id `gid` (lower-case hex).
    public func id(gid: String) -> Int64? { self.gids[gid] }

    /// How many downloads are in aria2's waiting queue (waiting and paused).
    public var waitingQueueCount: Int { (self.counts[.waiting] ?? 0) + (self.counts[.paused] ?? 0) }

    /// The waiting queue as aria2 has it: waiting and paused downloads in the order they start
    /// (higher priority first, then by ``QueuedDownloadInfo/queueOrder``).
    public func waitingQueue() -> [Entry] {
        self.waitingQueue(at: Array(0..<self.waitingQueueCount))
    }

    /// The entries at `positions` of the waiting queue (in the order of `positions`; those past
    /// the end are left out). Nothing is copied but what is asked for: with no download moved
    /// and no priority set, the queue is id order and one walk picks the window; otherwise
    /// the positions of the whole queue are sorted, not its entries.
    public func waitingQueue(at positions: [Int]) -> [Entry] {
        guard !positions.isEmpty else { return [] }
        var members: [Int] = []
        members.reserveCapacity(self.waitingQueueCount)
        var reordered = false
        for index in self.entries.indices where self.entries[index].state == .waiting || self.entries[index].state == .paused {
            members.append(index)
            if self.entries[index].info.queueRank != nil || self.entries[index].info.priority != 0 { reordered = true }
        }
        if reordered {
            members.sort { a, b in
                let (x, y) = (self.entries[a].info, self.entries[b].info)
                if x.priority != y.priority { return x.priority > y.priority }
                if x.queueOrder != y.queueOrder { return x.queueOrder < y.queueOrder }
                return x.id < y.id
            }
        }
        return positions.compactMap { $0 >= 0 && $0 < members.count ? self.entries[members[$0]] : nil }
    }

    /// The entries at `positions` of the stopped downloads (complete, failed, removed) in the
    /// order they stopped (finish time, then id), as aria2's `tellStopped` has them.
    public func stoppedQueue(at positions: (Int) throws -> [Int]) rethrows -> [Entry] {
        var members = self.entries.indices.filter { self.entries[$0].state == .complete || self.entries[$0].state == .error || self.entries[$0].state == .removed }
        members.sort { a, b in
            let (x, y) = (self.entries[a].info, self.entries[b].info)
            let (p, q) = (x.finishedAt ?? x.createdAt, y.finishedAt ?? y.createdAt)
            return p != q ? p < q : x.id < y.id
        }
        return try positions(members.count).compactMap { $0 >= 0 && $0 < members.count ? self.entries[members[$0]] : nil }
    }

    /// How many downloads are in each state (states with none are absent).
    public var stateCounts: [QueuedDownloadState: Int] { self.counts.filter { $0.value > 0 } }

    /// The ids in `states`, oldest first.
    public func ids(in states: Set<QueuedDownloadState>) -> [Int64] {
        self.entries.lazy.filter { states.contains($0.state) }.map(\.id)
    }

    /// Where download `id`'s JSON record comes from, read without making it: the record kept,
    /// or the info to make one from, away from whatever guards this index (a lock held while
    /// 10,000 records were made, ~114 M instructions, stalled everything else that needed it),
    /// then handed back with ``keep(_:madeFrom:)``. `nil` when there is no such download.
    public func recordSource(id: Int64) -> RecordSource? {
        let position = self.position(of: id)
        guard position < self.entries.count, self.entries[position].id == id else { return nil }
        return self.entries[position].recordSource
    }

    /// A download's JSON record, or what to make it from (``recordSource(id:)``).
    public enum RecordSource: Sendable {
        case kept(DownloadRecord)
        /// The entry's info, and which put made it (for ``DownloadIndex/keep(_:madeFrom:)``).
        case info(QueuedDownloadInfo, Revision)
    }

    /// Which put made a download's entry.
    public struct Revision: Sendable, Hashable {
        let id: Int64
        let value: UInt64
    }

    /// Keeps `record`, made from the info of a ``RecordSource/info(_:_:)`` of `revision`, as
    /// the record of its download when no put replaced that entry since and it keeps records
    /// (``put(_:prepared:)``); otherwise the entry changed meanwhile and makes its own when
    /// next listed. Returns whether it was kept.
    @discardableResult
    public mutating func keep(_ record: DownloadRecord, madeFrom revision: Revision) -> Bool {
        let position = self.position(of: revision.id)
        guard position < self.entries.count, self.entries[position].id == revision.id, self.entries[position].revision == revision.value,
            self.entries[position].keepsPrepared, self.entries[position].preparedRecord == nil
        else { return false }
        self.entries[position].preparedRecord = record
        return true
    }

    private mutating func prepareSearchText(at position: Int) -> String {
        if let text = self.entries[position].preparedSearchText { return text }
        let text = Self.searchText(self.entries[position].info)
        if self.entries[position].keepsPrepared { self.entries[position].preparedSearchText = text }
        return text
    }

    /// The entries of one page, and how many match the page's filter in all. Their records are
    /// not made here: the caller makes the missing ones (``Entry/recordSource``) away from
    /// whatever guards this index and hands them back with ``keep(_:madeFrom:)`` (a first
    /// list of 10,000 finished downloads made ~100 M instructions of JSON inside the queue's
    /// lock). Without a search the total comes from the counts and the walk stops at the
    /// page's end, so a small page or a count (`limit` 0) costs the same at 10 downloads or
    /// 100,000.
    public mutating func page(_ page: QueuePage) -> (entries: [Entry], total: Int) {
        let (positions, total) = self.positions(page)
        return (positions.map { self.entries[$0] }, total)
    }

    /// The positions in ``entries`` of one page, and how many match in all.
    private mutating func positions(_ page: QueuePage) -> (positions: [Int], total: Int) {
        let states = page.states.map(Set.init) ?? Set(QueuedDownloadState.allCases).subtracting([.removed])
        var wanted = [Bool](repeating: false, count: QueuedDownloadState.allCases.count)
        for state in states { wanted[state.ordinal] = true }
        let search = page.search?.trimmingCharacters(in: .whitespaces).lowercased() ?? ""
        let limit = page.limit ?? Int.max
        let end = page.offset.addingReportingOverflow(limit)
        let pageEnd = end.overflow ? Int.max : end.partialValue
        var selected: [Int] = []
        if search.isEmpty {
            let total = states.reduce(0) { $0 + (self.counts[$1] ?? 0) }
            guard page.offset < total, limit > 0 else { return ([], total) }
            selected.reserveCapacity(Swift.min(limit, total - page.offset))
            var matched = 0
            for position in self.entries.indices where wanted[self.entries[position].state.ordinal] {
                if matched >= page.offset { selected.append(position) }
                matched += 1
                if matched >= pageEnd { break }
            }
            return (selected, total)
        }
        var total = 0
        for position in self.entries.indices where wanted[self.entries[position].state.ordinal] && self.prepareSearchText(at: position).contains(search) {
            if total >= page.offset, total < pageEnd { selected.append(position) }
            total += 1
        }
        return (selected, total)
    }

    /// The first index whose id is not below `id`.
    private func position(of id: Int64) -> Int {
        var low = 0
        var high = self.entries.count
        while low < high {
            let middle = (low + high) / 2
            if self.entries[middle].id < id { low = middle + 1 } else { high = middle }
        }
        return low
    }

    static func searchText(_ info: QueuedDownloadInfo) -> String {
        ([info.fileName ?? ""] + info.urls.map(\.absoluteString)).joined(separator: "\n").lowercased()
    }
}
