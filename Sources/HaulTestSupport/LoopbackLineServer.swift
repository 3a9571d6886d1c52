import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// A line-oriented TCP server on 127.0.0.1 for stream-task tests. Each line gets an answer:
/// - `STARTTLS` → `READY`, then TLS with the configured identity (STARTTLS-style upgrade);
/// - `BULK N` → N bytes of ``TestContent`` (seed 9), no newline;
/// - `QUIT` → `BYE`, then the server closes its output (the client sees end of input);
/// - anything else → `echo: LINE`.
/// When the client ends its output the server answers `EOF-SEEN` and closes.
public final class LoopbackLineServer: Sendable {
    private let channel: any Channel
    public let port: Int
    private let seenLines = Mutex<[String]>([])

    private init(channel: any Channel) {
        self.channel = channel
        self.port = channel.localAddress?.port ?? 0
    }

    /// Every line received so far, in order (after TLS: the decrypted lines).
    public var lines: [String] { self.seenLines.withLock { $0 } }

    func record(_ line: String) { self.seenLines.withLock { $0.append(line) } }

    public static func start(tls: TLSConfiguration? = nil) async throws -> LoopbackLineServer {
        let context = try tls.map { try NIOSSLContext(configuration: $0) }
        let box = Mutex<LoopbackLineServer?>(nil)
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.allowRemoteHalfClosure, value: true)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(LineHandler(server: box.withLock { $0 }!, tls: context))
                }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        let server = LoopbackLineServer(channel: channel)
        box.withLock { $0 = server }
        return server
    }

    public func shutdown() async throws {
        try await self.channel.close()
    }
}

private final class LineHandler: ChannelInboundHandler, @unchecked Sendable {
    // @unchecked: used on its channel's event loop only.
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let server: LoopbackLineServer
    let tls: NIOSSLContext?
    var pending = ByteBuffer()

    init(server: LoopbackLineServer, tls: NIOSSLContext?) {
        self.server = server
        self.tls = tls
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = self.unwrapInboundIn(data)
        self.pending.writeBuffer(&bytes)
        while let newline = self.pending.readableBytesView.firstIndex(of: UInt8(ascii: "\n")) {
            let length = newline - self.pending.readerIndex
            let line = self.pending.readString(length: length) ?? ""
            self.pending.moveReaderIndex(forwardBy: 1)
            self.server.record(line)
            self.answer(line, context: context)
        }
        self.pending.discardReadBytes()
    }

    private func send(_ text: String, context: ChannelHandlerContext) {
        context.writeAndFlush(self.wrapOutboundOut(ByteBuffer(string: text)), promise: nil)
    }

    private func answer(_ line: String, context: ChannelHandlerContext) {
        if line == "STARTTLS", let tls {
            self.send("READY\n", context: context)
            try? context.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls), position: .first)
        } else if line.hasPrefix("BULK "), let count = Int64(line.dropFirst(5)) {
            context.writeAndFlush(self.wrapOutboundOut(ByteBuffer(bytes: TestContent.bytes(0..<count, seed: 9))), promise: nil)
        } else if line == "QUIT" {
            self.send("BYE\n", context: context)
            context.close(mode: .output, promise: nil)
        } else {
            self.send("echo: \(line)\n", context: context)
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed {
            self.send("EOF-SEEN\n", context: context)
            context.close(promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
