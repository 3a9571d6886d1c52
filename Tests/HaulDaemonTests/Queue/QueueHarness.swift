import Foundation
import HaulCore
import HaulDaemon
import HaulStore
import Logging
import Synchronization

/// A ``DownloadQueue`` on a real SQLite file in a temporary directory, with fast retries, and
/// a record of every change it published.
final class QueueHarness: Sendable {
    let root: URL
    let downloads: URL
    let storePath: String
    let queue: DownloadQueue
    let core: TransferCore
    private let changes = Mutex<[QueueChange]>([])
    /// The most downloads seen active at once.
    let peakActive = Mutex(0)
    private let activeNow = Mutex<Set<Int64>>([])

    init(
        root: URL? = nil,
        store makeStore: (TransferStore) -> any QueueStore = { $0 },
        logHandler: (any LogHandler)? = nil,
        configure: (inout DownloadQueue.Configuration) -> Void = { _ in }
    ) throws {
        let root = root ?? FileManager.default.temporaryDirectory.appendingPathComponent("haul-queue-\(UUID().uuidString)")
        self.root = root
        self.downloads = root.appendingPathComponent("downloads")
        self.storePath = root.appendingPathComponent("store.sqlite").path
        try FileManager.default.createDirectory(at: self.downloads, withIntermediateDirectories: true)
        var configuration = DownloadQueue.Configuration(defaultDirectory: self.downloads.path)
        configuration.retryPolicy = RetryPolicy(maximumAttempts: 3, initialDelay: 0.05, maximumDelay: 0.2, maximumRetryAfter: 2, retriesRefusedConnections: true)
        configure(&configuration)
        var logger = logHandler.map { handler in Logger(label: "queue-test") { _ in handler } } ?? Logger(label: "queue-test")
        logger.logLevel = .warning
        var coreConfiguration = TransferCore.Configuration()
        coreConfiguration.idleTimeout = .seconds(5)
        self.core = TransferCore(limits: .init(QueueSettings(defaultDirectory: "/")), configuration: coreConfiguration, logger: logger)
        self.queue = try DownloadQueue(store: makeStore(try TransferStore.open(path: self.storePath)), core: self.core, configuration: configuration, logger: logger)
        _ = self.queue.subscribe { [weak self] change in
            guard let self else { return }
            self.changes.withLock { $0.append(change) }
            guard case .changed(let info) = change else { return }
            let count = self.activeNow.withLock { active in
                if info.state == .active { active.insert(info.id) } else { active.remove(info.id) }
                return active.count
            }
            self.peakActive.withLock { $0 = max($0, count) }
        }
        try self.queue.start()
    }

    /// A harness on the store `make` wraps around the embedded one, and that store, for a test
    /// to inject faults through or read what it saw.
    static func wrapping<Store: QueueStore>(
        _ make: (TransferStore) -> Store,
        logHandler: (any LogHandler)? = nil,
        configure: (inout DownloadQueue.Configuration) -> Void = { _ in }
    ) throws -> (QueueHarness, Store) {
        var made: Store?
        let harness = try QueueHarness(store: { inner in
            let store = make(inner)
            made = store
            return store
        }, logHandler: logHandler, configure: configure)
        return (harness, made!)
    }

    /// Waits until download `id` is in `state` (or a final state), returning its info.
    func wait(for id: Int64, _ state: QueuedDownloadState, timeout: Duration = .seconds(30)) async throws -> QueuedDownloadInfo {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let info = try await self.queue.download(id: id)
            if info.state == state { return info }
            if !info.state.isInProgress, state.isInProgress || info.state != state {
                throw QueueTestError("download \(id) ended \(info.state.rawValue) (\(info.errorMessage ?? "")) while waiting for \(state.rawValue)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw QueueTestError("download \(id) did not become \(state.rawValue) in time")
    }

    /// Waits until `count` downloads are listed active (each run has its slot at the core's
    /// gate by then), returning their ids in order; what is active when `timeout` passes
    /// otherwise.
    func active(count: Int, timeout: Duration = .seconds(10)) async throws -> [Int64] {
        let deadline = ContinuousClock.now + timeout
        while true {
            let active = try await self.queue.list().filter { $0.state == .active }.map(\.id).sorted()
            if active.count == count || ContinuousClock.now >= deadline { return active }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    /// Waits until `condition` holds for download `id`.
    func wait(for id: Int64, timeout: Duration = .seconds(30), until condition: (QueuedDownloadInfo) -> Bool) async throws -> QueuedDownloadInfo {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let info = try await self.queue.download(id: id)
            if condition(info) { return info }
            try await Task.sleep(for: .milliseconds(10))
        }
        throw QueueTestError("download \(id): condition not met in time")
    }

    var published: [QueueChange] { self.changes.withLock { $0 } }

    func files() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: self.downloads.path)) ?? []).sorted()
    }

    func close() async {
        await self.core.shutdown()
    }
}

