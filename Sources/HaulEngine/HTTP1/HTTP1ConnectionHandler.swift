import AsyncHTTPClient
import NIOCore
import NIOHTTP1

/// The last handler of a direct HTTP/1.1 connection (after NIO's request encoder and response
/// decoder): sends one exchange's request at a time and hands the response to the exchange's
/// sink part by part, each after the sink's previous future succeeded. While the sink is busy
/// the parts that already arrived wait here and the channel's reads are held, so a slow disk or
/// a speed limit slows the sender (TCP back-pressure) instead of filling memory.
///
/// The connection stays open for the next exchange when the response allows it
/// (`Connection: keep-alive` semantics, ``onReusable``); otherwise it is closed. No byte is
/// awaited for longer than the idle timeout while the sink is not busy
/// (`HTTPClientError.readTimeout`). Everything runs on the channel's event loop.
final class HTTP1ConnectionHandler: ChannelDuplexHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundIn = HTTPClientRequestPart
    typealias OutboundOut = HTTPClientRequestPart

    private let idleTimeout: TimeAmount
    private var context: ChannelHandlerContext?
    /// The exchange under way, if any.
    private var exchange: HTTP1Exchange?
    /// Response parts that arrived while the sink was busy, in order.
    private var waitingParts = CircularBuffer<HTTPClientResponsePart>()
    /// Whether the sink has not finished with the last part yet.
    private var isSinkBusy = false
    /// Whether the channel asked to read while the sink was busy.
    private var isReadHeld = false
    /// Whether the current response lets the connection carry another exchange.
    private var keepsAlive = false
    /// When a byte last came or the sink last caught up (for the idle timeout).
    private var lastActivity = NIODeadline.now()
    private var idleTimer: NIOScheduledCallback?
    /// Exchanges this connection completed.
    private(set) var completedExchanges = 0
    private(set) var isClosed = false

    /// Called once an exchange ended and the connection can carry another.
    var onReusable: ((HTTP1ConnectionHandler) -> Void)?
    /// Called once when the connection has closed.
    var onClosed: ((HTTP1ConnectionHandler) -> Void)?

    init(idleTimeout: TimeAmount) {
        self.idleTimeout = idleTimeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    // MARK: - Exchanges

    /// Sends `exchange`'s request. Call only while no other exchange is under way.
    func start(_ exchange: HTTP1Exchange) {
        guard let context, !self.isClosed else {
            exchange.fail(HTTPClientError.remoteConnectionClosed, mayRetry: self.completedExchanges > 0)
            return
        }
        precondition(self.exchange == nil, "one exchange at a time on an HTTP/1.1 connection")
        self.exchange = exchange
        exchange.handler = self
        self.keepsAlive = true
        self.lastActivity = .now()
        self.scheduleIdleCheck(in: self.idleTimeout)
        context.write(self.wrapOutboundOut(.head(exchange.head)), promise: nil)
        context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
    }

    /// Ends `exchange` with `HTTPClientError.cancelled` if it is this connection's, closing
    /// the connection (the rest of its response would have to be read first).
    func cancel(_ exchange: HTTP1Exchange) {
        guard self.exchange === exchange else { return }
        self.failExchange(HTTPClientError.cancelled)
    }

    /// Closes the connection; an exchange under way fails with `HTTPClientError.cancelled`.
    func close() {
        self.failExchange(HTTPClientError.cancelled)
        self.context?.close(promise: nil)
    }

    // MARK: - Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = self.unwrapInboundIn(data)
        guard let exchange = self.exchange else {
            // An answer nobody asked for: the connection cannot be trusted with another request.
            context.close(promise: nil)
            return
        }
        exchange.hasReceivedAnything = true
        self.lastActivity = .now()
        if self.isSinkBusy {
            self.waitingParts.append(part)
        } else {
            self.deliver(part, to: exchange)
        }
    }

    private func deliver(_ part: HTTPClientResponsePart, to exchange: HTTP1Exchange) {
        let eventLoop = exchange.eventLoop
        let future: EventLoopFuture<Void>
        switch part {
        case .head(let head):
            self.keepsAlive = head.isKeepAlive
            future = exchange.sink.receivedHead(head, on: eventLoop)
        case .body(let buffer):
            future = exchange.sink.receivedBodyPart(buffer, on: eventLoop)
        case .end:
            self.finishExchange(exchange)
            return
        }
        self.isSinkBusy = true
        // A future that already succeeded (the usual case) runs this at once.
        future.assumeIsolated().whenComplete { result in
            guard self.exchange === exchange else { return }
            self.isSinkBusy = false
            switch result {
            case .success:
                self.lastActivity = .now()
                self.deliverWaitingParts()
            case .failure(let error):
                self.failExchange(error)
            }
        }
    }

    private func deliverWaitingParts() {
        while !self.isSinkBusy, let exchange = self.exchange, let part = self.waitingParts.popFirst() {
            self.deliver(part, to: exchange)
        }
        self.releaseHeldRead()
    }

    private func releaseHeldRead() {
        guard !self.isSinkBusy, self.waitingParts.isEmpty, self.isReadHeld, let context else { return }
        self.isReadHeld = false
        context.read()
    }

    private func finishExchange(_ exchange: HTTP1Exchange) {
        self.exchange = nil
        self.idleTimer?.cancel()
        self.idleTimer = nil
        self.completedExchanges += 1
        if self.keepsAlive, !self.isClosed {
            self.onReusable?(self)
        } else {
            self.context?.close(promise: nil)
        }
        exchange.succeed()
        // An idle connection keeps reading, so that a server's close is noticed.
        self.releaseHeldRead()
    }

    private func failExchange(_ error: any Error) {
        guard let exchange = self.exchange else { return }
        self.exchange = nil
        self.isSinkBusy = false
        self.waitingParts.removeAll()
        self.idleTimer?.cancel()
        self.idleTimer = nil
        self.context?.close(promise: nil)
        // A kept-alive connection the server closed before answering: the request may go again.
        exchange.fail(error, mayRetry: self.completedExchanges > 0 && !exchange.hasReceivedAnything)
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.isClosed = true
        self.failExchange(HTTPClientError.remoteConnectionClosed)
        self.onClosed?(self)
        self.onClosed = nil
        self.onReusable = nil
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.failExchange(error)
        context.close(promise: nil)
    }

    // MARK: - Outbound

    func read(context: ChannelHandlerContext) {
        if self.isSinkBusy || !self.waitingParts.isEmpty {
            self.isReadHeld = true
        } else {
            context.read()
        }
    }

    // MARK: - Idle timeout

    /// Checks for silence every `delay`: time the sink spends busy does not count. (A scheduled
    /// callback, not `scheduleTask`: no promise and future per exchange.)
    private func scheduleIdleCheck(in delay: TimeAmount) {
        guard let context else { return }
        self.idleTimer = try? context.eventLoop.assumeIsolated().scheduleCallback(in: delay, handler: IdleCheck(handler: self))
    }

    /// Holds the handler weakly, so that a pending check never keeps a closed connection alive.
    private struct IdleCheck: NIOScheduledCallbackHandler {
        weak var handler: HTTP1ConnectionHandler?

        func handleScheduledCallback(eventLoop: some EventLoop) {
            self.handler?.idleCheckFired()
        }
    }

    private func idleCheckFired() {
        self.idleTimer = nil
        guard self.exchange != nil else { return }
        if self.isSinkBusy || !self.waitingParts.isEmpty {
            self.scheduleIdleCheck(in: self.idleTimeout)
            return
        }
        let silent = NIODeadline.now() - self.lastActivity
        if silent >= self.idleTimeout {
            self.failExchange(HTTPClientError.readTimeout)
        } else {
            self.scheduleIdleCheck(in: self.idleTimeout - silent)
        }
    }
}
