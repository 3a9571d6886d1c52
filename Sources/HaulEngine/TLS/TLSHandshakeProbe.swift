import HaulCore
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import Synchronization

/// Opens a TLS connection to a server only to learn its certificate chain or whether it passes
/// verification, then closes it. The engine's server-trust gate runs it once per host before
/// the first request, so the session's delegate can judge the chain.
enum TLSHandshakeProbe {
    /// The chain the server presents (leaf first), accepted without verification.
    static func presentedChain(
        host: String,
        port: Int,
        proxy: ProxySettings.Server?,
        configuration: TLSConfiguration,
        connectTimeout: TimeAmount,
        eventLoop: any EventLoop
    ) async throws -> [NIOSSLCertificate] {
        let captured = Mutex<[NIOSSLCertificate]>([])
        do {
            try await self.handshake(host: host, port: port, proxy: proxy, configuration: configuration, connectTimeout: connectTimeout, eventLoop: eventLoop) { certificates, promise in
            captured.withLock { $0 = certificates }
            promise.succeed(.certificateVerified)
        }
        } catch let error as ConnectFailure {
            throw error.underlying
        }
        return captured.withLock { $0 }
    }

    /// Whether the server's chain passes `configuration`'s own verification (trust roots and
    /// host name). Throws only when no handshake could be attempted (no connection).
    static func passesVerification(
        host: String,
        port: Int,
        proxy: ProxySettings.Server?,
        configuration: TLSConfiguration,
        connectTimeout: TimeAmount,
        eventLoop: any EventLoop
    ) async throws -> Bool {
        do {
            try await self.handshake(host: host, port: port, proxy: proxy, configuration: configuration, connectTimeout: connectTimeout, eventLoop: eventLoop, verify: nil)
            return true
        } catch let error as ConnectFailure {
            throw error.underlying
        } catch {
            return false
        }
    }

    private static func handshake(
        host: String,
        port: Int,
        proxy: ProxySettings.Server?,
        configuration: TLSConfiguration,
        connectTimeout: TimeAmount,
        eventLoop: any EventLoop,
        verify: NIOSSLCustomVerificationCallback?
    ) async throws {
        let context = try NIOSSLContext(configuration: configuration)
        let isAddress = (try? SocketAddress(ipAddress: host, port: 0)) != nil
        let done = eventLoop.makePromise(of: Void.self)
        let callback = VerificationCallbackBox(callback: verify)
        let channel: any Channel
        do {
            channel = try await ClientBootstrap(group: eventLoop)
                .connectTimeout(connectTimeout)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let makeTLS = {
                            let handler: NIOSSLClientHandler
                            if let verify = callback.callback {
                                handler = try NIOSSLClientHandler(context: context, serverHostname: isAddress ? nil : host, customVerificationCallback: verify)
                            } else {
                                handler = try NIOSSLClientHandler(context: context, serverHostname: isAddress ? nil : host)
                            }
                            return handler
                        }
                        if proxy != nil {
                            // TLS starts once the proxy has opened the tunnel.
                            try channel.pipeline.syncOperations.addHandler(
                                ConnectTunnelHandler(
                                    target: "\(isAddress && host.contains(":") ? "[\(host)]" : host):\(port)",
                                    authorization: proxy?.username.map { HTTPAuthorization.basic(user: $0, password: proxy?.password ?? "") },
                                    done: done
                                ) { pipeline in
                                    try pipeline.addHandler(makeTLS(), position: .first)
                                }
                            )
                        } else {
                            try channel.pipeline.syncOperations.addHandler(makeTLS())
                        }
                        try channel.pipeline.syncOperations.addHandler(HandshakeWatcher(done: done))
                    }
                }
                .connect(host: proxy?.host ?? host, port: proxy?.port ?? port)
                .get()
        } catch {
            done.fail(error)
            throw ConnectFailure(underlying: error)
        }
        defer { channel.close(promise: nil) }
        try await done.futureResult.get()
    }
}

/// Asks an HTTP proxy for a tunnel (`CONNECT host:port`), then installs TLS in front of
/// itself and leaves. A refusal fails `done`.
private final class ConnectTunnelHandler: ChannelDuplexHandler, RemovableChannelHandler, @unchecked Sendable {
    // @unchecked: used on its channel's event loop only.
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    struct Refused: Error, CustomStringConvertible {
        var description: String
    }

    private let target: String
    /// `Proxy-Authorization` to send, for a proxy that asks for credentials.
    private let authorization: String?
    private let done: EventLoopPromise<Void>
    private let installTLS: (ChannelPipeline.SynchronousOperations) throws -> Void
    private var response = ByteBuffer()

    init(target: String, authorization: String?, done: EventLoopPromise<Void>, installTLS: @escaping (ChannelPipeline.SynchronousOperations) throws -> Void) {
        self.target = target
        self.authorization = authorization
        self.done = done
        self.installTLS = installTLS
    }

    func channelActive(context: ChannelHandlerContext) {
        let credentials = self.authorization.map { "Proxy-Authorization: \($0)\r\n" } ?? ""
        let request = "CONNECT \(self.target) HTTP/1.1\r\nHost: \(self.target)\r\n\(credentials)\r\n"
        context.writeAndFlush(self.wrapOutboundOut(ByteBuffer(string: request)), promise: nil)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = self.unwrapInboundIn(data)
        self.response.writeBuffer(&bytes)
        guard let text = self.response.getString(at: self.response.readerIndex, length: self.response.readableBytes),
            let end = text.range(of: "\r\n\r\n")
        else {
            if self.response.readableBytes > 16 * 1024 { self.fail(context, "the proxy's answer is too long") }
            return
        }
        let statusLine = text[..<(text.firstIndex(of: "\r") ?? text.endIndex)]
        let parts = statusLine.split(separator: " ")
        guard parts.count >= 2, parts[1] == "200" else {
            self.fail(context, "the proxy refused the tunnel: \(statusLine)")
            return
        }
        guard text.utf8.count == text[..<end.upperBound].utf8.count else {
            self.fail(context, "the proxy sent bytes after its answer")
            return
        }
        do {
            try self.installTLS(context.pipeline.syncOperations)
            context.pipeline.syncOperations.removeHandler(self, promise: nil)
        } catch {
            self.fail(context, "\(error)")
        }
    }

    private func fail(_ context: ChannelHandlerContext, _ message: String) {
        self.done.fail(Refused(description: message))
        context.close(promise: nil)
    }
}

/// No TCP connection: the probe learned nothing about the server's certificate.
struct ConnectFailure: Error {
    var underlying: any Error
}

/// Completes `done` when the handshake finishes, or fails it with the first error or on close.
private final class HandshakeWatcher: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    let done: EventLoopPromise<Void>

    init(done: EventLoopPromise<Void>) {
        self.done = done
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? TLSUserEvent, case .handshakeCompleted = event { self.done.succeed(()) }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.done.fail(error)
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.done.fail(ChannelError.eof)
        context.fireChannelInactive()
    }
}