struct QueueTestError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// The embedded store, whose batches fail to commit when they hold what the test names: the
/// first claim of a download in `failClaimBatches`, the first change under a lease of one in
/// `failUpdateBatches` (a run's end). The batch's body runs in a real transaction that is then
/// rolled back, as SQLite does when a commit fails. Replays (calls outside a batch) can be made
/// to fail once per download too. Everything else is the embedded store's.
final class FlakyBatchStore: QueueStore {
    let inner: TransferStore
    /// Batches made to fail.
    let failedBatches = Mutex(0)
    /// What still fails its batch.
    private let failClaimBatches: Mutex<Set<Int64>>
    private let failUpdateBatches: Mutex<Set<Int64>>
    /// Downloads whose claim's batch has not failed yet.
    var claimBatchesLeftToFail: Set<Int64> { self.failClaimBatches.withLock { $0 } }
    /// Downloads whose next claim outside a batch (a replay) fails once.
    let failingClaims: Mutex<Set<Int64>>
    /// Downloads whose next change under a lease outside a batch (a replay) fails once.
    let failingUpdates: Mutex<Set<Int64>>
    private let inBatch = Mutex(false)
    private let poisoned = Mutex(false)

    struct CommitFailed: Error, CustomStringConvertible {
        var description: String { "disk I/O error (injected)" }
    }

    init(
        _ inner: TransferStore,
        failClaimBatches: Set<Int64> = [],
        failUpdateBatches: Set<Int64> = [],
        failingClaims: Set<Int64> = [],
        failingUpdates: Set<Int64> = []
    ) {
        self.inner = inner
        self.failClaimBatches = Mutex(failClaimBatches)
        self.failUpdateBatches = Mutex(failUpdateBatches)
        self.failingClaims = Mutex(failingClaims)
        self.failingUpdates = Mutex(failingUpdates)
    }

    func batch<T>(_ body: () throws -> T) throws -> T {
        self.inBatch.withLock { $0 = true }
        self.poisoned.withLock { $0 = false }
        defer { self.inBatch.withLock { $0 = false } }
        return try self.inner.batch {
            let result = try body()
            if self.poisoned.withLock({ $0 }) {
                self.failedBatches.withLock { $0 += 1 }
                throw CommitFailed()
            }
            return result
        }
    }

    /// Whether this change of download `id` under a lease fails (see `inject`).
    func injectsUpdateFailure(_ id: Int64) -> Bool {
        self.inject(id, batches: self.failUpdateBatches, replays: self.failingUpdates)
    }

    /// Inside a batch: marks it to fail when `id` is still in `set` (once per download).
    /// Outside: whether this call is to fail (a replay of a download in `replays`, once).
    private func inject(_ id: Int64, batches set: borrowing Mutex<Set<Int64>>, replays: borrowing Mutex<Set<Int64>>) -> Bool {
        if self.inBatch.withLock({ $0 }) {
            if set.withLock({ $0.remove(id) != nil }) { self.poisoned.withLock { $0 = true } }
            return false
        }
        return replays.withLock { $0.remove(id) != nil }
    }

