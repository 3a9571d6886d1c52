import Synchronization

/// Caps how many exchanges run at once against one host (`httpMaximumConnectionsPerHost`).
/// Waiters are served first come, first served; a waiter whose task is cancelled leaves the line.
package final class HostConnectionLimiter: Sendable {
    private struct Waiter {
        var id: UInt64
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct HostState {
        var inUse = 0
        var waiters: [Waiter] = []
    }

    private struct State {
        var hosts: [String: HostState] = [:]
        var nextID: UInt64 = 0
        var limit: Int
    }

    private let state: Mutex<State>
    /// The direct connections open per host, of every engine sharing this limiter.
    package let directConnections = DirectConnectionCensus()

    package init(limit: Int) {
        self.state = Mutex(State(limit: max(1, limit)))
    }

    /// Exchanges allowed at once per host. Raising it lets waiters in at once; lowering it
    /// lets running exchanges finish and holds new ones back until below the limit.
    package var limit: Int {
        get { self.state.withLock { $0.limit } }
        set {
            let admitted = self.state.withLock { state -> [Waiter] in
                state.limit = max(1, newValue)
                var admitted: [Waiter] = []
                for (host, var entry) in state.hosts {
                    while entry.inUse < state.limit, !entry.waiters.isEmpty {
                        admitted.append(entry.waiters.removeFirst())
                        entry.inUse += 1
                    }
                    state.hosts[host] = entry
                }
                return admitted
            }
            for waiter in admitted { waiter.continuation.resume() }
        }
    }

    /// Waits for a free slot for `host`.
    ///
    /// - Throws: `CancellationError` when the calling task is cancelled while waiting.
    package func acquire(host: String) async throws {
        // A free slot is taken without suspending: a suspension would resume the task on its
        // executor's next turn (an event loop tick) and cost a task switch per request.
        let id = try self.state.withLock { state throws(CancellationError) -> UInt64? in
            if Task.isCancelled { throw CancellationError() }
            var entry = state.hosts[host, default: HostState()]
            if entry.inUse < state.limit, entry.waiters.isEmpty {
                entry.inUse += 1
                state.hosts[host] = entry
                return nil
            }
            state.nextID += 1
            return state.nextID
        }
        guard let id else { return }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let outcome: Result<Bool, any Error> = self.state.withLock { state in
                    if Task.isCancelled { return .failure(CancellationError()) }
                    var entry = state.hosts[host, default: HostState()]
                    if entry.inUse < state.limit {
                        entry.inUse += 1
                        state.hosts[host] = entry
                        return .success(true)
                    }
                    entry.waiters.append(Waiter(id: id, continuation: continuation))
                    state.hosts[host] = entry
                    return .success(false)
                }
                switch outcome {
                case .success(true): continuation.resume()
                case .success(false): break
                case .failure(let error): continuation.resume(throwing: error)
                }
            }
        } onCancel: {
            let waiter = self.state.withLock { state -> Waiter? in
                guard var entry = state.hosts[host], let index = entry.waiters.firstIndex(where: { $0.id == id }) else {
                    return nil
                }
                let waiter = entry.waiters.remove(at: index)
                state.hosts[host] = entry
                return waiter
            }
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Takes a slot of `host` when one is free and nobody waits for one (extra connections of a
    /// segmented download never jump the line of other exchanges).
    package func tryAcquire(host: String) -> Bool {
        self.state.withLock { state in
            var entry = state.hosts[host, default: HostState()]
            guard entry.inUse < state.limit, entry.waiters.isEmpty else { return false }
            entry.inUse += 1
            state.hosts[host] = entry
            return true
        }
    }

    /// Gives a slot of `host` back, handing it to the longest waiter if any.
    package func release(host: String) {
        let next = self.state.withLock { state -> Waiter? in
            guard var entry = state.hosts[host] else { return nil }
            if entry.waiters.isEmpty || entry.inUse > state.limit {
                entry.inUse -= 1
                state.hosts[host] = entry.inUse == 0 ? nil : entry
                return nil
            }
            let waiter = entry.waiters.removeFirst()
            state.hosts[host] = entry
            return waiter
        }
        next?.continuation.resume()
    }

    /// Exchanges running now against `host` (for tests and diagnostics).
    package func inUse(host: String) -> Int {
        self.state.withLock { $0.hosts[host]?.inUse ?? 0 }
    }
}
