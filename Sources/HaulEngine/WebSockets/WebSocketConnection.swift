import Foundation
import HaulCore
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket

/// One WebSocket client connection on SwiftNIO's WebSocket support: the HTTP/1.1 upgrade
/// (`NIOWebSocketClientUpgrader`), TLS for `wss:` (NIOSSL, the session's trust rules), messages
/// reassembled from fragments (`NIOWebSocketFrameAggregator`, bounded by the maximum message
/// size), pings answered, pongs matched to pings in order, and the closing handshake.
///
/// All state lives in ``WebSocketFrameHandler`` on the connection's event loop; the methods
/// here hop onto it. Every send, receive and ping completes exactly once.
package final class WebSocketConnection: Sendable {
    package enum Message: Sendable, Hashable {
        case text(String)
        case data(Data)
    }

    /// What the server answered to the upgrade.
    package struct Opened: Sendable {
        package var connection: WebSocketConnection
        /// The subprotocol the server chose (`Sec-WebSocket-Protocol`), if any.
        package var selectedProtocol: String?
        package var response: ResponseInfo
    }

    private let channel: any Channel
    private let handler: WebSocketFrameHandler

    private init(channel: any Channel, handler: WebSocketFrameHandler) {
        self.channel = channel
        self.handler = handler
    }

    /// Connects to `url` (`ws:` or `wss:`) and upgrades. `tls` is used for `wss:`; `verify`
    /// replaces the certificate check when the session's delegate judges trust.
    package static func connect(
        url: URL,
        headers: HTTPHeaderFields,
        protocols: [String],
        maximumMessageSize: Int,
        tls: TLSConfiguration,
        verify: NIOSSLCustomVerificationCallback?,
        proxy: ProxySettings.Server? = nil,
        connectTimeout: TimeAmount,
        eventLoop: any EventLoop
    ) async throws(URLError) -> Opened {
        guard let scheme = url.scheme?.lowercased(), scheme == "ws" || scheme == "wss", let host = url.host, !host.isEmpty else {
            throw URLError(.badURL, userInfo: [NSLocalizedDescriptionKey: "a WebSocket URL is ws:// or wss:// with a host", NSURLErrorFailingURLErrorKey: url])
        }
        let secure = scheme == "wss"
        let port = url.port ?? (secure ? 443 : 80)
        var path = url.path.isEmpty ? "/" : url.path
        if let query = url.query { path += "?" + query }
        let handler = WebSocketFrameHandler(maximumMessageSize: maximumMessageSize)
        let upgraded = eventLoop.makePromise(of: HTTPResponseHead.self)
        let sslContext: NIOSSLContext?
        do { sslContext = secure ? try NIOSSLContext(configuration: tls) : nil } catch {
            throw URLError(.secureConnectionFailed, userInfo: [NSLocalizedDescriptionKey: "\(error)"])
        }
        // Through a proxy: a CONNECT tunnel first (as AsyncHTTPClient does for every proxied
        // request), then TLS and the upgrade inside it.
        let tunnel = eventLoop.makePromise(of: Void.self)
        let channel: any Channel
        do {
            channel = try await ClientBootstrap(group: eventLoop)
                .connectTimeout(connectTimeout)
                .channelOption(.tcpOption(.tcp_nodelay), value: 1)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        if let proxy {
                            try channel.pipeline.syncOperations.addHandler(ConnectTunnelHandler(target: "\(host):\(port)", proxy: proxy, promise: tunnel))
                        } else {
                            tunnel.succeed(())
                        }
                    }
                }
                .connect(host: proxy?.host ?? host, port: proxy?.port ?? port)
                .get()
            try await tunnel.futureResult.get()
            try await channel.eventLoop.submit {
                let pipeline = channel.pipeline.syncOperations
                if let sslContext {
                    let serverHostname = host.first?.isNumber == true || host.contains(":") ? nil : host
                    let tlsHandler = try verify.map {
                        try NIOSSLClientHandler(context: sslContext, serverHostname: serverHostname, customVerificationCallback: $0)
                    } ?? NIOSSLClientHandler(context: sslContext, serverHostname: serverHostname)
                    try pipeline.addHandler(tlsHandler)
                }
                let upgrader = NIOWebSocketClientUpgrader(
                    maxFrameSize: max(1 << 14, min(maximumMessageSize, Int(UInt32.max))),
                    automaticErrorHandling: true
                ) { channel, response in
                    channel.eventLoop.makeCompletedFuture {
                        // The refusal catcher sits after the upgrade's handlers: it goes.
                        _ = channel.pipeline.syncOperations.removeHandler(name: "upgrade-refusal")
                        try channel.pipeline.syncOperations.addHandler(NIOWebSocketFrameAggregator(
                            minNonFinalFragmentSize: 0,
                            maxAccumulatedFrameCount: 1 << 16,
                            maxAccumulatedFrameSize: maximumMessageSize
                        ))
                        try channel.pipeline.syncOperations.addHandler(handler)
                        // Open on the next turn of the loop: the upgrade handler (an HTTP handler
                        // for writes) removes itself once this returns, and a frame written
                        // before would reach it.
                        channel.eventLoop.execute { upgraded.succeed(response) }
                    }
                }
                try pipeline.addHTTPClientHandlers(
                    leftOverBytesStrategy: .forwardBytes,
                    withClientUpgrade: (upgraders: [upgrader], completionHandler: { _ in })
                )
                try pipeline.addHandler(UpgradeRefusalHandler(promise: upgraded), name: "upgrade-refusal")
            }.get()
        } catch {
            upgraded.fail(error)
            tunnel.fail(error)
            throw Self.urlError(error, url: url)
        }
        var head = HTTPRequestHead(version: .http1_1, method: .GET, uri: path)
        head.headers.add(name: "Host", value: url.port.map { "\(host):\($0)" } ?? host)
        for field in headers.fields { head.headers.add(name: field.name, value: field.value) }
        if !protocols.isEmpty { head.headers.replaceOrAdd(name: "Sec-WebSocket-Protocol", value: protocols.joined(separator: ", ")) }
        head.headers.add(name: "Content-Length", value: "0")
        channel.write(HTTPClientRequestPart.head(head), promise: nil)
        channel.writeAndFlush(HTTPClientRequestPart.end(nil), promise: nil)
        channel.closeFuture.whenComplete { _ in
            upgraded.fail(URLError(.networkConnectionLost, userInfo: [NSLocalizedDescriptionKey: "the connection closed before the WebSocket opened"]))
        }
        let response: HTTPResponseHead
        do {
            response = try await upgraded.futureResult.get()
        } catch {
            channel.close(promise: nil)
            throw Self.urlError(error, url: url)
        }
        var fields = HTTPHeaderFields()
        for (name, value) in response.headers { fields.add(name: name, value: value) }
        let selected = response.headers.first(name: "Sec-WebSocket-Protocol")
        if let selected, !protocols.contains(selected) {
            channel.close(promise: nil)
            throw URLError(.badServerResponse, userInfo: [NSLocalizedDescriptionKey: "the server chose the subprotocol '\(selected)', which was not offered"])
        }
        let info = ResponseInfo(url: url, statusCode: Int(response.status.code), headers: fields, httpVersion: "HTTP/1.1")
        return Opened(connection: WebSocketConnection(channel: channel, handler: handler), selectedProtocol: selected, response: info)
    }

    /// Sends one message; returns once it is handed to the kernel.
    package func send(_ message: Message) async throws(URLError) {
        let promise = self.channel.eventLoop.makePromise(of: Void.self)
        let handler = self.handler
        self.channel.eventLoop.execute { handler.send(message, promise: promise) }
        do { try await promise.futureResult.get() } catch { throw Self.urlError(error, url: nil) }
    }

    /// The next message, waiting for it; fails once the connection is closed and nothing is left.
    package func receive() async throws(URLError) -> Message {
        let promise = self.channel.eventLoop.makePromise(of: Message.self)
        let handler = self.handler
        self.channel.eventLoop.execute { handler.enqueueReceive(promise) }
        do { return try await promise.futureResult.get() } catch { throw Self.urlError(error, url: nil) }
    }

    /// Sends a ping; `pongReceived` runs once, on the connection's event loop, when its pong
    /// arrives (`nil`; pongs answer pings in order) or the connection ends first (the error).
    /// No task is involved: a ping is answered even while the cooperative pool is busy.
    package func ping(_ pongReceived: @escaping @Sendable (URLError?) -> Void) {
        let promise = self.channel.eventLoop.makePromise(of: Void.self)
        let handler = self.handler
        self.channel.eventLoop.execute { handler.ping(promise: promise) }
        promise.futureResult.whenComplete { result in
            switch result {
            case .success: pongReceived(nil)
            case .failure(let error): pongReceived(Self.urlError(error, url: nil))
            }
        }
    }

    /// Starts the closing handshake with `code` and `reason`; the connection closes when the
    /// server answers (or after `timeout`).
    package func close(code: UInt16, reason: Data?, timeout: TimeAmount = .seconds(5)) {
        let handler = self.handler
        let channel = self.channel
        channel.eventLoop.execute {
            handler.startClose(code: code, reason: reason)
            channel.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
        }
    }

    /// The close code and reason the server sent (or the one used when the connection failed).
    package var closeStatus: (code: UInt16, reason: Data?)? {
        get async {
            let promise = self.channel.eventLoop.makePromise(of: Optional<WebSocketFrameHandler.CloseStatus>.self)
            let handler = self.handler
            self.channel.eventLoop.execute { promise.succeed(handler.closeStatus) }
            guard let status = try? await promise.futureResult.get() else { return nil }
            return (status.code, status.reason)
        }
    }

    /// Resolves once the connection has closed.
    package func closed() async {
        try? await self.channel.closeFuture.get()
    }

    /// A failure as `URLError`: a message over the size limit is `dataLengthExceedsMaximum`;
    /// the rest map as a stream connection's (untrusted certificate, TLS, timeout, refused …).
    static func urlError(_ error: any Error, url: URL?) -> URLError {
        if WebSocketFrameHandler.isTooBig(error) {
            return URLError(.dataLengthExceedsMaximum, userInfo: [NSLocalizedDescriptionKey: "a WebSocket message is larger than maximumMessageSize"])
        }
        return StreamConnection.urlError(error, host: url?.host ?? "the server")
    }
}