    var storeDescription: String { self.inner.storeDescription }
    var isShared: Bool { self.inner.isShared }
    func download(id: Int64) throws -> StoredDownload? { try self.inner.download(id: id) }
    func downloads(ids: [Int64]) throws -> [StoredDownload] { try self.inner.downloads(ids: ids) }
    func forEachDownload(_ body: (StoredDownload) throws -> Void) throws { try self.inner.forEachDownload(body) }
    func updateDownload(id: Int64, _ change: @Sendable (inout StoredDownload) throws -> Void) throws -> StoredDownload? {
        try self.inner.updateDownload(id: id, change)
    }
    func updateDownload(id: Int64, lease: QueueLease, release: Bool, last: StoredDownload?, _ change: @Sendable (inout StoredDownload) throws -> Void) throws -> StoredDownload? {
        if self.inject(id, batches: self.failUpdateBatches, replays: self.failingUpdates) { throw CommitFailed() }
        return try self.inner.updateDownload(id: id, lease: lease, release: release, last: last, change)
    }
    func confirmLease(id: Int64, lease: QueueLease) throws { try self.inner.confirmLease(id: id, lease: lease) }
    func claim(_ claim: QueueClaim, _ change: @Sendable (inout StoredDownload) throws -> Void) throws -> QueueClaimOutcome {
        if self.inject(claim.downloadID, batches: self.failClaimBatches, replays: self.failingClaims) { throw CommitFailed() }
        return try self.inner.claim(claim, change)
    }
    func renewLeases(_ leases: [Int64: QueueLease], seconds: Double) throws -> Set<Int64> { try self.inner.renewLeases(leases, seconds: seconds) }
    func reclaimExpiredLeases() throws -> [(download: StoredDownload, previousHolder: String)] { try self.inner.reclaimExpiredLeases() }
    func heartbeat(daemon: String, pid: Int32, startedAt: Date, liveSeconds: Double) throws -> [DaemonPresence] {
        try self.inner.heartbeat(daemon: daemon, pid: pid, startedAt: startedAt, liveSeconds: liveSeconds)
    }
    func leave(daemon: String) throws { try self.inner.leave(daemon: daemon) }
    func observeChanges(_ handler: @escaping @Sendable (QueueStoreChange) -> Void) -> (any QueueStoreObservation)? {
        self.inner.observeChanges(handler)
    }
    func updateDownloads(ids: [Int64], _ change: (inout StoredDownload) throws -> Bool) throws -> [StoredDownload] {
        try self.inner.updateDownloads(ids: ids, change)
    }
    func insert(_ downloads: [StoredDownload]) throws -> [StoredDownload] { try self.inner.insert(downloads) }
    func reviveInterruptedDownloads(of daemon: String) throws { try self.inner.reviveInterruptedDownloads(of: daemon) }
    func purgeFinishedDownloads() throws -> Int { try self.inner.purgeFinishedDownloads() }
    func deleteDownload(id: Int64) throws { try self.inner.deleteDownload(id: id) }
    func queueSettings() throws -> QueueSettings? { try self.inner.queueSettings() }
    func save(_ settings: QueueSettings) throws { try self.inner.save(settings) }
}

/// ``FlakyBatchStore`` as a store only this daemon writes: the queue holds its claims in
/// memory and saves each with the download's next write, where the failures are injected as
/// for any change under a lease.
final class FlakySoleWriterStore: SoleWriterQueueStore, ForwardingQueueStore {
    let flaky: FlakyBatchStore

    init(_ flaky: FlakyBatchStore) { self.flaky = flaky }

    func updateDownload(_ current: StoredDownload, stored: StoredDownload, _ change: (inout StoredDownload) throws -> Void) throws -> StoredDownload {
        if let id = current.id, self.flaky.injectsUpdateFailure(id) { throw FlakyBatchStore.CommitFailed() }
        return try self.flaky.inner.updateDownload(current, stored: stored, change)
    }

    func waitingDownloads(from id: Int64, limit: Int) throws -> [StoredDownload] {
        try self.flaky.inner.waitingDownloads(from: id, limit: limit)
    }

    func promisePlacements(_ promises: [PlacementPromise]) throws {
        try self.flaky.inner.promisePlacements(promises)
    }

    var base: any QueueStore { self.flaky }
}

/// The embedded store, counting how often the queue reads rows of waiting downloads back for
/// its claims (``SoleWriterQueueStore/waitingDownloads(from:limit:)``).
final class ReadCountingStore: SoleWriterQueueStore, ForwardingQueueStore {
    let inner: TransferStore
    var base: any QueueStore { self.inner }
    /// Calls of `waitingDownloads(from:limit:)` so far.
    let waitingReads = Mutex(0)

    init(_ inner: TransferStore) { self.inner = inner }

    func updateDownload(_ current: StoredDownload, stored: StoredDownload, _ change: (inout StoredDownload) throws -> Void) throws -> StoredDownload {
        try self.inner.updateDownload(current, stored: stored, change)
    }

    func waitingDownloads(from id: Int64, limit: Int) throws -> [StoredDownload] {
        self.waitingReads.withLock { $0 += 1 }
        return try self.inner.waitingDownloads(from: id, limit: limit)
    }

    func promisePlacements(_ promises: [PlacementPromise]) throws {
        try self.inner.promisePlacements(promises)
    }
}

/// The embedded store, noting for each write that says where an active download's file goes
/// (a placement promise) whether that file was already there: a promise is worth something only
/// if it is saved before the file is placed.
final class PromiseWatchingStore: SoleWriterQueueStore, ForwardingQueueStore {
    let inner: TransferStore
    var base: any QueueStore { self.inner }
    /// Per path promised: whether its file existed when the promise was written.
    let promised = Mutex<[String: Bool]>([:])

