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

    init(root: URL? = nil, configure: (inout DownloadQueue.Configuration) -> Void = { _ in }) throws {
        let root = root ?? FileManager.default.temporaryDirectory.appendingPathComponent("haul-queue-\(UUID().uuidString)")
        self.root = root
        self.downloads = root.appendingPathComponent("downloads")
        self.storePath = root.appendingPathComponent("store.sqlite").path
        try FileManager.default.createDirectory(at: self.downloads, withIntermediateDirectories: true)
        var configuration = DownloadQueue.Configuration(defaultDirectory: self.downloads.path)
        configuration.retryPolicy = RetryPolicy(maximumAttempts: 3, initialDelay: 0.05, maximumDelay: 0.2, maximumRetryAfter: 2, retriesRefusedConnections: true)
        configure(&configuration)
        var logger = Logger(label: "queue-test")
        logger.logLevel = .warning
        var coreConfiguration = TransferCore.Configuration()
        coreConfiguration.idleTimeout = .seconds(5)
        self.core = TransferCore(limits: .init(QueueSettings(defaultDirectory: "/")), configuration: coreConfiguration, logger: logger)
        self.queue = try DownloadQueue(store: try TransferStore.open(path: self.storePath), core: self.core, configuration: configuration, logger: logger)
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
