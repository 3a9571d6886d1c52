import HaulCore
import HTTPTypes
import NIOCore
import NIOHTTPTypes

/// Answers `POST /jsonrpc` on the connection's event loop, ahead of the router.
///
/// Front-ends poll (`tellActive`, `tellWaiting`, `getGlobalStat`) several times a second, and a
/// read is answered from memory in microseconds: handing each request to a Swift task and its
/// answer back to the event loop cost more than the answer itself (two thread wake-ups per
/// request). Reads and refusals are therefore answered right here, in the order they came;
/// a request with a change (`addUri`, `pause`, …) is answered when the queue has made it, and
/// the requests read meanwhile wait behind it (no further reads are asked for until then), so
/// answers keep the order of their requests.
///
/// Everything else (`GET /jsonrpc`, `OPTIONS`, the web socket upgrade, other paths) goes on to
/// the router; while one of those is unanswered, a `POST /jsonrpc` goes on to the router too
/// (it has the same route), so that pipelined answers never overtake each other.
final class Aria2HTTPHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private enum State {
        /// Between requests.
        case idle
        /// Passing a request on to the router (its body and end follow it).
        case passing
        /// Reading the body of a `POST /jsonrpc`.
        case collecting(close: Bool, body: ByteBuffer)
        /// A body over the limit: the rest is read and dropped, then the request is refused.
        case discarding(close: Bool)
        /// Waiting for the queue to make a change; requests read meanwhile wait in `held`.
        case waiting
    }

    private let methods: Aria2Methods
    private var state = State.idle
    /// Requests passed on whose answer has not ended yet.
    private var unanswered = 0
    private var held = CircularBuffer<HTTPRequestPart>()
    private var readPending = false

    init(methods: Aria2Methods) {
        self.methods = methods
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = self.unwrapInboundIn(data)
        if case .waiting = self.state {
            self.held.append(part)
            return
        }
        self.handle(part, context: context)
    }

    private func handle(_ part: HTTPRequestPart, context: ChannelHandlerContext) {
        switch (self.state, part) {
        case (.idle, .head(let request)):
            if self.unanswered == 0, request.method == .post, Self.isRPCPath(request.path) {
                WorkingSetTrimmer.noteActivity()
                let close = request.headerFields[.connection].map { $0.lowercased().contains("close") } ?? false
                let length = request.headerFields[.contentLength].flatMap(Int.init) ?? 256
                self.state = .collecting(
                    close: close,
                    body: context.channel.allocator.buffer(capacity: min(max(length, 0), Aria2Envelope.maximumRequestSize))
                )
            } else {
                self.state = .passing
                self.unanswered += 1
                context.fireChannelRead(self.wrapInboundOut(part))
            }
        case (.passing, .end):
            self.state = .idle
            context.fireChannelRead(self.wrapInboundOut(part))
        case (.passing, _):
            context.fireChannelRead(self.wrapInboundOut(part))
        case (.collecting(let close, var body), .body(var chunk)):
            if body.readableBytes + chunk.readableBytes > Aria2Envelope.maximumRequestSize {
                self.state = .discarding(close: close)
            } else {
                // Dropping the state's copy first keeps the append from copying the buffer.
                self.state = .idle
                body.writeBuffer(&chunk)
                self.state = .collecting(close: close, body: body)
            }
        case (.collecting(let close, let body), .end):
            self.state = .idle
            self.answer(body, close: close, context: context)
        case (.discarding, .body):
            break
        case (.discarding(let close), .end):
            self.state = .idle
            let refusal = Aria2Envelope.error(id: .null, Aria2Fault(code: -32600, "Request too large.")).bytes
            self.respond(refusal, status: .contentTooLarge, close: close, context: context)
        case (.idle, .body), (.idle, .end), (.collecting, .head), (.discarding, .head), (.waiting, _):
            // The HTTP decoder never sends these; a stray part is not ours to pass on.
            break
        }
    }

    private func answer(_ body: ByteBuffer, close: Bool, context: ChannelHandlerContext) {
        let envelope = Aria2Envelope.parse(body.readableBytesView)
        if let answer = self.methods.answerNow(envelope) {
            self.respond(answer.bytes, status: .ok, close: close, context: context)
            return
        }
        self.state = .waiting
        let methods = self.methods
        let promise = context.eventLoop.makePromise(of: [UInt8].self)
        promise.completeWithTask { await methods.answer(envelope).bytes }
        promise.futureResult.assumeIsolated().whenSuccess { bytes in
            self.respond(bytes, status: .ok, close: close, context: context)
            self.state = .idle
            self.release(context: context)
        }
    }

    /// Handles the requests that waited behind a change, then reads on if a read was asked for.
    private func release(context: ChannelHandlerContext) {
        let passed = self.unanswered
        defer {
            // What was passed on outside a read cycle reaches the router at the end of one.
            if self.unanswered != passed { context.fireChannelReadComplete() }
        }
        while let part = self.held.popFirst() {
            self.handle(part, context: context)
            if case .waiting = self.state { return }
        }
        if self.readPending {
            self.readPending = false
            context.read()
        }
    }

    func read(context: ChannelHandlerContext) {
        if case .waiting = self.state {
            self.readPending = true
            return
        }
        context.read()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = self.unwrapOutboundIn(data) { self.unanswered = max(0, self.unanswered - 1) }
        context.write(data, promise: promise)
    }

    private func respond(_ bytes: [UInt8], status: HTTPResponse.Status, close: Bool, context: ChannelHandlerContext) {
        var fields = Aria2RPCServer.corsHeaders
        fields[.contentType] = "application/json-rpc"
        fields[.cacheControl] = "no-store"
        fields[.contentLength] = String(bytes.count)
        if close { fields[.connection] = "close" }
        var buffer = context.channel.allocator.buffer(capacity: bytes.count)
        buffer.writeBytes(bytes)
        context.write(self.wrapOutboundOut(.head(HTTPResponse(status: status, headerFields: fields))), promise: nil)
        context.write(self.wrapOutboundOut(.body(buffer)), promise: nil)
        if close {
            context.writeAndFlush(self.wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in
                context.close(promise: nil)
            }
        } else {
            context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
        }
    }

    /// `/jsonrpc`, with or without a query.
    private static func isRPCPath(_ path: String?) -> Bool {
        guard let path else { return false }
        return path == "/jsonrpc" || path.hasPrefix("/jsonrpc?")
    }
}
