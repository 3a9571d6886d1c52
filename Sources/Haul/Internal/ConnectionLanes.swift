import Foundation
import Synchronization

/// Two lanes of work on a connection that is opened later — a stream task's reads and writes, a
/// WebSocket task's receives and sends. Each job runs after the one before it in its lane, once
/// the connection is ready (``ready`` settled with it); when it never is, the job's `failed`
/// runs once with the reason.
final class ConnectionLanes<Connection: Sendable>: Sendable {
    enum Lane: Hashable, Sendable {
        case inbound
        case outbound
    }

    let ready = Settable<Connection>()
    private let tails = Mutex<[Lane: Task<Void, Never>]>([:])

    init() {}

    func enqueue(_ lane: Lane, _ body: @escaping @Sendable (Connection) async -> Void, failed: @escaping @Sendable (any Error) -> Void) {
        self.tails.withLock { tails in
            let previous = tails[lane]
            tails[lane] = Task {
                await previous?.value
                let connection: Connection
                do {
                    connection = try await self.ready.value()
                } catch {
                    failed(error)
                    return
                }
                await body(connection)
            }
        }
    }
}

/// A value settled once (success or failure) and awaited by any number of tasks.
final class Settable<Value: Sendable>: Sendable {
    private let state = Mutex<(result: Result<Value, any Error>?, waiters: [CheckedContinuation<Value, any Error>])>((nil, []))

    /// Settles with `result`; later calls have no effect.
    func settle(_ result: Result<Value, any Error>) {
        let waiters = self.state.withLock { state -> [CheckedContinuation<Value, any Error>] in
            guard state.result == nil else { return [] }
            state.result = result
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(with: result) }
    }

    func value() async throws -> Value {
        try await withCheckedThrowingContinuation { continuation in
            let settled = self.state.withLock { state -> Result<Value, any Error>? in
                if let result = state.result { return result }
                state.waiters.append(continuation)
                return nil
            }
            if let settled { continuation.resume(with: settled) }
        }
    }
}

/// Stream-task events, as `URLSessionStreamDelegate`.