/// Opens a CONNECT tunnel through an HTTP proxy: sends the request when the connection is up,
/// reads the proxy's answer, and leaves the pipeline on `200` (anything else fails).
private final class ConnectTunnelHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let target: String
    let proxy: ProxySettings.Server
    let promise: EventLoopPromise<Void>
    private var answer: [UInt8] = []

    init(target: String, proxy: ProxySettings.Server, promise: EventLoopPromise<Void>) {
        self.target = target
        self.proxy = proxy
        self.promise = promise
    }

    func channelActive(context: ChannelHandlerContext) {
        var request = "CONNECT \(self.target) HTTP/1.1\r\nHost: \(self.target)\r\n"
        if let user = self.proxy.username {
            let credentials = Data("\(user):\(self.proxy.password ?? "")".utf8).base64EncodedString()
            request += "Proxy-Authorization: Basic \(credentials)\r\n"
        }
        request += "\r\n"
        context.writeAndFlush(self.wrapOutboundOut(context.channel.allocator.buffer(string: request)), promise: nil)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var buffer = self.unwrapInboundIn(data)
        self.answer += buffer.readBytes(length: buffer.readableBytes) ?? []
        guard let end = self.answer.firstRange(of: Array("\r\n\r\n".utf8)) else {
            if self.answer.count > 16_384 { self.fail(context, "the proxy's answer to CONNECT is too long") }
            return
        }
        let head = String(decoding: self.answer[..<end.lowerBound], as: UTF8.self)
        let status = head.split(separator: " ", maxSplits: 2).dropFirst().first.flatMap { Int($0) }
        guard status == 200 else {
            let code: URLError.Code = status == 407 ? .userAuthenticationRequired : .cannotConnectToHost
            self.promise.fail(URLError(code, userInfo: [NSLocalizedDescriptionKey: "the proxy refused the tunnel: \(head.split(separator: "\r\n").first ?? "")"]))
            context.close(promise: nil)
            return
        }
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        self.promise.succeed(())
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.promise.fail(URLError(.cannotConnectToHost, userInfo: [NSLocalizedDescriptionKey: "the proxy closed the connection"]))
        context.fireChannelInactive()
    }

    private func fail(_ context: ChannelHandlerContext, _ message: String) {
        self.promise.fail(URLError(.cannotConnectToHost, userInfo: [NSLocalizedDescriptionKey: message]))
        context.close(promise: nil)
    }
}

