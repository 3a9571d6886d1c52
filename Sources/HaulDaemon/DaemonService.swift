import Foundation
import HaulCore
import HaulStore
import Logging
import ServiceLifecycle
import Synchronization

/// `hauld` as a service: takes the store's lock, opens the store, builds the one transfer core
/// and its two owners (background sessions and the queue), resumes interrupted transfers,
/// serves the socket, and on graceful shutdown (SIGTERM/SIGINT) pauses every transfer with its
/// checkpoint so that the next start continues them.
public struct DaemonService: Service {
    public let paths: DaemonPaths
    public let configuration: TransferDaemon.Configuration
    public let coreConfiguration: TransferCore.Configuration
    /// `--maximum-transfers`: replaces the saved `max-concurrent` setting at start.
    public let maximumConcurrentTransfers: Int?
    public let queueConfiguration: DownloadQueue.Configuration
    /// The web UI's port on 127.0.0.1 (0: any free port); `nil` serves no web UI.
    public let webPort: Int?
    /// aria2's RPC (`--enable-rpc`); `nil` serves none. A `nil` secret is made on the first
    /// start and kept in `rpc-secret` (mode 0600) in the data directory.
    public let rpc: Aria2RPCServer.Configuration?
    /// `--store`: where the download queue lives — `sqlite:PATH` or
    /// `postgres://USER@HOST:PORT/DB`; `nil`: the data directory's SQLite store. Background
    /// sessions always stay in the local SQLite store (they belong to this daemon's clients).
    public let queueStore: String?
    public let logger: Logger

    /// The web UI's default port.
    public static let defaultWebPort = 6809

    /// How often an idle hauld hands back pages it does not use (``WorkingSetTrimmer``).
    static let trimInterval: Duration = .seconds(30)

    /// How long the web UI and the aria2 RPC have to close their connections once hauld shuts
    /// down, before they are cancelled.
    static let serverShutdownLimit: Duration = .seconds(3)

    /// Waits for the servers to finish what they answer and close their connections; cancels
    /// them when a peer keeps one open past ``serverShutdownLimit`` (a WebSocket peer that
    /// does not answer the close), and stops waiting a second later: Hummingbird's WebSocket
    /// server waits for a connection's first request without end, even cancelled (a connection
    /// opened to the RPC and left silent kept hauld from exiting until it was killed). Nothing
    /// of the daemon's is left to save by then: transfers are paused, the queue's state is
    /// stored.
    static func stop(_ servers: [Task<Void, Never>], logger: Logger) async {
        guard !servers.isEmpty else { return }
        let finished = Task {
            for server in servers { await server.value }
        }
        if await Self.first(finished, within: Self.serverShutdownLimit) { return }
        logger.notice("shutting down: connections still open after \(Self.serverShutdownLimit), closing them")
        for server in servers { server.cancel() }
        if await Self.first(finished, within: .seconds(1)) { return }
        logger.notice("shutting down: a connection that never sent a request keeps a server from stopping; not waiting for it")
    }

