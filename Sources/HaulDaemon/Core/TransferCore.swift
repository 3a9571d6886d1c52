import Foundation
import HaulCore
import HaulEngine
import Logging
import Synchronization

/// hauld's one transfer core: one ``TransferEngine`` (one connection pool), one
/// ``TransferScheduler`` with one set of limits, one global speed limit, one wake-up timer and
/// one shutdown path, for every owner of durable transfers (background sessions and the queue).
///
/// Owners tell the core what is ready (``enqueue(_:)``), what no longer is (``withdraw(_:)``)
/// and what ended (``ended(_:)``); the core decides on its serial queue and calls the owners
/// back (``TransferOwner/startTransfer(_:)``, ``TransferOwner/yieldTransfer(_:)``) in the order
/// decided.
public final class TransferCore: Sendable {
    public struct Configuration: Sendable {
        /// Idle timeout of one request.
        public var idleTimeout: Duration = .seconds(60)
        /// Checkpoint and progress cadence of every transfer.
        public var cadence = Cadence()

        public init() {}
    }

    /// How often a running transfer records a checkpoint and reports progress.
    public struct Cadence: Sendable {
        /// A checkpoint after at most this many new bytes…
        public var checkpointBytes: Int64 = 4 << 20
        /// …or this many seconds, whichever comes first.
        public var checkpointInterval: Double = 0.5
        /// Live progress at least this many seconds apart per transfer.
        public var progressInterval: Double = 0.25

        public init() {}
    }

    /// The limits every owner shares.
    public struct Limits: Sendable, Hashable {
        public var maximumConcurrent: Int
        public var maximumPerHost: Int
        /// Bytes per second over all transfers; 0 is unlimited.
        public var globalSpeedLimit: Int64

        public init(maximumConcurrent: Int, maximumPerHost: Int, globalSpeedLimit: Int64) {
            self.maximumConcurrent = maximumConcurrent
            self.maximumPerHost = maximumPerHost
            self.globalSpeedLimit = globalSpeedLimit
        }

        public init(_ settings: QueueSettings) {
            self.init(
                maximumConcurrent: settings.maximumConcurrentDownloads,
                maximumPerHost: settings.maximumConnectionsPerHost,
                globalSpeedLimit: settings.globalSpeedLimit
            )
        }

        var scheduler: TransferScheduler.Limits {
            .init(maximumConcurrent: self.maximumConcurrent, maximumPerHost: self.maximumPerHost)
        }
    }

    private struct WeakOwner {
        weak var owner: (any TransferOwner)?
    }

    private struct State {
        var scheduler: TransferScheduler
        var owners: [TransferOwnerKind: WeakOwner] = [:]
        /// Bumped for every wake-up asked for: an older timer that fires finds it changed.
        var wakeUpGeneration = 0
        var idleWaiters: [CheckedContinuation<Void, Never>] = []
    }

    let engine: TransferEngine
    /// The global speed limit: every transfer of every owner passes it.
    let globalLimiter: BandwidthLimiter
    let configuration: Configuration
    let logger: Logger
    private let state: Mutex<State>
    /// Every decision, and every call to an owner, happens here, in order.
    private let decisions = DispatchQueue(label: "hauld.scheduler")

    public init(limits: Limits, configuration: Configuration = Configuration(), logger: Logger) {
        self.configuration = configuration
        self.logger = logger
        var engineConfiguration = TransferEngine.Configuration()
        engineConfiguration.idleTimeout = configuration.idleTimeout
        // The daemon's environment decides proxies (http_proxy, https_proxy, no_proxy).
        engineConfiguration.proxies = ProxySettings.fromEnvironment(ProcessInfo.processInfo.environment)
        engineConfiguration.maximumConnectionsPerHost = limits.maximumPerHost
        // The pool may hold as many connections per host as the highest setting allows; the
        // scheduler and the engine's host limiter decide how many are used.
        engineConfiguration.connectionPoolSoftLimitPerHost = 64
        // No client of the daemon is shown per-exchange timings.
        engineConfiguration.recordsMetrics = false
        // Plain-HTTP downloads skip AsyncHTTPClient's request path (small files cost a third
        // fewer instructions).
        engineConfiguration.usesDirectHTTP1 = true
        self.engine = TransferEngine(configuration: engineConfiguration)
        self.globalLimiter = BandwidthLimiter(bytesPerSecond: limits.globalSpeedLimit)
        self.state = Mutex(State(scheduler: TransferScheduler(limits: limits.scheduler)))
    }

    /// Seconds on the clock of the scheduler's `notBefore` (wall time: retry times are stored).
    static func now() -> Double { Date().timeIntervalSinceReferenceDate }

    /// Seconds on a monotonic clock, for cadences and speed.
    static func monotonicNow() -> Double {
        let elapsed = ContinuousClock.now - Self.origin
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
    }

    private static let origin = ContinuousClock.now

    // MARK: - Owners