    init(_ inner: TransferStore) { self.inner = inner }

    private func note(_ row: StoredDownload?) {
        guard let row, row.state == .active, let path = row.finalPath else { return }
        let exists = FileManager.default.fileExists(atPath: path)
        self.promised.withLock { if $0[path] == nil { $0[path] = exists } }
    }

    func updateDownload(_ current: StoredDownload, stored: StoredDownload, _ change: (inout StoredDownload) throws -> Void) throws -> StoredDownload {
        let saved = try self.inner.updateDownload(current, stored: stored, change)
        self.note(saved)
        return saved
    }

    func updateDownload(id: Int64, lease: QueueLease, release: Bool, last: StoredDownload?, _ change: @Sendable (inout StoredDownload) throws -> Void) throws -> StoredDownload? {
        let saved = try self.inner.updateDownload(id: id, lease: lease, release: release, last: last, change)
        self.note(saved)
        return saved
    }

    func waitingDownloads(from id: Int64, limit: Int) throws -> [StoredDownload] {
        try self.inner.waitingDownloads(from: id, limit: limit)
    }

    func promisePlacements(_ promises: [PlacementPromise]) throws {
        try self.inner.promisePlacements(promises)
        self.promised.withLock { promised in
            for promise in promises where promised[promise.path] == nil {
                promised[promise.path] = FileManager.default.fileExists(atPath: promise.path)
            }
        }
    }
}

/// The embedded store presented as a fleet's (``isShared``), whose heartbeat can be made to
/// hang until released: the lease keeper's round then does not come back. Everything else is
/// the embedded store's.
final class HangingHeartbeatStore: ForwardingQueueStore {
    let inner: TransferStore
    var base: any QueueStore { self.inner }
    /// While set, a heartbeat waits until it is cleared.
    let hangs = Mutex(false)
    private let heartbeatBegan = Mutex<ContinuousClock.Instant?>(nil)

    init(_ inner: TransferStore) { self.inner = inner }

    var isShared: Bool { true }

    func heartbeat(daemon: String, pid: Int32, startedAt: Date, liveSeconds: Double) throws -> [DaemonPresence] {
        self.heartbeatBegan.withLock { $0 = .now }
        defer { self.heartbeatBegan.withLock { $0 = nil } }
        while self.hangs.withLock({ $0 }) { usleep(10_000) }
        return try self.inner.heartbeat(daemon: daemon, pid: pid, startedAt: startedAt, liveSeconds: liveSeconds)
    }

    func callsInFlight(longerThan limit: Duration) -> [String] {
        guard let began = self.heartbeatBegan.withLock({ $0 }), ContinuousClock.now - began > limit else { return [] }
        return ["test connection: heartbeat held by the test"]
    }
}

/// A test store that passes every call to `base` but those it implements itself.
protocol ForwardingQueueStore: QueueStore {
    var base: any QueueStore { get }
}

extension ForwardingQueueStore {
    var storeDescription: String { self.base.storeDescription }
    var isShared: Bool { self.base.isShared }
    func download(id: Int64) throws -> StoredDownload? { try self.base.download(id: id) }
    func downloads(ids: [Int64]) throws -> [StoredDownload] { try self.base.downloads(ids: ids) }
    func forEachDownload(_ body: (StoredDownload) throws -> Void) throws { try self.base.forEachDownload(body) }
    func updateDownload(id: Int64, _ change: @Sendable (inout StoredDownload) throws -> Void) throws -> StoredDownload? {
        try self.base.updateDownload(id: id, change)
    }
    func updateDownload(id: Int64, lease: QueueLease, release: Bool, last: StoredDownload?, _ change: @Sendable (inout StoredDownload) throws -> Void) throws -> StoredDownload? {
        try self.base.updateDownload(id: id, lease: lease, release: release, last: last, change)
    }
    func confirmLease(id: Int64, lease: QueueLease) throws { try self.base.confirmLease(id: id, lease: lease) }
    func claim(_ claim: QueueClaim, _ change: @Sendable (inout StoredDownload) throws -> Void) throws -> QueueClaimOutcome {
        try self.base.claim(claim, change)
    }
    func renewLeases(_ leases: [Int64: QueueLease], seconds: Double) throws -> Set<Int64> { try self.base.renewLeases(leases, seconds: seconds) }
    func reclaimExpiredLeases() throws -> [(download: StoredDownload, previousHolder: String)] { try self.base.reclaimExpiredLeases() }
    func heartbeat(daemon: String, pid: Int32, startedAt: Date, liveSeconds: Double) throws -> [DaemonPresence] {
        try self.base.heartbeat(daemon: daemon, pid: pid, startedAt: startedAt, liveSeconds: liveSeconds)
    }
    func leave(daemon: String) throws { try self.base.leave(daemon: daemon) }
    func observeChanges(_ handler: @escaping @Sendable (QueueStoreChange) -> Void) -> (any QueueStoreObservation)? {
        self.base.observeChanges(handler)
    }
    func callsInFlight(longerThan limit: Duration) -> [String] { self.base.callsInFlight(longerThan: limit) }
    func updateDownloads(ids: [Int64], _ change: (inout StoredDownload) throws -> Bool) throws -> [StoredDownload] {
        try self.base.updateDownloads(ids: ids, change)
    }
    func insert(_ downloads: [StoredDownload]) throws -> [StoredDownload] { try self.base.insert(downloads) }
    func reviveInterruptedDownloads(of daemon: String) throws { try self.base.reviveInterruptedDownloads(of: daemon) }
    func batch<T>(_ body: () throws -> T) throws -> T { try self.base.batch(body) }
    func purgeFinishedDownloads() throws -> Int { try self.base.purgeFinishedDownloads() }
    func deleteDownload(id: Int64) throws { try self.base.deleteDownload(id: id) }
    func queueSettings() throws -> QueueSettings? { try self.base.queueSettings() }
    func save(_ settings: QueueSettings) throws { try self.base.save(settings) }
}

