import Foundation
import NIOCore
import NIOPosix
import NIOSSL

/// A TCP connection read and written in pieces, for stream tasks: reads are served in order
/// from what has arrived (at least `min`, at most `max` bytes), writes complete when the bytes
/// are handed to the kernel, and TLS can start at any point (STARTTLS-style).
///
/// All state lives in a channel handler on the connection's event loop; the methods here hop
/// onto it. Every read and write completes exactly once.
package final class StreamConnection: Sendable {
    private let channel: any Channel
    private let buffer: StreamBufferHandler
    package let host: String
    package let port: Int

    private init(channel: any Channel, buffer: StreamBufferHandler, host: String, port: Int) {
        self.channel = channel
        self.buffer = buffer
        self.host = host
        self.port = port
    }

    /// Connects to `host`:`port` on `eventLoop`.
    package static func connect(host: String, port: Int, connectTimeout: TimeAmount, eventLoop: any EventLoop) async throws(URLError) -> StreamConnection {
        let buffer = StreamBufferHandler()
        do {
            let channel = try await ClientBootstrap(group: eventLoop)
                .connectTimeout(connectTimeout)
                .channelOption(.allowRemoteHalfClosure, value: true)
                .channelOption(.tcpOption(.tcp_nodelay), value: 1)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(buffer) }
                }
                .connect(host: host, port: port)
                .get()
            return StreamConnection(channel: channel, buffer: buffer, host: host, port: port)
        } catch {
            throw StreamConnection.urlError(error, host: host)
        }
    }

    /// Reads at least `min` (at least 1) and at most `max` bytes; fewer only at the end of
    /// input. Returns `nil` data at the end of input with nothing left.
    package func read(min: Int, max: Int, timeout: TimeAmount?) async throws(URLError) -> (data: Data?, atEOF: Bool) {
        let promise = self.channel.eventLoop.makePromise(of: (Data?, Bool).self)
        let buffer = self.buffer
        let minimum = Swift.max(1, min)
        let maximum = Swift.max(minimum, max)
        self.channel.eventLoop.execute {
            buffer.enqueueRead(min: minimum, max: maximum, timeout: timeout, promise: promise)
        }
        do {
            let (data, eof) = try await promise.futureResult.get()
            return (data, eof)
        } catch {
            throw StreamConnection.urlError(error, host: self.host)
        }
    }

    /// Writes `data`; returns once it is handed to the kernel.
    package func write(_ data: Data, timeout: TimeAmount?) async throws(URLError) {
        let channel = self.channel
        let promise = channel.eventLoop.makePromise(of: Void.self)
        channel.writeAndFlush(ByteBuffer(bytes: data), promise: promise)
        let future = promise.futureResult
        if let timeout {
            let timer = channel.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
            future.whenComplete { _ in timer.cancel() }
        }
        do {
            try await future.get()
        } catch {
            throw StreamConnection.urlError(error, host: self.host)
        }
    }

    /// Stops reading: pending and later reads end at once (end of input).
    package func closeRead() {
        let buffer = self.buffer
        let channel = self.channel
        channel.eventLoop.execute {
            buffer.inputEnded()
            channel.close(mode: .input, promise: nil)
        }
    }

    /// Sends the end of output (TCP FIN, or TLS close_notify first); reading goes on.
    package func closeWrite() {
        self.channel.close(mode: .output, promise: nil)
    }

    /// Starts TLS on the connection now. Later reads return decrypted bytes; a failed
    /// handshake fails them.
    package func startTLS(configuration: TLSConfiguration, verify: NIOSSLCustomVerificationCallback?) throws(URLError) {
        let isAddress = (try? SocketAddress(ipAddress: self.host, port: 0)) != nil
        do {
            let context = try NIOSSLContext(configuration: configuration)
            let hostname = isAddress ? nil : self.host
            let channel = self.channel
            let callback = VerificationCallbackBox(callback: verify)
            channel.eventLoop.execute {
                do {
                    let handler: NIOSSLClientHandler = try callback.callback.map {
                        try NIOSSLClientHandler(context: context, serverHostname: hostname, customVerificationCallback: $0)
                    } ?? NIOSSLClientHandler(context: context, serverHostname: hostname)
                    try channel.pipeline.syncOperations.addHandler(handler, position: .first)
                } catch {
                    channel.pipeline.fireErrorCaught(error)
                }
            }
        } catch {
            throw StreamConnection.urlError(error, host: self.host)
        }
    }

    /// Closes the connection; pending reads and writes fail.
    package func close() {
        self.channel.close(promise: nil)
    }

    static func urlError(_ error: any Error, host: String) -> URLError {
        if let error = error as? URLError { return error }
        let description = String(describing: error)
        func make(_ code: URLError.Code, _ message: String) -> URLError {
            URLError(code, userInfo: [NSLocalizedDescriptionKey: message])
        }
        if description.contains("CERTIFICATE_VERIFY_FAILED") || description.contains("failedToVerifyCertificate") {
            return make(.serverCertificateUntrusted, "the server's certificate is not trusted (\(description))")
        }
        if error is NIOSSLError || error is BoringSSLError { return make(.secureConnectionFailed, "TLS with \(host) failed (\(description))") }
        if let error = error as? ChannelError, case .connectTimeout = error { return make(.timedOut, "connecting to \(host) timed out") }
        if error is NIOConnectionError || description.contains("connectionRefused") || description.contains("ECONNREFUSED") {
            return make(.cannotConnectToHost, "cannot connect to \(host): \(description)")
        }
        if let error = error as? StreamBufferHandler.ReadTimeout { _ = error; return make(.timedOut, "no data within the read timeout") }
        return make(.networkConnectionLost, "the connection to \(host) ended: \(description)")
    }
}