/// Catches a plain HTTP answer to the upgrade request (no `101`): the WebSocket does not open.
private final class UpgradeRefusalHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart

    let promise: EventLoopPromise<HTTPResponseHead>

    init(promise: EventLoopPromise<HTTPResponseHead>) {
        self.promise = promise
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(let head) = self.unwrapInboundIn(data) {
            self.promise.fail(URLError(.badServerResponse, userInfo: [
                NSLocalizedDescriptionKey: "the server answered the WebSocket upgrade with \(head.status.code) \(head.status.reasonPhrase)",
            ]))
            context.close(promise: nil)
        }
    }

    /// A failure before the upgrade (TLS, most often) is why the WebSocket did not open; the
    /// close that follows must not replace it with "connection lost".
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.promise.fail(error)
        context.close(promise: nil)
    }
}

/// The WebSocket's state on its event loop: messages waiting for a receive and receives waiting
/// for a message, pings waiting for their pongs, and the closing handshake.
final class WebSocketFrameHandler: ChannelInboundHandler, @unchecked Sendable {
    // @unchecked: every member is touched on the channel's event loop only.
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    struct CloseStatus {
        var code: UInt16
        var reason: Data?
    }

    private let maximumMessageSize: Int
    private var context: ChannelHandlerContext?
    private var messages: [WebSocketConnection.Message] = []
    private var receivers: [EventLoopPromise<WebSocketConnection.Message>] = []
    private var pongWaiters: [EventLoopPromise<Void>] = []
    private(set) var closeStatus: CloseStatus?
    private var sentClose = false
    private var failure: (any Error)?

