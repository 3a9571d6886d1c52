import Foundation
import HaulCore
import HaulEngine
import HaulStore
import Logging
import Synchronization

/// The download manager: a persisted queue of downloads into user directories, one owner of
/// transfers in ``TransferCore`` (background sessions are the other), driven by
/// `haul add/ls/pause/…`, the socket and the web UI.
///
/// Every decision and every store write of the queue happens on one serial dispatch queue
/// (``work``), so a user's `pause` and a transfer ending at the same instant are ordered, never
/// interleaved. Which downloads run is the core's one scheduler's decision: the queue hands it
/// the waiting downloads and takes them back when paused or removed; paused downloads cost the
/// scheduler nothing. A download's file appears under its final name only once complete and
/// verified (length, validators, checksum when given); until then it is `NAME.ID.haul-part`
/// in the same directory.
public final class DownloadQueue: TransferOwner, Sendable {
    public struct Configuration: Sendable {
        /// Retries of transient failures on one URL before the next mirror (or an error).
        public var retryPolicy = RetryPolicy(
            maximumAttempts: 6,
            initialDelay: 1,
            maximumDelay: 30,
            maximumRetryAfter: 600,
            retriesRefusedConnections: true
        )
        /// The default directory before the user sets one.
        public var defaultDirectory: String
        /// This daemon's name in a fleet (a shared store): its leases and `haul ls` name it.
        /// Unique among the fleet's daemons; a daemon restarted under the same name takes its
        /// own downloads back at once instead of waiting for their leases to expire.
        public var daemonName: String = "\(ProcessInfo.processInfo.hostName)-\(getpid())"
        /// How long a lease on a download of a shared store lasts unless renewed. A daemon
        /// renews every quarter of it and stops a download it could not renew for 60 % of it;
        /// another daemon takes it over once it expired.
        public var leaseSeconds: Double = 15
        /// `max-concurrent` of this daemon alone (`hauld --maximum-transfers` with a shared
        /// store, where the saved settings are the fleet's).
        public var maximumConcurrentOverride: Int?
        /// How many rows of waiting downloads a sole-writer store's queue keeps in memory for
        /// their claims: a download added or saved while fewer are kept starts without reading
        /// its row back; beyond, a claim reads its row with the next
        /// ``DownloadQueue/waitingRowsRead`` (callgrind, 300 → 600 small files added at once: a
        /// row read back and decoded cost ~20 K instructions, 4.5 % of a queued file's, with
        /// 256 kept). Measured with 10,000 waiting: 256 → 2,048 kept, 54-55 → 57 MiB resident.
        public var waitingRowsKept = 2048
        /// Whether plain downloads of small files run in their host's ``HostRun`` (no task at
        /// the core's gate and no hop to the queue's thread to start each) rather than each in
        /// a run of its own (`hauld --no-host-runs`, to compare).
        public var usesHostRuns = true

        public init(defaultDirectory: String) {
            self.defaultDirectory = defaultDirectory
        }
    }

    /// Why a running transfer is being stopped.
    enum StopIntent: Sendable {
        case pause
        /// Cancelled or removed: delete the partial file.
        case remove(deleteRow: Bool)
        /// Back to waiting (the scheduler wants the slot back).
        case requeue
        case shutdown
        /// Its lease is lost or about to expire: stop at once and write nothing more (another
        /// daemon may own the download now).
        case fenced
    }

    struct Running {
        var transfer: TrackedTransfer
        var run: QueueRun
        /// Its scheduler entry's host key (``TransferRun/hostKey(_:)``).
        var host: String
        /// The loop the core counted its run on (``TransferCore/engine(for:host:knownBytes:)``).
        var lane: RunGate.Lane?
        var intent: StopIntent?
        /// The row as last saved (kept by every write), for progress events without a store
        /// read; or as claimed, while the claim is held (``State/heldClaims``).
        var stored: StoredDownload
        /// The claim it runs under; every write of it goes with the lease.
        var lease: QueueLease
        /// Until when (monotonic seconds) the lease surely holds: measured from the moment the
        /// last claim or renewal that succeeded was sent.
        var leaseValidUntil: Double
        /// Whether its run has its slot: `false` while it waits for one at the core's gate
        /// (``TransferCore/admission(for:admitted:)``); it is listed as waiting until then.
        var isAdmitted = true
    }

    struct State {
        var running: [Int64: Running] = [:]
        var settings: QueueSettings
        var subscribers: [UInt64: @Sendable (QueueChange) -> Void] = [:]
        /// Subscribers that want progress of running downloads, not only changes of state.
        var progressSubscriberIDs: Set<UInt64> = []
        /// Subscribers that hear only finishes (``QueueChange/isFinish``): `haul wait` without
        /// its live display.
        var finishSubscriberIDs: Set<UInt64> = []

