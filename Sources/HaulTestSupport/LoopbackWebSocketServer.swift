import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket

/// A WebSocket server on 127.0.0.1 (SwiftNIO's server upgrader), plain or TLS, for the tests
/// of WebSocket tasks. Every path upgrades but `/refuse` (answered 403). It answers pings,
/// echoes every message, and obeys text commands:
/// - `fragments:N:SIZE` — sends a binary message of SIZE bytes (byte i = i mod 251) in N frames;
/// - `close:CODE:REASON` — starts the closing handshake with CODE and REASON;
/// - `drop` — closes the TCP connection without a closing handshake;
/// - `headers` — answers with the upgrade request's headers, `Name: value` per line.
/// Of the subprotocols offered it chooses `chat.v2` when offered, else none.
public final class LoopbackWebSocketServer: Sendable {
    private let channel: any Channel
    public let port: Int
    public let isSecure: Bool

    private init(channel: any Channel, port: Int, isSecure: Bool) {
        self.channel = channel
        self.port = port
        self.isSecure = isSecure
    }

    public static func start(tls: TLSConfiguration? = nil) async throws -> LoopbackWebSocketServer {
        let sslContext = try tls.map { try NIOSSLContext(configuration: $0) }
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let sslContext { try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: sslContext)) }
                    let upgrader = NIOWebSocketServerUpgrader(
                        maxFrameSize: 1 << 24,
                        automaticErrorHandling: true,
                        shouldUpgrade: { channel, head in
                            guard head.uri != "/refuse" else { return channel.eventLoop.makeSucceededFuture(nil) }
                            var headers = HTTPHeaders()
                            let offered = head.headers[canonicalForm: "Sec-WebSocket-Protocol"].map(String.init)
                            if offered.contains("chat.v2") { headers.add(name: "Sec-WebSocket-Protocol", value: "chat.v2") }
                            return channel.eventLoop.makeSucceededFuture(headers)
                        },
                        upgradePipelineHandler: { channel, head in
                            let requestHeaders = head.headers.map { "\($0.name): \($0.value)" }.joined(separator: "\n")
                            return channel.eventLoop.makeCompletedFuture {
                                // The plain-HTTP answerer sits after the upgrade's handlers: it goes.
                                _ = channel.pipeline.syncOperations.removeHandler(name: "refuse")
                                try channel.pipeline.syncOperations.addHandler(NIOWebSocketFrameAggregator(
                                    minNonFinalFragmentSize: 0, maxAccumulatedFrameCount: 1 << 16, maxAccumulatedFrameSize: 1 << 24
                                ))
                                try channel.pipeline.syncOperations.addHandler(ServerFrameHandler(requestHeaders: requestHeaders))
                            }
                        }
                    )
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(
                        withServerUpgrade: (upgraders: [upgrader], completionHandler: { _ in })
                    )
                    try channel.pipeline.syncOperations.addHandler(RefusingHTTPHandler(), name: "refuse")
                }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        return LoopbackWebSocketServer(channel: channel, port: channel.localAddress?.port ?? 0, isSecure: tls != nil)
    }

    public func url(_ path: String) -> URL {
        URL(string: "\(self.isSecure ? "wss" : "ws")://127.0.0.1:\(self.port)\(path)")!
    }

    public func shutdown() async throws {
        try await self.channel.close()
    }
}

/// Answers a request that was not upgraded with 403.
private final class RefusingHTTPHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .end = self.unwrapInboundIn(data) else { return }
        var headers = HTTPHeaders()
        headers.add(name: "Content-Length", value: "0")
        headers.add(name: "Connection", value: "close")
        context.write(self.wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .forbidden, headers: headers))), promise: nil)
        context.writeAndFlush(self.wrapOutboundOut(.end(nil))).whenComplete { _ in context.close(promise: nil) }
    }
}

private final class ServerFrameHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    let requestHeaders: String
    private var closing = false

    init(requestHeaders: String) {
        self.requestHeaders = requestHeaders
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = self.unwrapInboundIn(data)
        switch frame.opcode {
        case .ping:
            context.writeAndFlush(self.wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData)), promise: nil)
        case .connectionClose:
            if !self.closing {
                self.closing = true
                var data = frame.unmaskedData
                var echo = context.channel.allocator.buffer(capacity: 2)
                echo.writeInteger(data.readInteger(as: UInt16.self) ?? 1000)
                context.writeAndFlush(self.wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: echo)))
                    .whenComplete { _ in context.close(promise: nil) }
            } else {
                context.close(promise: nil)
            }
        case .text:
            var data = frame.unmaskedData
            let text = data.readString(length: data.readableBytes) ?? ""
            self.command(text, context: context)
        case .binary:
            context.writeAndFlush(self.wrapOutboundOut(WebSocketFrame(fin: true, opcode: .binary, data: frame.unmaskedData)), promise: nil)
        default:
            break
        }
    }

    private func command(_ text: String, context: ChannelHandlerContext) {
        let parts = text.split(separator: ":", maxSplits: 2).map(String.init)
        switch parts.first {
        case "fragments" where parts.count == 3:
            let count = max(1, Int(parts[1]) ?? 1)
            let size = Int(parts[2]) ?? 0
            let bytes = (0..<size).map { UInt8($0 % 251) }
            let chunk = max(1, (size + count - 1) / count)
            var index = 0
            var first = true
            repeat {
                let end = min(size, index + chunk)
                let fin = end >= size
                let buffer = context.channel.allocator.buffer(bytes: bytes[index..<end])
                context.write(self.wrapOutboundOut(WebSocketFrame(fin: fin, opcode: first ? .binary : .continuation, data: buffer)), promise: nil)
                first = false
                index = end
            } while index < size
            context.flush()
        case "close" where parts.count >= 2:
            self.closing = true
            var payload = context.channel.allocator.buffer(capacity: 64)
            payload.writeInteger(UInt16(parts[1]) ?? 1000)
            if parts.count == 3 { payload.writeString(parts[2]) }
            context.writeAndFlush(self.wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: payload)), promise: nil)
        case "drop":
            context.close(promise: nil)
        case "headers":
            let buffer = context.channel.allocator.buffer(string: self.requestHeaders)
            context.writeAndFlush(self.wrapOutboundOut(WebSocketFrame(fin: true, opcode: .text, data: buffer)), promise: nil)
        default:
            let buffer = context.channel.allocator.buffer(string: text)
            context.writeAndFlush(self.wrapOutboundOut(WebSocketFrame(fin: true, opcode: .text, data: buffer)), promise: nil)
        }
    }
}
