import AsyncHTTPClient
import NIOCore
import NIOHTTP1

/// One request and its response over a direct HTTP/1.1 connection of an
/// ``HTTP1ConnectionPool``: what the caller holds to wait for the end (``ended``) or to cancel.
///
/// ``ended`` succeeds once the whole response has reached the sink, or fails with why not: the
/// connection's error, the sink's own (a failed future), `HTTPClientError.readTimeout`,
/// `.remoteConnectionClosed` or `.cancelled`. A request that failed on a kept-alive connection
/// before any byte of its answer came (the server had closed it meanwhile) is sent once more,
/// on a new connection, as browsers and curl do: nothing reached the sink yet.
final class HTTP1Exchange: @unchecked Sendable {
    // @unchecked: the mutable fields are touched on `eventLoop` only; `cancel()` hops there.

    let host: String
    let port: Int
    let head: HTTPRequestHead
    let sink: any HTTP1ResponseSink
    let eventLoop: any EventLoop
    private let promise: EventLoopPromise<Void>
    private let pool: HTTP1ConnectionPool

    /// The connection carrying the exchange now, once it has one.
    var handler: HTTP1ConnectionHandler?
    private var isEnded = false
    private var isCancelled = false
    private var hasRetried = false

    init(pool: HTTP1ConnectionPool, host: String, port: Int, head: HTTPRequestHead, sink: any HTTP1ResponseSink, eventLoop: any EventLoop) {
        self.pool = pool
        self.host = host
        self.port = port
        self.head = head
        self.sink = sink
        self.eventLoop = eventLoop
        self.promise = eventLoop.makePromise(of: Void.self)
    }

    /// Succeeds once the response ended; fails with why it did not.
    var ended: EventLoopFuture<Void> { self.promise.futureResult }

    /// Ends the exchange now with `HTTPClientError.cancelled`, closing its connection if the
    /// response is under way. No effect once it ended. Any thread.
    func cancel() {
        if self.eventLoop.inEventLoop {
            self.cancelOnLoop()
        } else {
            self.eventLoop.execute { self.cancelOnLoop() }
        }
    }

    private func cancelOnLoop() {
        guard !self.isEnded else { return }
        self.isCancelled = true
        if let handler = self.handler {
            handler.cancel(self)
        } else {
            self.fail(HTTPClientError.cancelled, mayRetry: false)
        }
    }

    /// Whether the exchange is waiting for a connection still (not ended, not cancelled).
    var isWaiting: Bool { !self.isEnded && !self.isCancelled }

    /// The whole response reached the sink.
    func succeed() {
        guard !self.isEnded else { return }
        self.isEnded = true
        self.handler = nil
        self.promise.succeed(())
    }

    /// The exchange failed; sent again on a new connection when `mayRetry` (the connection's
    /// state machine says so: a reused connection that failed before any answer) unless it was
    /// cancelled or sent twice already.
    func fail(_ error: any Error, mayRetry: Bool) {
        guard !self.isEnded else { return }
        self.handler = nil
        if mayRetry, !self.isCancelled, !self.hasRetried {
            self.hasRetried = true
            self.pool.dispatch(self, onNewConnection: true)
            return
        }
        self.isEnded = true
        self.promise.fail(error)
    }
}