        /// Whether a subscriber hears every change, starts included: then ends are recorded
        /// before the starts that took their slots are told (``DownloadQueue/drainInbox()``),
        /// and admissions are made into changes. Subscribers of finishes only leave the ends to
        /// be recorded as without any.
        var hearsEveryChange: Bool { self.subscribers.count > self.finishSubscriberIDs.count }
        var nextSubscriber: UInt64 = 0
        var isShuttingDown = false
        /// Downloads whose file failed its checksum with bytes from mirrors: fetched from one
        /// URL from then on.
        var mirrorsDistrusted: Set<Int64> = []
        /// The files of list downloads just added, as inserted, until their first run takes
        /// them: that run reads none back (a row and its URL parsed again: ~8 K instructions a
        /// file).
        var addedListFiles: [Int64: [StoredListFile]] = [:]
        /// The host run of each host whose plain downloads ran here (``HostRun``), kept once made.
        var hostRuns: [String: HostRun] = [:]
        /// Every download, for lists and counts (the store is the durable copy).
        var index = DownloadIndex()
        /// The fleet's live daemons (a shared store), from the last heartbeat.
        var fleet: [DaemonPresence] = []
        /// Whether the last renewal or heartbeat reached the store.
        var storeReachable = true
        /// A read of other daemons' changes failed: the list is read again at the next heartbeat
        /// that reaches the store.
        var changesMissed = false
        /// When the lease keeper's round in progress began, and whether its length was logged.
        var keeperRound: (began: ContinuousClock.Instant, reported: Bool)?
        /// While a drain runs its batch: what it owes once the batch is saved.
        var effects: DrainEffects?
        /// With a sole-writer store, claims not written yet: the row as claimed, and as the
        /// store still has it (waiting). The download's next write saves both
        /// (`DownloadQueue+Store`); a fleet's claims are always written at once.
        var heldClaims: [Int64: HeldClaim] = [:]
        /// With a sole-writer store, rows of waiting downloads for claims without a read.
        var waitingRows: WaitingRowCache
        /// Ends of runs not recorded yet: a busy drain leaves them to the next one
        /// (``DownloadQueue/recordEnds()``).
        var unrecordedEnds: [WorkEvent] = []
    }

    /// A class, not a struct: a held claim is copied out of `heldClaims` into the write that
    /// saves it (and that write's replay), and copying two rows of 30 columns each time cost a
    /// small queued file ~21 K instructions of retains and releases (callgrind); a reference
    /// costs one.
    final class HeldClaim: Sendable {
        let claimed: StoredDownload
        let stored: StoredDownload

        init(claimed: StoredDownload, stored: StoredDownload) {
            self.claimed = claimed
            self.stored = stored
        }
    }

    package let store: any QueueStore
    /// The store as one only this daemon writes (the embedded one): claims are held in memory
    /// until the download's next write. `nil` for a fleet's shared store.
    let soleWriter: (any SoleWriterQueueStore)?
    let configuration: Configuration
    let logger: Logger
    let core: TransferCore
    let state: Mutex<State>
    /// Starts, ends and admissions waiting for the next drain (`DownloadQueue+Inbox`): a lock of
    /// its own, so that a run ending on the event loop never waits for a drain holding `state`.
    let inbox = Mutex(Inbox())
    /// Whether anyone subscribed to progress: read for every progress report of every running
    /// transfer, on the event loop, without taking `state`.
    let hasProgressSubscribers = Atomic<Bool>(false)
    /// Serialises decisions and store writes.
    let work = DispatchQueue(label: "hauld.queue")
    /// A fleet's lease renewals, reclaims and heartbeats: never queued behind `work`.
    let leaseWork = DispatchQueue(label: "hauld.leases")
    /// The timers and the change subscription of a shared store (see `DownloadQueue+Fleet`).
    let fleetDuties = FleetDuties()
    /// Changes of other daemons not applied yet (a lock of its own: the listener adds to it
    /// while a drain holds `state`).
    let storeChanges = Mutex(StoreChangeBacklog())

    /// Loads the saved settings (or defaults) and makes them the core's shared limits.
    public init(store: any QueueStore, core: TransferCore, configuration: Configuration, logger: Logger) throws {
        self.store = store
        self.soleWriter = store.isShared ? nil : store as? any SoleWriterQueueStore
        self.configuration = configuration
        self.logger = logger
        self.core = core
        let settings = try store.queueSettings() ?? QueueSettings(defaultDirectory: configuration.defaultDirectory)
        self.state = Mutex(State(settings: settings, waitingRows: WaitingRowCache(limit: self.soleWriter == nil ? 0 : configuration.waitingRowsKept)))
        core.register(self, for: .queue)
        core.setLimits(self.limits(for: settings))
    }

    /// The core's limits for `settings`: this daemon's `max-concurrent` (its override when it
    /// has one); in a fleet, its share of the global speed limit.
    func limits(for settings: QueueSettings) -> TransferCore.Limits {
        var limits = TransferCore.Limits(settings)
        if let maximum = self.configuration.maximumConcurrentOverride { limits.maximumConcurrent = maximum }
        // As many runs again (beyond those in slots) wait for a slot, each taking one on the
        // engine's loop the moment a run ends there: a queue of small files no longer waits,
        // at every end, for this queue's thread to hear of it and start the next (1,000 × 16
        // KiB on tmpfs, 31 alternating rounds: 0.1005 → 0.0917 s, CPU 100.7 → 98.3 µs a file).
        // Not in a fleet: a download started ahead is claimed, and a claim is the fleet's
        // to see; starting early there would hold downloads other daemons could run.
        limits.lookAhead = self.store.isShared ? 0 : min(16, limits.maximumConcurrent)
        if limits.globalSpeedLimit > 0 {
            let daemons = max(1, self.state.withLock { $0.fleet.count })
            limits.globalSpeedLimit = max(1, limits.globalSpeedLimit / Int64(daemons))
        }
        return limits
    }