/// Buffers what arrives and serves reads in order. Used on its channel's event loop only.
final class StreamBufferHandler: ChannelInboundHandler, @unchecked Sendable {
    // @unchecked: every member is touched on the channel's event loop only.
    typealias InboundIn = ByteBuffer

    struct ReadTimeout: Error {}

    private struct PendingRead {
        var min: Int
        var max: Int
        var promise: EventLoopPromise<(Data?, Bool)>
        var timer: Scheduled<Void>?
        var id: Int
    }

    private var received = ByteBuffer()
    private var atEOF = false
    private var failure: (any Error)?
    private var reads: [PendingRead] = []
    private var nextID = 0
    private var context: ChannelHandlerContext?

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func enqueueRead(min: Int, max: Int, timeout: TimeAmount?, promise: EventLoopPromise<(Data?, Bool)>) {
        self.nextID += 1
        let id = self.nextID
        var read = PendingRead(min: min, max: max, promise: promise, timer: nil, id: id)
        if let timeout, let loop = self.context?.eventLoop {
            read.timer = loop.scheduleTask(in: timeout) { [self] in
                guard let index = self.reads.firstIndex(where: { $0.id == id }) else { return }
                self.reads.remove(at: index).promise.fail(ReadTimeout())
            }
        }
        self.reads.append(read)
        self.serve()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = self.unwrapInboundIn(data)
        self.received.writeBuffer(&bytes)
        self.serve()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed {
            self.inputEnded()
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.inputEnded()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if self.failure == nil { self.failure = error }
        self.serve()
        context.close(promise: nil)
    }

    func inputEnded() {
        self.atEOF = true
        self.serve()
    }

    private func serve() {
        while let read = self.reads.first {
            if self.received.readableBytes >= read.min || (self.atEOF && self.failure == nil) {
                self.reads.removeFirst()
                read.timer?.cancel()
                let count = Swift.min(read.max, self.received.readableBytes)
                let data = count > 0 ? Data(self.received.readSlice(length: count)!.readableBytesView) : nil
                self.received.discardReadBytes()
                read.promise.succeed((data, self.atEOF && self.received.readableBytes == 0))
            } else if let failure = self.failure {
                self.reads.removeFirst()
                read.timer?.cancel()
                read.promise.fail(failure)
            } else {
                return
            }
        }
    }
}
