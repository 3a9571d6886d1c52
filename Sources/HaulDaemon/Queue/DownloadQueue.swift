import Foundation
import HaulCore
import HaulEngine
import HaulStore
import Logging
import Synchronization

/// The download manager: a persisted queue of downloads into user directories, run by the
/// daemon, driven by `haul add/ls/pause/…` and the web UI.
///
/// Every decision and every store write happens on one serial dispatch queue (``work``), so a
/// user's `pause` and a transfer ending at the same instant are ordered, never interleaved.
/// A download's file appears under its final name only once complete and verified (length,
/// validators, checksum when given); until then it is `NAME.ID.haul-part` in the same
/// directory.
public final class DownloadQueue: Sendable {
    public struct Configuration: Sendable {
        /// A checkpoint is written after at most this many new bytes or this much time.
        public var checkpointBytes: Int64 = 1 << 20
        public var checkpointInterval: Duration = .milliseconds(500)
        /// Progress reaches subscribers at most this often per download.
        public var progressInterval: Duration = .milliseconds(250)
        /// Retries of transient failures on one URL before the next mirror (or an error).
        public var retryPolicy = RetryPolicy(
            maximumAttempts: 6,
            initialDelay: 1,
            maximumDelay: 30,
            maximumRetryAfter: 600,
            retriesRefusedConnections: true
        )
        public var idleTimeout: Duration = .seconds(60)
        /// The default directory before the user sets one.
        public var defaultDirectory: String

        public init(defaultDirectory: String) {
            self.defaultDirectory = defaultDirectory
        }
    }

    /// Why a running transfer is being stopped.
    enum StopIntent: Sendable {
        case pause
        /// Cancelled or removed: delete the partial file.
        case remove(deleteRow: Bool)
        /// Back to waiting (the concurrency limit went down).
        case requeue
        case shutdown
    }

    struct Running {
        var transfer: QueueTransfer
        var run: TransferRun
        var intent: StopIntent?
        var host: String
        var priority: Int
    }

    struct State {
        var running: [Int64: Running] = [:]
        var settings: QueueSettings
        var subscribers: [UInt64: @Sendable (QueueChange) -> Void] = [:]
        var nextSubscriber: UInt64 = 0
        var isShuttingDown = false
        var wakeUpAt: Date?
    }

    static let clockOrigin = ContinuousClock.now

    package let store: TransferStore
    let configuration: Configuration
    let logger: Logger
    let engine: TransferEngine
    let globalLimiter: BandwidthLimiter
    let state: Mutex<State>
    /// Serialises decisions and store writes.
    let work = DispatchQueue(label: "hauld.queue")

    public init(store: TransferStore, configuration: Configuration, logger: Logger) throws {
        self.store = store
        self.configuration = configuration
        self.logger = logger
        let settings = try store.queueSettings() ?? QueueSettings(defaultDirectory: configuration.defaultDirectory)
        var engineConfiguration = TransferEngine.Configuration()
        engineConfiguration.idleTimeout = configuration.idleTimeout
        // The daemon's environment decides proxies (http_proxy, https_proxy, no_proxy).
        engineConfiguration.proxies = ProxySettings.fromEnvironment(ProcessInfo.processInfo.environment)
        engineConfiguration.maximumConnectionsPerHost = settings.maximumConnectionsPerHost
        self.engine = TransferEngine(configuration: engineConfiguration)
        self.globalLimiter = BandwidthLimiter(bytesPerSecond: settings.globalSpeedLimit)
        self.state = Mutex(State(settings: settings))
    }

    /// Continues what a previous daemon left active and starts waiting downloads.
    public func start() throws {
        try self.store.reviveInterruptedDownloads()
        self.work.async { self.schedule() }
    }

    /// Pauses every transfer with its checkpoint (they continue on the next start).
    public func shutdown() async {
        let runs = self.state.withLock { state -> [TransferRun] in
            state.isShuttingDown = true
            for id in state.running.keys where state.running[id]?.intent == nil { state.running[id]?.intent = .shutdown }
            return state.running.values.map(\.run)
        }
        for run in runs { run.stop(.pause) }
        for _ in 0..<500 {
            if self.state.withLock({ $0.running.isEmpty }) { break }
            try? await Task.sleep(for: .milliseconds(10))
        }
        await self.onWork {}
        await self.engine.shutdown()
    }