    /// How many rows a claim that finds its own row not kept reads (its own and the next
    /// waiting ones, for the claims that follow; see ``Configuration/waitingRowsKept``).
    package static let waitingRowsRead = 64

    /// Continues what a previous daemon left active and hands every waiting download to the
    /// core's scheduler.
    public func start() throws {
        try self.store.reviveInterruptedDownloads(of: self.configuration.daemonName)
        var index = DownloadIndex()
        var waitingRows = self.state.withLock { $0.waitingRows }
        var waiting: [TransferScheduler.Entry] = []
        var promised: [StoredDownload] = []
        try self.store.forEachDownload { row in
            if row.state == .waiting, row.finalPath != nil {
                promised.append(row)
                return
            }
            index.put(row.info)
            waitingRows.saved(row)
            if row.state == .waiting { waiting.append(Self.entry(for: row)) }
        }
        // Ends whose files were placed when hauld stopped, before they were saved.
        for row in promised {
            let settled = (try? self.settlePromisedPlacement(row)) ?? row
            index.put(settled.info)
            waitingRows.saved(settled)
            if settled.state == .waiting { waiting.append(Self.entry(for: settled)) }
        }
        self.state.withLock { state in
            state.index = index
            state.waitingRows = waitingRows
        }
        self.core.enqueue(waiting)
        self.startFleet()
    }

    /// The scheduler's view of a waiting download.
    static func entry(for download: StoredDownload) -> TransferScheduler.Entry {
        TransferScheduler.Entry(
            id: TransferID(.queue, download.id!),
            host: TransferRun.hostKey(download.url),
            priority: download.priority,
            notBefore: download.notBefore?.timeIntervalSinceReferenceDate,
            order: download.queueRank
        )
    }

    // MARK: - Subscriptions

    /// Registers `handler` for every change from now on (`finishesOnly`: only downloads that
    /// complete, fail or are cancelled, and those dropped from the list); call
    /// ``unsubscribe(_:)`` with the answer when done. Called on the queue's serial queue, in
    /// order; must not block. Without `progress`, running downloads' progress is not worked out
    /// for this subscriber's sake (it still hears it when another subscriber asked for it);
    /// a subscriber of finishes never asks for it.
    ///
    /// A subscriber of every change makes a busy queue record each drain's ends at once, so that
    /// it hears of them before the starts that took their slots; one of finishes only does
    /// not (1,000 × 16 KiB, `haul add` then `haul wait -q`: see `scripts/queue-bench`).
    public func subscribe(progress: Bool = true, finishesOnly: Bool = false, _ handler: @escaping @Sendable (QueueChange) -> Void) -> UInt64 {
        self.state.withLock { state in
            state.nextSubscriber += 1
            state.subscribers[state.nextSubscriber] = handler
            if finishesOnly {
                state.finishSubscriberIDs.insert(state.nextSubscriber)
            } else if progress {
                state.progressSubscriberIDs.insert(state.nextSubscriber)
                self.hasProgressSubscribers.store(true, ordering: .relaxed)
            }
            return state.nextSubscriber
        }
    }

    /// How many subscribers the queue has now (for tests and diagnostics).
    var subscriberCount: Int { self.state.withLock { $0.subscribers.count } }

    public func unsubscribe(_ id: UInt64) {
        self.state.withLock { state in
            state.subscribers[id] = nil
            state.progressSubscriberIDs.remove(id)
            state.finishSubscriberIDs.remove(id)
            self.hasProgressSubscribers.store(!state.progressSubscriberIDs.isEmpty, ordering: .relaxed)
        }
    }

    /// Tells every subscriber about `change`: at once, or (during a drain of the inbox) once the
    /// drain's batch is saved, so that nobody hears of a change the store may not keep. With
    /// nobody subscribed, `change` is not even made (a download's info with its live numbers).
    func publish(_ change: @autoclosure () -> QueueChange) {
        guard self.state.withLock({ !$0.subscribers.isEmpty }) else { return }
        let change = change()
        let handlers = self.state.withLock { state -> [@Sendable (QueueChange) -> Void] in
            if state.effects != nil {
                state.effects!.changes.append(change)
                return []
            }
            guard !state.finishSubscriberIDs.isEmpty, !change.isFinish else { return Array(state.subscribers.values) }
            return state.subscribers.compactMap { state.finishSubscriberIDs.contains($0.key) ? nil : $0.value }
        }
        for handler in handlers { handler(change) }
    }

    // MARK: - Reading

    /// Every download not purged, with live numbers for the active ones.
    public func list() async throws -> [QueuedDownloadInfo] {
        try await self.list(QueuePage()).downloads
    }

    /// One page of the list (oldest first), filtered by state and name, with the count of all
    /// that match.
    public func list(_ page: QueuePage) async throws -> (downloads: [QueuedDownloadInfo], total: Int) {
        let (records, total) = self.records(page)
        return (try Self.decoder.decode([QueuedDownloadInfo].self, from: Data(DownloadRecord.array(records, fields: nil))), total)
    }

    /// One page of the list as JSON records, and the count of all that match: answered from
    /// memory, encoding only the running downloads again (their live numbers).
    public func records(_ page: QueuePage) -> (records: [DownloadRecord], total: Int) {
        let page = self.state.withLock { Self.page(page, of: &$0) }
        return (self.records(of: page), page.total)
    }