    init(maximumMessageSize: Int) {
        self.maximumMessageSize = maximumMessageSize
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = self.unwrapInboundIn(data)
        switch frame.opcode {
        case .text:
            var data = frame.unmaskedData
            self.deliver(.text(data.readString(length: data.readableBytes) ?? ""))
        case .binary:
            var data = frame.unmaskedData
            self.deliver(.data(Data(data.readBytes(length: data.readableBytes) ?? [])))
        case .ping:
            let pong = WebSocketFrame(fin: true, opcode: .pong, maskKey: .random(), data: frame.unmaskedData)
            context.writeAndFlush(self.wrapOutboundOut(pong), promise: nil)
        case .pong:
            if !self.pongWaiters.isEmpty { self.pongWaiters.removeFirst().succeed(()) }
        case .connectionClose:
            var data = frame.unmaskedData
            let code = data.readInteger(as: UInt16.self) ?? 1005
            let reason = data.readableBytes > 0 ? Data(data.readBytes(length: data.readableBytes) ?? []) : nil
            if self.closeStatus == nil { self.closeStatus = CloseStatus(code: code, reason: reason) }
            if !self.sentClose {
                // Echo the server's close, as the protocol asks, then let the server close.
                self.sentClose = true
                var echo = context.channel.allocator.buffer(capacity: 2)
                echo.writeInteger(code == 1005 ? 1000 : code)
                context.writeAndFlush(self.wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: echo)), promise: nil)
            }
            context.close(promise: nil)
        default:
            break
        }
    }

    private func deliver(_ message: WebSocketConnection.Message) {
        if self.receivers.isEmpty {
            self.messages.append(message)
        } else {
            self.receivers.removeFirst().succeed(message)
        }
    }

    func enqueueReceive(_ promise: EventLoopPromise<WebSocketConnection.Message>) {
        if !self.messages.isEmpty {
            promise.succeed(self.messages.removeFirst())
        } else if let failure = self.endError() {
            promise.fail(failure)
        } else {
            self.receivers.append(promise)
        }
    }

    func send(_ message: WebSocketConnection.Message, promise: EventLoopPromise<Void>) {
        guard let context = self.context, context.channel.isActive, !self.sentClose else {
            promise.fail(self.endError() ?? URLError(.networkConnectionLost))
            return
        }
        var buffer: ByteBuffer
        let opcode: WebSocketOpcode
        switch message {
        case .text(let text):
            buffer = context.channel.allocator.buffer(string: text)
            opcode = .text
        case .data(let data):
            buffer = context.channel.allocator.buffer(bytes: data)
            opcode = .binary
        }
        guard buffer.readableBytes <= self.maximumMessageSize else {
            promise.fail(URLError(.dataLengthExceedsMaximum, userInfo: [NSLocalizedDescriptionKey: "the message is larger than maximumMessageSize"]))
            buffer.clear()
            return
        }
        context.writeAndFlush(self.wrapOutboundOut(WebSocketFrame(fin: true, opcode: opcode, maskKey: .random(), data: buffer)), promise: promise)
    }

    func ping(promise: EventLoopPromise<Void>) {
        guard let context = self.context, context.channel.isActive, !self.sentClose else {
            promise.fail(self.endError() ?? URLError(.networkConnectionLost))
            return
        }
        self.pongWaiters.append(promise)
        let ping = WebSocketFrame(fin: true, opcode: .ping, maskKey: .random(), data: context.channel.allocator.buffer(capacity: 0))
        // A ping that never left waits for no pong: its handler hears why at once.
        let written = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(self.wrapOutboundOut(ping), promise: written)
        written.futureResult.whenFailure { error in
            guard let index = self.pongWaiters.firstIndex(where: { $0.futureResult === promise.futureResult }) else { return }
            self.pongWaiters.remove(at: index).fail(error)
        }
    }

    func startClose(code: UInt16, reason: Data?) {
        guard let context = self.context, !self.sentClose else { return }
        self.sentClose = true
        if self.closeStatus == nil { self.closeStatus = CloseStatus(code: code, reason: reason) }
        var payload = context.channel.allocator.buffer(capacity: 2 + (reason?.count ?? 0))
        payload.writeInteger(code)
        if let reason { payload.writeBytes(reason.prefix(123)) }
        context.writeAndFlush(self.wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: payload)), promise: nil)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.failure = error
        if self.closeStatus == nil, Self.isTooBig(error) {
            // Tell the server why (1009, as the protocol asks), then close.
            self.closeStatus = CloseStatus(code: 1009, reason: nil)
            if !self.sentClose {
                self.sentClose = true
                var payload = context.channel.allocator.buffer(capacity: 2)
                payload.writeInteger(UInt16(1009))
                context.writeAndFlush(self.wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: payload)))
                    .whenComplete { _ in context.close(promise: nil) }
                return
            }
        }
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if self.closeStatus == nil { self.closeStatus = CloseStatus(code: 1006, reason: nil) }
        let error = self.endError() ?? URLError(.networkConnectionLost)
        let (receivers, pongs) = (self.receivers, self.pongWaiters)
        self.receivers = []
        self.pongWaiters = []
        for receiver in receivers { receiver.fail(error) }
        for pong in pongs { pong.fail(error) }
        context.fireChannelInactive()
    }

    /// A message or frame over the maximum message size.
    static func isTooBig(_ error: any Error) -> Bool {
        switch error {
        case NIOWebSocketError.invalidFrameLength, NIOWebSocketFrameAggregator.Error.accumulatedFrameSizeIsTooLarge,
            NIOWebSocketFrameAggregator.Error.tooManyFragments:
            return true
        default:
            return false
        }
    }

    /// Why nothing more can be received, once the connection is closing or closed.
    private func endError() -> (any Error)? {
        if let failure = self.failure { return WebSocketConnection.urlError(failure, url: nil) }
        guard let context = self.context, !context.channel.isActive || self.closeStatus != nil else { return nil }
        guard let status = self.closeStatus else { return URLError(.networkConnectionLost) }
        if status.code == 1000 || status.code == 1001 {
            return URLError(.networkConnectionLost, userInfo: [NSLocalizedDescriptionKey: "the WebSocket is closed (\(status.code))"])
        }
        return URLError(.networkConnectionLost, userInfo: [NSLocalizedDescriptionKey: "the WebSocket closed with \(status.code)"])
    }
}