/// Every message a logger was given (for tests that check what the daemon said).
final class LoggedLines: Sendable {
    let lines = Mutex<[String]>([])
    var all: [String] { self.lines.withLock { $0 } }

    /// A handler that appends to these lines.
    var handler: some LogHandler { Handler(box: self) }

    private struct Handler: LogHandler {
        let box: LoggedLines
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { self.metadata[key] }
            set { self.metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            self.box.lines.withLock { $0.append("\(event.level): \(event.message)") }
        }
    }
}

/// The embedded store presented as a fleet's (``isShared``) whose change notifications the test
/// sends (``announce(_:)``), as another daemon's writes would; it records every read of changed
/// rows (``downloads(ids:)``), and a read that asks for the download `holding` names waits
/// until ``releaseRead()``: the queue's thread is busy meanwhile, as a daemon's is under load.
final class AnnouncingStore: ForwardingQueueStore {
    let inner: TransferStore
    var base: any QueueStore { self.inner }
    private let handler = Mutex<(@Sendable (QueueStoreChange) -> Void)?>(nil)
    /// The ids of each read of changed rows, in order.
    let reads = Mutex<[[Int64]]>([])
    let holding = Mutex<Int64?>(nil)
    private let held = DispatchSemaphore(value: 0)

    init(_ inner: TransferStore) { self.inner = inner }

    var isShared: Bool { true }

    func observeChanges(_ handler: @escaping @Sendable (QueueStoreChange) -> Void) -> (any QueueStoreObservation)? {
        self.handler.withLock { $0 = handler }
        return nil
    }

    /// Tells the queue that another daemon changed something.
    func announce(_ change: QueueStoreChange) {
        self.handler.withLock { $0 }?(change)
    }

    /// How many reads of changed rows fail next.
    let failingReads = Mutex(0)

    func downloads(ids: [Int64]) throws -> [StoredDownload] {
        if self.failingReads.withLock({ failing in
            defer { failing = max(0, failing - 1) }
            return failing > 0
        }) {
            throw QueueTestError("the read of changed rows fails (as the test asked)")
        }
        self.reads.withLock { $0.append(ids) }
        if let id = self.holding.withLock({ $0 }), ids.contains(id) { self.held.wait() }
        return try self.inner.downloads(ids: ids)
    }

    func releaseRead() { self.held.signal() }

    /// The download of each claim, in order.
    let claims = Mutex<[Int64]>([])
    /// Runs (once) as the first claim of the download it names begins, on the queue's thread.
    let beforeClaim = Mutex<(id: Int64, body: @Sendable () -> Void)?>(nil)

    func claim(_ claim: QueueClaim, _ change: @Sendable (inout StoredDownload) throws -> Void) throws -> QueueClaimOutcome {
        self.claims.withLock { $0.append(claim.downloadID) }
        let hook = self.beforeClaim.withLock { hook -> (@Sendable () -> Void)? in
            guard let pending = hook, pending.id == claim.downloadID else { return nil }
            hook = nil
            return pending.body
        }
        hook?()
        return try self.inner.claim(claim, change)
    }
}