    /// Makes `owner` the one that runs transfers of `kind`.
    func register(_ owner: any TransferOwner, for kind: TransferOwnerKind) {
        self.state.withLock { $0.owners[kind] = WeakOwner(owner: owner) }
    }

    /// `entry` is ready to run (or to run after its `notBefore`).
    func enqueue(_ entry: TransferScheduler.Entry) {
        self.decide { $0.add(entry, now: $1) }
    }

    /// Many entries at once (a daemon start, a batch add): one decision.
    func enqueue(_ entries: [TransferScheduler.Entry]) {
        guard !entries.isEmpty else { return }
        self.decide { scheduler, now in scheduler.add(entries, now: now) }
    }

    /// Many waiting transfers no longer want to run: one decision.
    func withdraw(_ ids: [TransferID]) {
        guard !ids.isEmpty else { return }
        self.decide { scheduler, now in scheduler.withdraw(ids, now: now) }
    }

    /// The waiting transfer `id` no longer wants to run.
    func withdraw(_ id: TransferID) {
        self.decide { $0.withdraw(id, now: $1) }
    }

    /// A transfer the core started has ended (or could not start): its slot is free.
    func ended(_ id: TransferID) {
        self.decide { $0.ended(id, now: $1) }
    }

    /// New shared limits, effective at once (lowering one yields what no longer fits).
    func setLimits(_ limits: Limits) {
        self.engine.limiter.limit = limits.maximumPerHost
        self.globalLimiter.setRate(bytesPerSecond: limits.globalSpeedLimit)
        self.decide { $0.setLimits(limits.scheduler, now: $1) }
    }

    /// Counts for diagnostics and tests.
    var counts: (running: Int, waiting: Int) {
        self.state.withLock { ($0.scheduler.runningCount, $0.scheduler.waitingCount) }
    }

    /// Starts nothing more, stops every running transfer (keeping checkpoints), waits for them
    /// to end (at most `timeout`), then closes the engine's connections.
    public func shutdown(timeout: Duration = .seconds(5)) async {
        let owners = self.state.withLock { state -> [any TransferOwner] in
            state.scheduler.shutDown()
            return state.owners.values.compactMap(\.owner)
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            self.decisions.async {
                let idle = self.state.withLock { state -> Bool in
                    if state.scheduler.runningCount == 0 { return true }
                    state.idleWaiters.append(continuation)
                    return false
                }
                if idle {
                    continuation.resume()
                    return
                }
                for owner in owners { owner.stopForShutdown() }
                let (seconds, attoseconds) = timeout.components
                self.decisions.asyncAfter(deadline: .now() + Double(seconds) + Double(attoseconds) * 1e-18) {
                    let waiters = self.state.withLock { state in
                        defer { state.idleWaiters = [] }
                        return state.idleWaiters
                    }
                    if !waiters.isEmpty { self.logger.warning("shutdown: transfers did not stop in time") }
                    for waiter in waiters { waiter.resume() }
                }
            }
        }
        await self.engine.shutdown()
    }

    // MARK: - Deciding

    private func decide(_ event: @escaping @Sendable (inout TransferScheduler, Double) -> [TransferScheduler.Action]) {
        self.decisions.async {
            let now = Self.now()
            let (actions, owners, idleWaiters, becameIdle) = self.state.withLock { state in
                let wasRunning = state.scheduler.runningCount > 0
                let actions = event(&state.scheduler, now)
                var waiters: [CheckedContinuation<Void, Never>] = []
                if state.scheduler.runningCount == 0 {
                    waiters = state.idleWaiters
                    state.idleWaiters = []
                }
                return (actions, state.owners, waiters, wasRunning && state.scheduler.runningCount == 0)
            }
            for action in actions {
                switch action {
                case .start(let id):
                    guard let owner = owners[id.owner]?.owner else {
                        self.decide { $0.ended(id, now: $1) }
                        continue
                    }
                    owner.startTransfer(id.number)
                case .yield(let id):
                    owners[id.owner]?.owner?.yieldTransfer(id.number)
                case .wakeUp(let at):
                    self.scheduleWakeUp(at: at)
                }
            }
            for waiter in idleWaiters { waiter.resume() }
            // The last transfer ended: the heap its buffers grew goes back to the system now,
            // not at the next quiet-time trim (scripts/queue-bench, 10,000 queued and 200 run:
            // 64.2 -> 62.9 MiB right after).
            if becameIdle { WorkingSetTrimmer.releaseFreeHeap() }
        }
    }

    private func scheduleWakeUp(at time: Double) {
        let generation = self.state.withLock { state in
            state.wakeUpGeneration += 1
            return state.wakeUpGeneration
        }
        let delay = max(0, time - Self.now()) + 0.005
        self.decisions.asyncAfter(deadline: .now() + delay) {
            guard self.state.withLock({ $0.wakeUpGeneration == generation }) else { return }
            self.decide { $0.timePassed(now: $1) }
        }
    }
}
