import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// A forward proxy for tests: answers `CONNECT host:port` by opening a tunnel to a loopback
/// server (every host name maps to 127.0.0.1 and the port given at start, so nothing but
/// loopback is ever contacted), and records the targets asked for. Other requests get 405.
public final class LoopbackTunnelProxy: Sendable {
    private let channel: any Channel
    public let port: Int
    private let targets = Mutex<[String]>([])

    private init(channel: any Channel, port: Int) {
        self.channel = channel
        self.port = port
    }

    /// Starts on 127.0.0.1 (any free port), tunnelling to `127.0.0.1:originPort`. With
    /// `credentials` ("user:password"), a CONNECT without the matching
    /// `Proxy-Authorization: Basic` gets 407.
    public static func start(originPort: Int, credentials: String? = nil) async throws -> LoopbackTunnelProxy {
        let expected = credentials.map { "Basic " + Data($0.utf8).base64EncodedString() }
        let box = Mutex<LoopbackTunnelProxy?>(nil)
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let decoder = ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .forwardBytes))
                    let encoder = HTTPResponseEncoder()
                    try channel.pipeline.syncOperations.addHandler(encoder)
                    try channel.pipeline.syncOperations.addHandler(decoder)
                    try channel.pipeline.syncOperations.addHandler(
                        ConnectHandler(originPort: originPort, expectedAuthorization: expected, decoder: decoder, encoder: encoder) { target in
                            box.withLock { $0 }?.targets.withLock { $0.append(target) }
                        }
                    )
                }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        let proxy = LoopbackTunnelProxy(channel: channel, port: channel.localAddress?.port ?? 0)
        box.withLock { $0 = proxy }
        return proxy
    }

    /// The `host:port` of every CONNECT received, in order.
    public var connectTargets: [String] { self.targets.withLock { $0 } }

    public func shutdown() async throws {
        try await self.channel.close()
    }
}

private final class ConnectHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let originPort: Int
    private let expectedAuthorization: String?
    private let decoder: ByteToMessageHandler<HTTPRequestDecoder>
    private let encoder: HTTPResponseEncoder
    private let record: @Sendable (String) -> Void
    private var target: String?

    init(
        originPort: Int,
        expectedAuthorization: String?,
        decoder: ByteToMessageHandler<HTTPRequestDecoder>,
        encoder: HTTPResponseEncoder,
        record: @escaping @Sendable (String) -> Void
    ) {
        self.originPort = originPort
        self.expectedAuthorization = expectedAuthorization
        self.decoder = decoder
        self.encoder = encoder
        self.record = record
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // The rest of the CONNECT request (its end) is not forwarded; the client sends nothing
        // else before the 200. Bytes after it reach the glue once the decoder is gone.
        if self.target != nil { return }
        guard case .head(let head) = self.unwrapInboundIn(data) else { return }
        guard head.method == .CONNECT else {
            let response = HTTPResponseHead(version: head.version, status: .methodNotAllowed, headers: ["Content-Length": "0", "Connection": "close"])
            context.write(self.wrapOutboundOut(.head(response)), promise: nil)
            context.writeAndFlush(self.wrapOutboundOut(.end(nil))).whenComplete { _ in context.close(promise: nil) }
            return
        }
        if let expected = self.expectedAuthorization, head.headers.first(name: "Proxy-Authorization") != expected {
            let response = HTTPResponseHead(
                version: head.version,
                status: .proxyAuthenticationRequired,
                headers: ["Proxy-Authenticate": "Basic realm=\"loopback\"", "Content-Length": "0", "Connection": "close"]
            )
            context.write(self.wrapOutboundOut(.head(response)), promise: nil)
            context.writeAndFlush(self.wrapOutboundOut(.end(nil))).whenComplete { _ in context.close(promise: nil) }
            self.record("refused " + head.uri)
            return
        }
        self.target = head.uri
        self.record(head.uri)
        let client = context.channel
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        let handlerBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        ClientBootstrap(group: context.eventLoop)
            .connect(host: "127.0.0.1", port: self.originPort)
            .whenComplete { result in
                let context = loopBound.value
                let handler = handlerBound.value
                switch result {
                case .failure:
                    let response = HTTPResponseHead(version: .http1_1, status: .badGateway, headers: ["Content-Length": "0", "Connection": "close"])
                    context.write(handler.wrapOutboundOut(.head(response)), promise: nil)
                    context.writeAndFlush(handler.wrapOutboundOut(.end(nil))).whenComplete { _ in context.close(promise: nil) }
                case .success(let origin):
                    // No body: without a length the encoder would frame one as chunked, and its
                    // terminator would land in the tunnel (RFC 9110 §9.3.6: a 2xx has none).
                    let response = HTTPResponseHead(version: .http1_1, status: .ok, headers: ["Content-Length": "0"])
                    context.write(handler.wrapOutboundOut(.head(response)), promise: nil)
                    context.writeAndFlush(handler.wrapOutboundOut(.end(nil))).whenComplete { _ in
                        handler.glue(context: context, client: client, origin: origin)
                    }
                }
            }
    }

    private func glue(context: ChannelHandlerContext, client: any Channel, origin: any Channel) {
        let (clientSide, originSide) = GlueHandler.matchedPair()
        client.pipeline.syncOperations.removeHandler(self.encoder, promise: nil)
        _ = try? client.pipeline.syncOperations.addHandler(clientSide)
        _ = try? origin.pipeline.syncOperations.addHandler(originSide)
        client.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        client.pipeline.syncOperations.removeHandler(self.decoder, promise: nil)
    }
}

/// Copies bytes between two channels (NIO's classic glue).
private final class GlueHandler: ChannelDuplexHandler {
    typealias InboundIn = NIOAny
    typealias OutboundIn = NIOAny
    typealias OutboundOut = NIOAny

    private var partner: GlueHandler?
    private var context: ChannelHandlerContext?

    static func matchedPair() -> (GlueHandler, GlueHandler) {
        let first = GlueHandler()
        let second = GlueHandler()
        first.partner = second
        second.partner = first
        return (first, second)
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        self.partner = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.partner?.context?.writeAndFlush(data, promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.partner?.context?.close(promise: nil)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