    /// ``records(_:)`` and the settings, read together (a `queueList` answer).
    func recordsAndSettings(_ page: QueuePage) -> (records: [DownloadRecord], total: Int, settings: QueueSettings) {
        let page = self.state.withLock { Self.page(page, of: &$0) }
        return (self.records(of: page), page.total, page.settings)
    }

    /// ``recordsAndSettings(_:)``, or `nil` when the queue's state is locked right now (a drain
    /// or an add of many holds it for up to milliseconds): for the event loop, which carries
    /// every transfer and must not wait for it (nor to keep the records it made).
    func recordsIfUnlocked(_ page: QueuePage) -> (records: [DownloadRecord], total: Int, settings: QueueSettings)? {
        guard let page = self.state.withLockIfAvailable({ Self.page(page, of: &$0) }) else { return nil }
        return (self.records(of: page, waitsToKeep: false), page.total, page.settings)
    }

    private struct ListedPage {
        var entries: [DownloadIndex.Entry]
        var total: Int
        var running: [Int64: Running]
        var settings: QueueSettings
    }

    private static func page(_ page: QueuePage, of state: inout State) -> ListedPage {
        let (entries, total) = state.index.page(page)
        return ListedPage(entries: entries, total: total, running: state.running, settings: state.settings)
    }

    /// The page's records, made outside the queue's lock: a running download's from its live
    /// numbers, any other's as kept, or made now and then kept (``keep(_:_:waits:)``).
    private func records(of page: ListedPage, waitsToKeep: Bool = true) -> [DownloadRecord] {
        var records: [DownloadRecord] = []
        records.reserveCapacity(page.entries.count)
        var made: [(position: Int, revision: DownloadIndex.Revision)] = []
        for entry in page.entries {
            if let live = page.running[entry.id] {
                records.append(DownloadRecord(Self.overlay(live.stored.info, live: live)))
                continue
            }
            records.append(Self.record(from: entry.recordSource, at: records.count, made: &made))
        }
        self.keep(records, made, waits: waitsToKeep)
        return records
    }

    /// The record `source` names: as kept, or made now from its info (noted in `made` at
    /// `position`, for ``keep(_:_:waits:)``).
    private static func record(
        from source: DownloadIndex.RecordSource,
        at position: Int,
        made: inout [(position: Int, revision: DownloadIndex.Revision)]
    ) -> DownloadRecord {
        switch source {
        case .kept(let record):
            return record
        case .info(let info, let revision):
            made.append((position, revision))
            return DownloadRecord(info)
        }
    }

    /// Hands the records made outside the lock back to the index (each kept only if no put
    /// replaced its entry meanwhile); without `waits`, only if the lock is free now.
    private func keep(_ records: [DownloadRecord], _ made: [(position: Int, revision: DownloadIndex.Revision)], waits: Bool = true) {
        guard !made.isEmpty else { return }
        if waits {
            self.state.withLock { $0.index.keep(records, made) }
        } else {
            _ = self.state.withLockIfAvailable { $0.index.keep(records, made) }
        }
    }

    /// The JSON records of `infos` as the list has them (written once, when they changed):
    /// read from the index under the queue's lock, made outside it (an add's answer of 10,000
    /// held the lock every transfer's end takes for ~114 M instructions, ~35 ms on the 2-core
    /// test machine), then kept for later lists.
    public func records(of infos: [QueuedDownloadInfo]) -> [DownloadRecord] {
        let sources = self.state.withLock { state in infos.map { state.index.recordSource(id: $0.id) } }
        var records: [DownloadRecord] = []
        records.reserveCapacity(infos.count)
        var made: [(position: Int, revision: DownloadIndex.Revision)] = []
        for index in infos.indices {
            records.append(sources[index].map { Self.record(from: $0, at: index, made: &made) } ?? DownloadRecord(infos[index]))
        }
        self.keep(records, made)
        return records
    }