    // MARK: - Subscriptions

    /// Registers `handler` for every change from now on; call ``unsubscribe(_:)`` with the
    /// answer when done. Called on the queue's serial queue, in order; must not block.
    public func subscribe(_ handler: @escaping @Sendable (QueueChange) -> Void) -> UInt64 {
        self.state.withLock { state in
            state.nextSubscriber += 1
            state.subscribers[state.nextSubscriber] = handler
            return state.nextSubscriber
        }
    }

    public func unsubscribe(_ id: UInt64) {
        _ = self.state.withLock { $0.subscribers.removeValue(forKey: id) }
    }

    func publish(_ change: QueueChange) {
        let handlers = self.state.withLock { Array($0.subscribers.values) }
        for handler in handlers { handler(change) }
    }

    // MARK: - Reading

    /// Every download not purged, with live numbers for the active ones.
    public func list() async throws -> [QueuedDownloadInfo] {
        try await self.onWork { try self.store.allDownloads().map(self.info(for:)) }
    }

    public func download(id: Int64) async throws -> QueuedDownloadInfo {
        try await self.onWork { try self.info(for: self.existing(id)) }
    }

    public var settings: QueueSettings { self.state.withLock { $0.settings } }

    func info(for download: StoredDownload) -> QueuedDownloadInfo {
        var info = download.info
        guard let running = self.state.withLock({ $0.running[download.id!] }) else { return info }
        let live = running.transfer.live.withLock { ($0.bytesDone, $0.totalBytes, $0.suggestedName) }
        info.bytesDone = live.0
        info.totalBytes = live.1 ?? info.totalBytes
        if info.fileName == nil { info.fileName = live.2 }
        let rate = running.transfer.rate
        info.speed = rate.speed
        info.secondsRemaining = rate.secondsRemaining
        return info
    }

    private func existing(_ id: Int64) throws -> StoredDownload {
        guard let download = try self.store.download(id: id), download.state != .removed else {
            throw DaemonError("no download with id \(id) (see 'haul ls')")
        }
        return download
    }

    // MARK: - Commands

