import NIOCore
import Synchronization

/// Bounds the body bytes handed to a consumer (a delegate queue, an async sequence) but not
/// consumed yet. Above `limit` the transfer stops reading from the network until the consumer
/// is back under half of it, so a slow consumer slows the sender (TCP back-pressure) instead of
/// filling memory.
///
/// `handedOver` and `consumed` may be called from any thread; `wait(on:)` from the transfer's
/// event loop, after each handed-over chunk.
package final class DeliveryWindow: Sendable {
    private struct State {
        var outstanding = 0
        var waiting: EventLoopPromise<Void>?
        var closed = false
    }

    package let limit: Int
    private let state = Mutex(State())

    package init(limit: Int) {
        self.limit = limit
    }

    /// Bytes handed over and not consumed yet.
    package var outstanding: Int { self.state.withLock { $0.outstanding } }

    package func handedOver(_ count: Int) {
        self.state.withLock { $0.outstanding += count }
    }

    package func consumed(_ count: Int) {
        let ready = self.state.withLock { state -> EventLoopPromise<Void>? in
            state.outstanding -= count
            guard state.outstanding <= self.limit / 2 else { return nil }
            defer { state.waiting = nil }
            return state.waiting
        }
        ready?.succeed(())
    }

    /// A future to wait on before reading more, when the window is full; `nil` otherwise.
    package func wait(on eventLoop: any EventLoop) -> EventLoopFuture<Void>? {
        self.state.withLock { state -> EventLoopFuture<Void>? in
            guard !state.closed, state.outstanding > self.limit else { return nil }
            if let waiting = state.waiting { return waiting.futureResult }
            let promise = eventLoop.makePromise(of: Void.self)
            state.waiting = promise
            return promise.futureResult
        }
    }

    /// The consumer is gone or the transfer ended: no more waiting.
    package func close() {
        let waiting = self.state.withLock { state -> EventLoopPromise<Void>? in
            state.closed = true
            defer { state.waiting = nil }
            return state.waiting
        }
        waiting?.succeed(())
    }
}