    private static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }()

    public func download(id: Int64) async throws -> QueuedDownloadInfo {
        try await self.onWork {
            // A running download as the queue has it (its claim may not be written yet).
            if let running = self.state.withLock({ $0.running[id]?.stored }) { return self.info(for: running) }
            return try self.info(for: self.existing(id, includingRemoved: true))
        }
    }

    public var settings: QueueSettings { self.state.withLock { $0.settings } }

    /// Runs started ahead of a free slot and waiting for one (at the core's gate, or in their
    /// host run's line), for tests and diagnostics.
    var standbyCount: Int { self.state.withLock { $0.running.values.count { !$0.isAdmitted } } }

    /// Downloads the host runs started since the queue did (``HostRun``), for tests and
    /// diagnostics.
    var hostRunStarts: Int { self.state.withLock { Array($0.hostRuns.values) }.reduce(0) { $0 + $1.counts.started } }

    func info(for download: StoredDownload) -> QueuedDownloadInfo {
        guard let running = self.state.withLock({ $0.running[download.id!] }) else { return download.info }
        return Self.overlay(download.info, live: running)
    }

    /// A running download as listed: waiting until its run has its slot at the core's gate
    /// (``Running/isAdmitted``), active from then on.
    static func listed(_ info: QueuedDownloadInfo, admitted: Bool) -> QueuedDownloadInfo {
        guard !admitted, info.state == .active else { return info }
        var info = info
        info.state = .waiting
        return info
    }

    /// `info` with the live numbers of its running transfer, listed as ``listed(_:admitted:)``
    /// says.
    static func overlay(_ info: QueuedDownloadInfo, live running: Running) -> QueuedDownloadInfo {
        Self.overlay(info, live: running.transfer, standby: !running.isAdmitted)
    }

    static func overlay(_ info: QueuedDownloadInfo, live transfer: TrackedTransfer, standby: Bool) -> QueuedDownloadInfo {
        var info = Self.listed(info, admitted: !standby)
        info.bytesDone = transfer.bytesDone
        info.totalBytes = transfer.totalBytes ?? info.totalBytes
        if info.fileName == nil { info.fileName = transfer.suggestedName }
        let rate = transfer.rate
        info.speed = rate.speed
        info.secondsRemaining = rate.secondsRemaining
        let connections = transfer.connectionCount
        info.connections = connections > 0 ? connections : nil
        if let map = transfer.segmentMap() { info.segments = map.done }
        let sources = transfer.sourceReports
        if sources.count > 1 { info.sources = sources }
        return info
    }

    /// Download `id` as stored, for a change based on it: a claim held in memory is written
    /// first. A cancelled (`removed`) download is history: only what shows or drops it asks
    /// for it (`includingRemoved`); anything else finds no such download.
    func existing(_ id: Int64, includingRemoved: Bool = false) throws -> StoredDownload {
        try self.saveHeldClaim(id)
        guard let download = try self.store.download(id: id), includingRemoved || download.state != .removed else {
            throw DaemonError("no download with id \(id) (see 'haul ls')")
        }
        return download
    }

    // MARK: - Commands

    /// Queues a download of `urls` (the first is the primary, the rest mirrors). `nil` takes the
    /// default: the queue's directory, the server's name for the file, no checksum, no speed
    /// limit of its own, priority 0.
    ///
    /// - Throws: ``DaemonError`` for a URL that is not http(s), a file name that is not a plain
    ///   name, a checksum that does not parse, or a directory that cannot be created or written.
    public func add(
        urls: [URL],
        directory: String? = nil,
        fileName: String? = nil,
        checksum: String? = nil,
        speedLimit: Int64? = nil,
        priority: Int? = nil,
        paused: Bool = false
    ) async throws -> QueuedDownloadInfo {
        let request = NewDownload(
            urls: urls,
            directory: directory,
            fileName: fileName,
            checksum: checksum,
            speedLimit: speedLimit,
            priority: priority,
            paused: paused
        )
        return try await self.add([request])[0]
    }

    /// Queues many downloads in one transaction: all or none. Every request is checked first;
    /// the first bad one fails the batch with its position in the message.
    public func add(_ requests: [NewDownload]) async throws -> [QueuedDownloadInfo] {
        guard !requests.isEmpty else { throw DaemonError("queueAdd needs at least one download") }
        if requests.contains(where: { $0.list != nil }), self.store.isShared {
            throw DaemonError("list downloads need hauld's own store; a fleet's daemons queue each file as a download")
        }
        let defaultDirectory = self.settings.defaultDirectory
        var prepared: Set<String> = []
        var rows: [StoredDownload] = []
        var chosenGIDs: Set<String> = []
        rows.reserveCapacity(requests.count)
        let gids = DownloadGID.random(count: requests.count)
        for (index, request) in requests.enumerated() {
            do {
                let directory = request.directory ?? defaultDirectory
                if prepared.insert(directory).inserted { try Self.prepareDirectory(directory) }
                let row = try Self.validated(request, directory: directory, gid: gids[index])
                if request.gid != nil, !chosenGIDs.insert(row.gid).inserted { throw DaemonError("GID \(row.gid) is not unique") }
                rows.append(row)
            } catch let error as DaemonError where requests.count > 1 {
                throw DaemonError("download \(index + 1) of \(requests.count): \(error.description)")
            }
        }
        let newRows = rows
        return try await self.onWork {
            // Ids the daemon picked are random 64-bit numbers: a clash is drawn again; one a
            // client chose must be free.
            var rows = newRows
            try self.state.withLock { state in
                for position in rows.indices where state.index.id(gid: rows[position].gid) != nil {
                    if requests[position].gid != nil { throw DaemonError("GID \(rows[position].gid) is not unique") }
                    repeat { rows[position].gid = DownloadGID.random() } while state.index.id(gid: rows[position].gid) != nil
                }
            }
            // A list's files go in with its row (``TransferStore/insert(_:files:)``).
            var files: [Int: [URL]] = [:]
            for (index, request) in requests.enumerated() { if let list = request.list { files[index] = list } }
            let (inserted, infos) = try self.insertDownloads(rows, files: files)
            if inserted.count == 1 {
                self.logger.info("queued download \(inserted[0].id!): \(inserted[0].urls[0].absoluteString) → \(inserted[0].directory)")
            } else {
                self.logger.info("queued \(inserted.count) downloads (\(inserted.first!.id!)…\(inserted.last!.id!))")
            }
            if !files.isEmpty {
                self.state.withLock { state in
                    for (index, urls) in files where inserted[index].state == .waiting {
                        state.addedListFiles[inserted[index].id!] = urls.enumerated().map { StoredListFile(position: $0.offset, url: $0.element) }
                    }
                }
            }
            for info in infos { self.publish(.changed(info)) }
            self.core.enqueue(inserted.filter { $0.state == .waiting }.map(Self.entry(for:)))
            return infos
        }
    }

    /// Checks one request and makes its row, with `gid` unless the request chose one.
    private static func validated(_ request: NewDownload, directory: String, gid random: String) throws -> StoredDownload {
        if let list = request.list {
            // One download, many files: each file is named by its server or URL, has one URL,
            // and takes one connection.
            guard !list.isEmpty else { throw DaemonError("a list download needs at least one URL") }
            guard request.urls.isEmpty else { throw DaemonError("a list download gives its files' URLs in 'list', not 'urls' (no mirrors)") }
            guard request.fileName == nil, request.checksum == nil, request.connections == nil else {
                throw DaemonError("a list download takes no file name, checksum or connections (its files are named by their servers)")
            }
            var single = request
            single.list = nil
            single.urls = list
            var download = try Self.validated(single, directory: directory, gid: random)
            download.urls = [list[0]]
            download.fileCount = list.count
            download.fileName = nil
            return download
        }
        guard !request.urls.isEmpty else { throw DaemonError("add needs at least one URL") }
        for url in request.urls {
            guard url.isHTTPWithHost else {
                throw DaemonError("not an http or https URL: \(url.absoluteString)")
            }
        }
        if let fileName = request.fileName {
            guard let sanitized = FileNaming.sanitize(fileName), sanitized == fileName else {
                throw DaemonError("'\(fileName)' is not a plain file name (no '/', no '..', not empty)")
            }
        }
        let spec: ChecksumSpec?
        do { spec = try request.checksum.map { try ChecksumSpec(parsing: $0) } } catch { throw DaemonError("bad checksum: \(error)") }
        if let speedLimit = request.speedLimit, speedLimit < 0 { throw DaemonError("a speed limit cannot be negative") }
        var gid = random
        if let chosen = request.gid {
            guard let normalized = DownloadGID.normalized(chosen), normalized != "0000000000000000" else {
                throw DaemonError("'\(chosen)' is not a GID (16 hex digits)")
            }
            gid = normalized
        }
        for line in request.requestHeaders ?? [] {
            guard let colon = line.firstIndex(of: ":"), colon != line.startIndex, !line.contains("\r"), !line.contains("\n") else {
                throw DaemonError("'\(line)' is not a header line ('Name: value')")
            }
        }
        var download = StoredDownload(
            urls: request.urls,
            directory: directory,
            requestedName: request.fileName,
            checksum: spec?.description,
            priority: request.priority ?? 0,
            speedLimit: request.speedLimit ?? 0
        )
        download.gid = gid
        download.requestHeaders = request.requestHeaders ?? []
        download.options = request.options ?? [:]
        if let connections = request.connections {
            guard (1...64).contains(connections) else { throw DaemonError("connections must be from 1 to 64, not \(connections)") }
            download.connections = connections
        }
        download.fileName = request.fileName ?? FileNaming.suggestedFilename(contentDisposition: nil, url: request.urls[0])
        if request.paused { download.state = .paused }
        return download
    }

    /// Checks that `directory` is an absolute path that exists (or can be made) and can be written.
    static func prepareDirectory(_ directory: String) throws {
        guard directory.hasPrefix("/") else { throw DaemonError("the directory must be an absolute path: \(directory)") }
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else { throw DaemonError("\(directory) is not a directory") }
        } else {
            do {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            } catch {
                throw DaemonError("cannot create the directory \(directory): \((error as NSError).localizedDescription)")
            }
        }
        guard access(directory, W_OK | X_OK) == 0 else {
            throw DaemonError("cannot write to \(directory): \(String(cString: strerror(errno)))")
        }
    }

    /// Pauses a waiting or active download, keeping its bytes.
    public func pause(id: Int64) async throws {
        try await self.onWork {
            let download = try self.existing(id)
            guard download.state.canPause else {
                if download.state == .paused { return }
                throw DaemonError("download \(id) is \(download.state.rawValue); only waiting or active downloads can be paused")
            }
            _ = try self.pauseLocked([id])
        }
    }

    /// Puts a paused or failed download back in the queue.
    public func resume(id: Int64) async throws {
        try await self.onWork {
            let download = try self.existing(id)
            guard download.state.canResume else {
                if download.state == .waiting || download.state == .active { return }
                throw DaemonError("download \(id) is \(download.state.rawValue); only paused or failed downloads can be resumed")
            }
            _ = try self.resumeLocked([id])
        }
    }

    /// Pauses the downloads of `ids` that can be (all of them when `nil`); returns how many
    /// changed. One transaction, however many.
    public func pause(ids: [Int64]?) async throws -> Int {
        try await self.onWork {
            let candidates = ids ?? self.state.withLock { $0.index.ids(in: [.waiting, .active]) }
            return try self.pauseLocked(candidates)
        }
    }

    /// Resumes the paused or failed downloads of `ids` (every paused one when `nil`).
    public func resume(ids: [Int64]?) async throws -> Int {
        try await self.onWork {
            let candidates = ids ?? self.state.withLock { $0.index.ids(in: [.paused]) }
            return try self.resumeLocked(candidates)
        }
    }

    /// Drops the downloads of `ids` from the list (cancelling those in progress); returns how
    /// many were dropped. Unknown ids are skipped.
    public func remove(ids: [Int64]) async throws -> Int {
        var removed = 0
        for id in ids where (try? await self.cancel(id: id, deleteFromList: true)) != nil { removed += 1 }
        return removed
    }

    /// How many downloads are in each state, for tab and filter counts.
    public func stateCounts() -> [QueuedDownloadState: Int] {
        self.state.withLock { $0.index.stateCounts }
    }

    public func pauseAll() async throws -> Int { try await self.pause(ids: nil) }
    public func resumeAll() async throws -> Int { try await self.resume(ids: nil) }

    private func pauseLocked(_ ids: [Int64]) throws -> Int {
        let changed = try self.updateDownloads(ids: ids) { download in
            guard download.state.canPause else { return false }
            download.state = .paused
            return true
        }
        var withdrawn: [TransferID] = []
        for download in changed {
            let id = download.id!
            if let run = self.stopRunning(id, intent: .pause) {
                run.stop(.pause)
            } else {
                withdrawn.append(TransferID(.queue, id))
            }
            self.publish(.changed(self.info(for: download)))
        }
        // One scheduler decision for the lot (pausing 100,000 is one pass, not 100,000).
        self.core.withdraw(withdrawn)
        return changed.count
    }

    private func resumeLocked(_ ids: [Int64]) throws -> Int {
        let changed = try self.updateDownloads(ids: ids) { download in
            guard download.state.canResume else { return false }
            download.state = .waiting
            download.errorMessage = nil
            download.errorCode = nil
            download.failedAttempts = 0
            download.notBefore = nil
            if download.urlIndex >= download.urls.count { download.urlIndex = 0 }
            return true
        }
        for download in changed { self.publish(.changed(self.info(for: download))) }
        self.core.enqueue(changed.map(Self.entry(for:)))
        return changed.count
    }

    /// Stops a download for good and deletes its partial file. It stays listed (as removed
    /// until purged) unless `deleteFromList`; a completed file is never deleted.
    public func cancel(id: Int64, deleteFromList: Bool = false) async throws {
        try await self.onWork {
            // A cancelled one is listed until dropped: `haul rm` drops it, a second cancel says so.
            let download = try self.existing(id, includingRemoved: true)
            if download.state == .complete || (!download.state.isInProgress && download.state != .error) {
                guard deleteFromList else {
                    throw DaemonError("download \(id) is \(download.state.rawValue); use 'haul rm \(id)' to drop it from the list")
                }
                try self.deleteDownload(id: id)
                self.publish(.removed(id: id))
                return
            }
            if let run = self.stopRunning(id, intent: .remove(deleteRow: deleteFromList)) {
                try self.setState(id, .removed)
                run.stop(.cancel)
                return
            }
            self.core.withdraw(TransferID(.queue, id))
            // A download another daemon of the fleet runs: that daemon stops it and deletes
            // its partial file when it hears of the change.
            let runsElsewhere = download.runner != nil && download.runner != self.configuration.daemonName
            try self.discard(id, partialPath: runsElsewhere ? nil : download.partialPath, deleteRow: deleteFromList)
        }
    }

    /// The end of a cancelled download: its partial file goes, and its row either goes too
    /// (subscribers hear `removed`) or stays as `removed` until purged (they hear it changed, as
    /// lists show it: among the finished).
    func discard(_ id: Int64, partialPath: String?, deleteRow: Bool) throws {
        if let partialPath { unlink(partialPath) }
        self.state.withLock { _ = $0.addedListFiles.removeValue(forKey: id) }
        if deleteRow {
            try self.deleteDownload(id: id)
            self.publish(.removed(id: id))
        } else {
            let updated = try self.updateDownload(id: id) { download in
                download.state = .removed
                download.bytesDone = 0
                download.finishedAt = Date()
            }
            if let updated { self.publish(.changed(self.info(for: updated))) } else { self.publish(.removed(id: id)) }
        }
    }

    /// Drops finished, failed and cancelled downloads from the history (their files stay).
    public func purge() async throws -> Int {
        try await self.onWork {
            let gone = try self.purgeFinishedDownloads()
            for id in gone { self.publish(.removed(id: id)) }
            return gone.count
        }
    }

    /// A page of list download `page.downloadID`'s files as the store has them (a file is
    /// `done` once its batch is saved), the number of those in `page.states`, and how many are
    /// in each state.
    public func files(_ page: DaemonRequest.FilesPage) async throws -> (files: [ListFileInfo], total: Int, counts: ListFileCounts) {
        try await self.onWork {
            let download = try self.existing(page.downloadID, includingRemoved: true)
            guard download.isList, let lists = self.store as? TransferStore else {
                throw DaemonError("download \(page.downloadID) is one file, not a list")
            }
            var counts = ListFileCounts()
            let wanted = page.states.map(Set.init)
            var matching: [ListFileInfo] = []
            for file in try lists.files(of: page.downloadID) {
                switch file.state {
                case .waiting: counts.waiting += 1
                case .done: counts.done += 1
                case .failed: counts.failed += 1
                }
                if wanted?.contains(file.state) ?? true { matching.append(file) }
            }
            let start = min(page.offset, matching.count)
            let end = page.limit.map { min(matching.count, start + $0) } ?? matching.count
            return (Array(matching[start..<end]), matching.count, counts)
        }
    }

    /// Replaces the primary URL of a waiting, paused or failed download (a fresh signed link).
    /// Its bytes are kept; the next request sends `If-Range` with the validators on record, so
    /// they are reused when the entity is the same and fetched again when it is not.
    public func setURL(id: Int64, url: URL) async throws -> QueuedDownloadInfo {
        guard url.isHTTPWithHost else {
            throw DaemonError("not an http or https URL: \(url.absoluteString)")
        }
        return try await self.onWork {
            let download = try self.existing(id)
            guard !download.isList else { throw DaemonError("download \(id) is a list of \(download.fileCount ?? 0) files; their URLs cannot be changed") }
            // Listed as waiting, so changed as a waiting one.
            let standby = self.requeue(id, onlyIfWaiting: true) == .stopped
            guard download.state == .waiting || download.state == .paused || download.state == .error || standby else {
                throw DaemonError("download \(id) is \(download.state.rawValue); pause it before changing its URL")
            }
            guard let updated = try self.updateDownload(id: id, { download in
                download.urls[0] = url
                download.urlIndex = 0
                download.currentURL = nil
            }) else { throw DaemonError("no download with id \(id)") }
            // A waiting download may now belong to another host.
            if updated.state == .waiting { self.core.enqueue(Self.entry(for: updated)) }
            let info = self.info(for: updated)
            self.publish(.changed(info))
            return info
        }
    }

    /// Changes a global setting (`max-concurrent`, `max-per-host`, `speed-limit`, `dir`).
    public func set(_ key: String, to value: String) async throws -> QueueSettings {
        try await self.onWork {
            var settings = self.settings
            do { try settings.set(key, to: value) } catch { throw DaemonError("\(error)") }
            if key == "dir" { try Self.prepareDirectory(settings.defaultDirectory) }
            try self.store.save(settings)
            self.state.withLock { $0.settings = settings }
            // The limits are the core's: background sessions share them.
            self.core.setLimits(self.limits(for: settings))
            self.logger.info("setting \(key) = \(value)")
            self.publish(.settings(settings))
            return settings
        }
    }

    /// Changes one download's speed limit (bytes per second, 0 for none), at once when it runs.
    public func setSpeedLimit(id: Int64, bytesPerSecond: Int64) async throws -> QueuedDownloadInfo {
        guard bytesPerSecond >= 0 else { throw DaemonError("a speed limit cannot be negative") }
        return try await self.onWork {
            _ = try self.existing(id)
            guard let updated = try self.updateDownload(id: id, { $0.speedLimit = bytesPerSecond }) else {
                throw DaemonError("no download with id \(id)")
            }
            self.state.withLock { $0.running[id]?.transfer.speedLimiter }?.setRate(bytesPerSecond: bytesPerSecond)
            let info = self.info(for: updated)
            self.publish(.changed(info))
            return info
        }
    }

    // MARK: - Helpers

    /// Runs `body` on the serial queue and returns its result.
    func onWork<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            self.work.async { continuation.resume(with: Result { try body() }) }
        }
    }

    func onWork(_ body: @escaping @Sendable () -> Void) async {
        await withCheckedContinuation { continuation in
            self.work.async {
                body()
                continuation.resume()
            }
        }
    }

    func setState(_ id: Int64, _ state: QueuedDownloadState) throws {
        if let updated = try self.updateDownload(id: id, { $0.state = state }) {
            self.publish(.changed(self.info(for: updated)))
        }
    }

    /// What ``requeue(_:onlyIfWaiting:)`` did.
    enum RequeueOutcome {
        /// Its run stops; the download waits again once its end is handled.
        case stopped
        /// Its run holds its slot (it may be fetching) and runs on: asked only while waiting.
        case holdsSlot
        /// Nothing runs it, or its run is stopping already for another reason (paused,
        /// removed, no longer this daemon's), which its end keeps.
        case notRunning
    }

    /// Stops the run of download `id` so that it waits again (a yield, or a change to a
    /// download listed as waiting: its URL, its place in the queue); `onlyIfWaiting`: only while
    /// its run still waits for its slot (``TransferRun/stopUnlessAdmitted(_:)``). On `work`: its
    /// end, handled there too, finds the intent set.
    func requeue(_ id: Int64, onlyIfWaiting: Bool) -> RequeueOutcome {
        dispatchPrecondition(condition: .onQueue(self.work))
        guard let run = self.state.withLock({ state in state.running[id].flatMap { $0.intent == nil ? $0.run : nil } }) else { return .notRunning }
        if onlyIfWaiting {
            guard run.stopUnlessAdmitted(.pause) else { return .holdsSlot }
        } else {
            run.stop(.pause)
        }
        _ = self.stopRunning(id, intent: .requeue)
        return .stopped
    }

    /// Marks a running download as stopping for `intent`; returns its run to stop.
    func stopRunning(_ id: Int64, intent: StopIntent) -> QueueRun? {
        self.state.withLock { state in
            guard state.running[id] != nil else { return nil }
            state.running[id]!.intent = intent
            return state.running[id]!.run
        }
    }
}

extension DownloadQueue {
    /// `$XDG_DOWNLOAD_DIR`, else `~/Downloads`.
    public static func defaultDownloadDirectory(_ environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let xdg = environment["XDG_DOWNLOAD_DIR"], xdg.hasPrefix("/") { return xdg }
        let home = environment["HOME"] ?? NSHomeDirectory()
        return (home as NSString).appendingPathComponent("Downloads")
    }
}

extension DownloadIndex {
    /// Keeps each record of `records` named in `made` (by its position) as its entry's, if no
    /// put replaced the entry since the record's source was read (``keep(_:madeFrom:)``).
    fileprivate mutating func keep(_ records: [DownloadRecord], _ made: [(position: Int, revision: Revision)]) {
        for (position, revision) in made { self.keep(records[position], madeFrom: revision) }
    }
}