    /// Queues a download of `urls` (the first is the primary, the rest mirrors).
    ///
    /// - Throws: ``DaemonError`` for a URL that is not http(s), a file name that is not a plain
    ///   name, a checksum that does not parse, or a directory that cannot be created or written.
    public func add(
        urls: [URL],
        directory: String?,
        fileName: String?,
        checksum: String?,
        speedLimit: Int64?,
        priority: Int?,
        paused: Bool = false
    ) async throws -> QueuedDownloadInfo {
        guard !urls.isEmpty else { throw DaemonError("add needs at least one URL") }
        for url in urls {
            guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host?.isEmpty == false else {
                throw DaemonError("not an http or https URL: \(url.absoluteString)")
            }
        }
        if let fileName {
            guard let sanitized = FileNaming.sanitize(fileName), sanitized == fileName else {
                throw DaemonError("'\(fileName)' is not a plain file name (no '/', no '..', not empty)")
            }
        }
        let name = fileName
        let spec: ChecksumSpec?
        do { spec = try checksum.map { try ChecksumSpec(parsing: $0) } } catch { throw DaemonError("bad checksum: \(error)") }
        if let speedLimit, speedLimit < 0 { throw DaemonError("a speed limit cannot be negative") }
        let directory = directory ?? self.settings.defaultDirectory
        try Self.prepareDirectory(directory)
        return try await self.onWork {
            var download = StoredDownload(
                urls: urls,
                directory: directory,
                requestedName: name,
                checksum: spec?.description,
                priority: priority ?? 0,
                speedLimit: speedLimit ?? 0
            )
            download.fileName = name ?? FileNaming.suggestedFilename(contentDisposition: nil, url: urls[0])
            if paused { download.state = .paused }
            download = try self.store.insert(download)
            self.logger.info("queued download \(download.id!): \(urls[0].absoluteString) → \(directory)")
            self.publish(.changed(download.info))
            self.schedule()
            return download.info
        }
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
            try self.setState(id, .paused)
            if let run = self.stopRunning(id, intent: .pause) { run.stop(.pause) }
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
            let updated = try self.store.updateDownload(id: id) { download in
                download.state = .waiting
                download.errorMessage = nil
                download.failedAttempts = 0
                download.notBefore = nil
                if download.urlIndex >= download.urls.count { download.urlIndex = 0 }
            }
            if let updated { self.publish(.changed(self.info(for: updated))) }
            self.schedule()
        }
    }

    /// Pauses (or resumes) every download that can be; returns how many changed.
    public func pauseAll() async throws -> Int {
        let ids = try await self.onWork { try self.store.allDownloads().filter(\.state.canPause).map { $0.id! } }
        for id in ids { try? await self.pause(id: id) }
        return ids.count
    }

    public func resumeAll() async throws -> Int {
        let ids = try await self.onWork { try self.store.allDownloads().filter { $0.state == .paused }.map { $0.id! } }
        for id in ids { try? await self.resume(id: id) }
        return ids.count
    }

    /// Stops a download for good and deletes its partial file. It stays listed (as removed
    /// until purged) unless `deleteFromList`; a completed file is never deleted.
    public func cancel(id: Int64, deleteFromList: Bool = false) async throws {
        try await self.onWork {
            let download = try self.existing(id)
            if download.state == .complete || (!download.state.isInProgress && download.state != .error) {
                guard deleteFromList else {
                    throw DaemonError("download \(id) is \(download.state.rawValue); use 'haul rm \(id)' to drop it from the list")
                }
                try self.store.deleteDownload(id: id)
                self.publish(.removed(id: id))
                return
            }
            if let run = self.stopRunning(id, intent: .remove(deleteRow: deleteFromList)) {
                try self.setState(id, .removed)
                run.stop(.cancel)
                return
            }
            if let partial = download.partialPath { unlink(partial) }
            if deleteFromList {
                try self.store.deleteDownload(id: id)
                self.publish(.removed(id: id))
            } else {
                try self.store.updateDownload(id: id) { download in
                    download.state = .removed
                    download.bytesDone = 0
                    download.finishedAt = Date()
                }
                self.publish(.removed(id: id))
            }
        }
    }

    /// Drops finished, failed and cancelled downloads from the history (their files stay).
    public func purge() async throws -> Int {
        try await self.onWork {
            let gone = try self.store.allDownloads().filter { !$0.state.isInProgress }.map { $0.id! }
            let count = try self.store.purgeFinishedDownloads()
            for id in gone { self.publish(.removed(id: id)) }
            return count
        }
    }

    /// Replaces the primary URL of a waiting, paused or failed download (a fresh signed link).
    /// Its bytes are kept; the next request sends `If-Range` with the validators on record, so
    /// they are reused when the entity is the same and fetched again when it is not.
    public func setURL(id: Int64, url: URL) async throws -> QueuedDownloadInfo {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host?.isEmpty == false else {
            throw DaemonError("not an http or https URL: \(url.absoluteString)")
        }
        return try await self.onWork {
            let download = try self.existing(id)
            guard download.state == .waiting || download.state == .paused || download.state == .error else {
                throw DaemonError("download \(id) is \(download.state.rawValue); pause it before changing its URL")
            }
            guard let updated = try self.store.updateDownload(id: id, { download in
                download.urls[0] = url
                download.urlIndex = 0
                download.currentURL = nil
            }) else { throw DaemonError("no download with id \(id)") }
            self.publish(.changed(updated.info))
            return updated.info
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
            self.engine.limiter.limit = settings.maximumConnectionsPerHost
            self.globalLimiter.setRate(bytesPerSecond: settings.globalSpeedLimit)
            self.logger.info("setting \(key) = \(value)")
            self.publish(.settings(settings))
            self.enforceLimits()
            self.schedule()
            return settings
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
        if let updated = try self.store.updateDownload(id: id, { $0.state = state }) {
            self.publish(.changed(self.info(for: updated)))
        }
    }

    /// Marks a running download as stopping for `intent`; returns its run to stop.
    func stopRunning(_ id: Int64, intent: StopIntent) -> TransferRun? {
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