    /// Whether `task` finished within `limit` (`false` as soon as the limit passes, while it
    /// goes on).
    private static func first(_ task: Task<Void, Never>, within limit: Duration) async -> Bool {
        await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let resumed = Mutex(false)
            let resume: @Sendable (Bool) -> Void = { finished in
                let first = resumed.withLock { done in
                    defer { done = true }
                    return !done
                }
                if first { continuation.resume(returning: finished) }
            }
            let timer = Task {
                try? await Task.sleep(for: limit)
                resume(false)
            }
            Task {
                await task.value
                resume(true)
                timer.cancel()
            }
        }
    }

    public init(
        paths: DaemonPaths,
        configuration: TransferDaemon.Configuration = .init(),
        coreConfiguration: TransferCore.Configuration = .init(),
        maximumConcurrentTransfers: Int? = nil,
        queueConfiguration: DownloadQueue.Configuration = .init(defaultDirectory: DownloadQueue.defaultDownloadDirectory()),
        webPort: Int? = DaemonService.defaultWebPort,
        rpc: Aria2RPCServer.Configuration? = nil,
        queueStore: String? = nil,
        logger: Logger
    ) {
        self.rpc = rpc
        self.queueStore = queueStore
        self.paths = paths
        self.configuration = configuration
        self.coreConfiguration = coreConfiguration
        self.maximumConcurrentTransfers = maximumConcurrentTransfers
        self.queueConfiguration = queueConfiguration
        self.webPort = webPort
        self.logger = logger
    }

    /// The queue's store for `--store` (`nil`: `local`, the data directory's SQLite store).
    ///
    /// - Throws: ``DaemonError`` saying what is wrong with the URL or why the store cannot be
    ///   reached.
    static func openQueueStore(_ text: String?, local: TransferStore, queue: DownloadQueue.Configuration, logger: Logger) throws -> any QueueStore {
        guard let text, !text.isEmpty else { return local }
        if text.hasPrefix("sqlite:") {
            let path = String(text.dropFirst("sqlite:".count))
            guard !path.isEmpty else { throw DaemonError("--store sqlite:PATH names no file") }
            return try TransferStore.open(path: (path as NSString).expandingTildeInPath)
        }
        if text.hasPrefix("postgres://") || text.hasPrefix("postgresql://") {
            do {
                // A statement may take a third of a lease at most: a store that stops answering
                // is noticed while the leases still hold.
                let timeout = max(0.2, min(5, queue.leaseSeconds / 3))
                return try PostgresQueueStore(
                    url: text, member: queue.daemonName, queryTimeout: .milliseconds(Int64(timeout * 1000)), logger: logger
                )
            } catch let error as PostgresQueueStore.StoreError {
                throw DaemonError(error.description)
            }
        }
        throw DaemonError("--store takes sqlite:PATH or postgres://USER@HOST:PORT/DB, got \(text)")
    }

    public func run() async throws {
        WorkingSetTrimmer.keepFreedHeapWhileBusy()
        try self.paths.createDirectories()
        let lock = try DaemonLock(path: self.paths.lockPath)
        let store = try TransferStore.open(path: self.paths.storePath)
        let queueStore = try Self.openQueueStore(self.queueStore, local: store, queue: self.queueConfiguration, logger: self.logger)
        self.logger.info("hauld: queue store \(queueStore.storeDescription)")
        // The limits come from the saved settings, which the queue loads and hands to the core.
        let core = TransferCore(limits: .init(QueueSettings(defaultDirectory: "/")), configuration: self.coreConfiguration, logger: self.logger)
        let daemon = TransferDaemon(store: store, paths: self.paths, core: core, configuration: self.configuration, logger: self.logger)
        var queueConfiguration = self.queueConfiguration
        if queueStore.isShared, let maximum = self.maximumConcurrentTransfers {
            // The saved settings are the fleet's: this daemon's own limit is not saved.
            queueConfiguration.maximumConcurrentOverride = min(64, max(1, maximum))
        }
        let queue = try DownloadQueue(store: queueStore, core: core, configuration: queueConfiguration, logger: self.logger)
        if !queueStore.isShared, let maximum = self.maximumConcurrentTransfers {
            _ = try await queue.set("max-concurrent", to: "\(min(64, max(1, maximum)))")
        }
        try daemon.start()
        try queue.start()
        var web: WebUIServer?
        if let webPort = self.webPort {
            let token = try WebToken.loadOrCreate(path: self.paths.dataDirectory.appendingPathComponent("web-token").path)
            web = WebUIServer(queue: queue, token: token, port: webPort, logger: self.logger)
        }
        var rpc: Aria2RPCServer?
        if var configuration = self.rpc {
            if configuration.secret == nil {
                configuration.secret = try WebToken.loadOrCreate(path: self.paths.dataDirectory.appendingPathComponent("rpc-secret").path)
            }
            // `shutdown` / `forceShutdown` stop the daemon the way SIGTERM does.
            rpc = Aria2RPCServer(queue: queue, configuration: configuration, shutdown: { kill(getpid(), SIGTERM) }, logger: self.logger)
        }
        let server = try await DaemonServer.start(path: self.paths.socketPath, daemon: daemon, queue: queue, web: web, rpc: rpc)
        self.logger.info("hauld \(getpid()) serving \(self.paths.socketPath), store \(self.paths.storePath), queue \(queueStore.storeDescription)")
        // The web UI and the RPC run beside the daemon's own work, ended with it below.
        var servers: [Task<Void, Never>] = []
        if let web {
            servers.append(Task {
                // A web UI that cannot bind (port taken) is reported; transfers go on.
                do { try await web.run() } catch { self.logger.error("web UI not available: \(error)") }
            })
        }
        if let rpc {
            servers.append(Task {
                do { try await rpc.run() } catch { self.logger.error("aria2 RPC not available: \(error)") }
            })
        }
        let running = servers
        await withTaskCancellationHandler {
            // Give back the start-up's pages at the first quiet second once serving (a daemon
            // that a client starts and asks at once was left at its start-up's size for a whole
            // interval), then whenever it was quiet for an interval.
            let trimmer = Task {
                var trimmed = false
                while true {
                    try await Task.sleep(for: trimmed ? Self.trimInterval : .seconds(1))
                    if WorkingSetTrimmer.wasQuiet(), core.counts.running == 0 {
                        let advised = WorkingSetTrimmer.trim()
                        self.logger.debug("memory: idle, unused pages handed back (\(advised >> 20) MiB of read-only file mappings)")
                        trimmed = true
                    }
                }
            }
            try? await gracefulShutdown()
            trimmer.cancel()
            self.logger.info("shutting down: pausing transfers")
            await server.close()
            await core.shutdown()
            queue.leaveFleet()
            await Self.stop(running, logger: self.logger)
        } onCancel: {
            for server in running { server.cancel() }
        }
        unlink(self.paths.socketPath)
        withExtendedLifetime(lock) {}
    }
}

/// The service's name in the service group's logs and errors. Without one, the group names a
/// service by printing it (`"\(service)"`): every stored property, found by reflection, which
/// took 26 M instructions (about 8 ms) of each start and would have put the RPC secret in the
/// name.
extension DaemonService: CustomStringConvertible {
    public var description: String { "hauld" }
}
