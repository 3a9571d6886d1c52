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
        configuration: TLSConfiguration,
        connectTimeout: TimeAmount,
        eventLoop: any EventLoop
    ) async throws -> [NIOSSLCertificate] {
        let captured = Mutex<[NIOSSLCertificate]>([])
        do {
            try await self.handshake(host: host, port: port, configuration: configuration, connectTimeout: connectTimeout, eventLoop: eventLoop) { certificates, promise in
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
        configuration: TLSConfiguration,
        connectTimeout: TimeAmount,
        eventLoop: any EventLoop
    ) async throws -> Bool {
        do {
            try await self.handshake(host: host, port: port, configuration: configuration, connectTimeout: connectTimeout, eventLoop: eventLoop, verify: nil)
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
        configuration: TLSConfiguration,
        connectTimeout: TimeAmount,
        eventLoop: any EventLoop,
        verify: NIOSSLCustomVerificationCallback?
    ) async throws {
        let context = try NIOSSLContext(configuration: configuration)
        let isAddress = (try? SocketAddress(ipAddress: host, port: 0)) != nil
        let done = eventLoop.makePromise(of: Void.self)
        let channel: any Channel
        do {
            channel = try await ClientBootstrap(group: eventLoop)
                .connectTimeout(connectTimeout)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let handler: NIOSSLClientHandler
                        if let verify {
                            handler = try NIOSSLClientHandler(context: context, serverHostname: isAddress ? nil : host, customVerificationCallback: verify)
                        } else {
                            handler = try NIOSSLClientHandler(context: context, serverHostname: isAddress ? nil : host)
                        }
                        try channel.pipeline.syncOperations.addHandler(handler)
                        try channel.pipeline.syncOperations.addHandler(HandshakeWatcher(done: done))
                    }
                }
                .connect(host: host, port: port)
                .get()
        } catch {
            done.fail(error)
            throw ConnectFailure(underlying: error)
        }
        defer { channel.close(promise: nil) }
        try await done.futureResult.get()
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
