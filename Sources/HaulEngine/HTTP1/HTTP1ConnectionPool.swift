import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// Plain-HTTP/1.1 connections of one engine, made straight on SwiftNIO (its request encoder and
/// response decoder) for the exchanges that need nothing else: a download's `GET` with no body,
/// no proxy and no TLS. AsyncHTTPClient's general request path (pool manager and connection
/// state machines, request bag, tasks) costs about a third of the instructions of a small
/// download; this one is a dictionary of idle connections and one channel handler.
///
/// Connections are kept alive and reused per host and port (an idle one closes after 60 s, or
/// when the server closes it); how many exchanges run at once is the engine's per-host limiter's
/// business, as for AsyncHTTPClient's pool. Everything runs on the engine's event loop.
final class HTTP1ConnectionPool: @unchecked Sendable {
    // @unchecked: the mutable state is touched on `eventLoop` only (`execute` and `shutdown`
    // hop there).

    struct Key: Hashable {
        var host: String
        var port: Int
    }

    let eventLoop: any EventLoop
    private let connectTimeout: TimeAmount
    /// The per-host limit this pool's engine shares with others, whose census keeps the
    /// connections of all of them within it (``DirectConnectionCensus``).
    private let limiter: HostConnectionLimiter?
    private let idleTimeout: TimeAmount
    /// How long an unused connection is kept.
    static let keepAliveTimeout = TimeAmount.seconds(60)
    /// Connections waiting for their next exchange, most recently used last, with when each
    /// became idle.
    private var idle: [Key: [(handler: HTTP1ConnectionHandler, since: NIODeadline)]] = [:]
    /// Closes connections idle for longer than ``keepAliveTimeout``, while there are any.
    private var sweep: Scheduled<Void>?
    /// Every open connection (to close them at shutdown).
    private var open: [ObjectIdentifier: HTTP1ConnectionHandler] = [:]
    private var isShutDown = false

    init(eventLoop: any EventLoop, connectTimeout: TimeAmount, idleTimeout: TimeAmount, limiter: HostConnectionLimiter? = nil) {
        self.eventLoop = eventLoop
        self.connectTimeout = connectTimeout
        self.idleTimeout = idleTimeout
        self.limiter = limiter
        limiter?.directConnections.register(self)
    }

    /// Whether a request can go over a direct connection: a `GET` or `HEAD` without a body to
    /// an `http` URL with a host, sent without a proxy.
    static func carries(origin: URLOrigin, method: String, hasBody: Bool, isProxied: Bool) -> Bool {
        guard !hasBody, !isProxied, method == "GET" || method == "HEAD" else { return false }
        guard origin.hasScheme("http"), let host = origin.host, !host.isEmpty else { return false }
        return true
    }

    /// Sends `method` for `url` with `headers` (plus `Host`) and hands the response to `sink`;
    /// `origin` is `url`'s, when the caller has it already. Any thread; the sink is called on
    /// the pool's event loop.
    func execute(url: URL, origin: URLOrigin? = nil, method: HTTPMethod, headers: HTTPHeaders, sink: any HTTP1ResponseSink) -> HTTP1Exchange {
        let origin = origin ?? URLOrigin(url)
        let host = origin.host ?? ""
        let port = origin.explicitPort ?? 80
        var headers = headers
        if !headers.contains(name: "Host") {
            let name = host.utf8.contains(UInt8(ascii: ":")) ? "[\(host)]" : host
            headers.add(name: "Host", value: origin.explicitPort == nil || port == 80 ? name : "\(name):\(port)")
        }
        let head = HTTPRequestHead(version: .http1_1, method: method, uri: Self.requestTarget(of: url), headers: headers)
        let exchange = HTTP1Exchange(pool: self, host: host, port: port, head: head, sink: sink, eventLoop: self.eventLoop)
        if self.eventLoop.inEventLoop {
            self.dispatch(exchange, onNewConnection: false)
        } else {
            self.eventLoop.execute { self.dispatch(exchange, onNewConnection: false) }
        }
        return exchange
    }

    /// The request target of `url` as sent (RFC 9112 origin-form): its path and query, percent
    /// escapes kept as written, `/` when it has no path; never the fragment.
    static func requestTarget(of url: URL) -> String {
        var text = url.absoluteString
        text.makeContiguousUTF8()
        return text.utf8.withContiguousStorageIfAvailable { bytes in
            // Past "scheme://" and the authority, to the first "/", "?" or "#"; then to "#".
            let slash = UInt8(ascii: "/"), question = UInt8(ascii: "?"), hash = UInt8(ascii: "#")
            var index = 0
            while index + 2 < bytes.count, !(bytes[index] == UInt8(ascii: ":") && bytes[index + 1] == slash && bytes[index + 2] == slash) {
                index += 1
            }
            guard index + 2 < bytes.count else { return "/" }
            var start = index + 3
            while start < bytes.count, bytes[start] != slash, bytes[start] != question, bytes[start] != hash { start += 1 }
            var end = start
            while end < bytes.count, bytes[end] != hash { end += 1 }
            guard start < end else { return "/" }
            let rest = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<end]), as: UTF8.self)
            return bytes[start] == question ? "/" + rest : rest
        }
        ?? "/"
    }

    /// Starts `exchange` on an idle connection to its host, or on a new one.
    func dispatch(_ exchange: HTTP1Exchange, onNewConnection: Bool) {
        self.eventLoop.assertInEventLoop()
        guard !self.isShutDown else {
            exchange.fail(HTTPClientError.alreadyShutdown, mayRetry: false)
            return
        }
        let key = Key(host: exchange.host, port: exchange.port)
        if !onNewConnection, let handler = self.takeIdle(key) {
            handler.start(exchange)
            return
        }
        guard let limiter = self.limiter else { return self.connect(key, for: exchange) }
        // Within the host's count of every engine sharing the limiter: at once, or once another
        // connection to it has closed (``DirectConnectionCensus``).
        limiter.directConnections.reserve(key, limit: limiter.limit, for: self, waitingAtMost: self.connectTimeout).whenComplete { result in
            switch result {
            case .success:
                guard exchange.isWaiting else { return limiter.directConnections.closed(key, limit: limiter.limit) }
                self.connect(key, for: exchange)
            case .failure(let error):
                exchange.fail(error, mayRetry: false)
            }
        }
    }

    /// Opens a connection to `key` (counted in the census already, when there is one) and
    /// starts `exchange` on it, or keeps it idle when `exchange` no longer waits.
    private func connect(_ key: Key, for exchange: HTTP1Exchange) {
        self.connect(key).whenComplete { result in
            switch result {
            case .success(let bound):
                let handler = bound.value
                if exchange.isWaiting {
                    handler.start(exchange)
                } else {
                    self.release(handler, key: key)
                }
            case .failure(let error):
                if let limiter = self.limiter { limiter.directConnections.closed(key, limit: limiter.limit) }
                exchange.fail(Self.clientError(for: error), mayRetry: false)
            }
        }
    }

    /// Closes the connection to `key` idle longest, for another engine's pool about to open one
    /// (``DirectConnectionCensus``): `true` once it is closed, `false` when none is idle.
    func closeOneIdle(_ key: Key) -> EventLoopFuture<Bool> {
        self.eventLoop.assertInEventLoop()
        while var connections = self.idle[key], !connections.isEmpty {
            let (handler, _) = connections.removeFirst()
            self.idle[key] = connections.isEmpty ? nil : connections
            guard !handler.isClosed, let closing = handler.closeGracefully() else { continue }
            return closing.map { true }
        }
        return self.eventLoop.makeSucceededFuture(false)
    }

    private func takeIdle(_ key: Key) -> HTTP1ConnectionHandler? {
        while let (handler, _) = self.idle[key]?.popLast() {
            if !handler.isClosed { return handler }
        }
        return nil
    }

    /// Keeps `handler` for the next exchange to `key`, for at most ``keepAliveTimeout``.
    private func release(_ handler: HTTP1ConnectionHandler, key: Key) {
        guard !self.isShutDown, !handler.isClosed else {
            handler.close()
            return
        }
        // Another engine's pool waits to open a connection to the host: this one closes for it
        // (the server has closed its side when the place is handed over).
        if self.limiter?.directConnections.hasWaiters(for: key) == true {
            _ = handler.closeGracefully()
            return
        }
        self.idle[key, default: []].append((handler, .now()))
        if self.sweep == nil { self.scheduleSweep() }
    }

    /// One timer for every idle connection (not one per connection: a download of many small
    /// files releases a connection per file).
    private func scheduleSweep() {
        self.sweep = self.eventLoop.scheduleTask(in: .seconds(15)) {
            self.sweep = nil
            let oldest = NIODeadline.now() - Self.keepAliveTimeout
            for (key, connections) in self.idle {
                let (stale, kept) = (connections.filter { $0.since < oldest }, connections.filter { $0.since >= oldest })
                self.idle[key] = kept.isEmpty ? nil : kept
                for connection in stale { connection.handler.close() }
            }
            if !self.idle.isEmpty { self.scheduleSweep() }
        }
    }

    private func connect(_ key: Key) -> EventLoopFuture<NIOLoopBound<HTTP1ConnectionHandler>> {
        let idleTimeout = self.idleTimeout
        let eventLoop = self.eventLoop
        return ClientBootstrap(group: self.eventLoop)
            .connectTimeout(self.connectTimeout)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelOption(.maxMessagesPerRead, value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try Self.addHandlers(to: channel, idleTimeout: idleTimeout) }
            }
            .connect(to: key)
            .flatMapThrowing { channel in
                let handler = try channel.pipeline.syncOperations.handler(type: HTTP1ConnectionHandler.self)
                return NIOLoopBound(handler, eventLoop: eventLoop)
            }
            .map { (bound: NIOLoopBound<HTTP1ConnectionHandler>) in
                let handler = bound.value
                let id = ObjectIdentifier(handler)
                self.open[id] = handler
                handler.onReusable = { [weak self] handler in self?.release(handler, key: key) }
                handler.onClosed = { [weak self] handler in self?.forget(handler, key: key) }
                // Closed before it was handed over (the server hung up at once): it will not
                // say so again.
                if handler.isClosed { self.forget(handler, key: key) }
                if self.isShutDown { handler.close() }
                return bound
            }
    }

    /// A connection's handlers: NIO's request encoder and response decoder, then ours.
    static func addHandlers(to channel: any Channel, idleTimeout: TimeAmount) throws {
        let sync = channel.pipeline.syncOperations
        try sync.addHandler(HTTPRequestEncoder())
        try sync.addHandler(ByteToMessageHandler(HTTPResponseDecoder(leftOverBytesStrategy: .dropBytes, informationalResponseStrategy: .drop)))
        try sync.addHandler(HTTP1ConnectionHandler(idleTimeout: idleTimeout))
    }

    private func forget(_ handler: HTTP1ConnectionHandler, key: Key) {
        let id = ObjectIdentifier(handler)
        if self.open.removeValue(forKey: id) != nil, let limiter = self.limiter { limiter.directConnections.closed(key, limit: limiter.limit) }
        self.idle[key]?.removeAll { $0.handler === handler }
        if self.idle[key]?.isEmpty == true { self.idle[key] = nil }
    }

    /// Closes every connection; exchanges under way fail with `HTTPClientError.cancelled`.
    func shutdown() async {
        try? await self.eventLoop.submit {
            self.isShutDown = true
            self.sweep?.cancel()
            self.sweep = nil
            self.idle.removeAll()
            self.limiter?.directConnections.cancelWaiters(of: self)
            let handlers = Array(self.open.values)
            for handler in handlers { handler.close() }
        }.get()
    }

    /// Connection failures as AsyncHTTPClient reports them, so that both paths map to the same
    /// `URLError`s.
    private static func clientError(for error: any Error) -> any Error {
        if let channelError = error as? ChannelError, case .connectTimeout = channelError { return HTTPClientError.connectTimeout }
        return error
    }
}

extension ClientBootstrap {
    /// Connects to an IP address literal directly (no resolver, no Happy Eyeballs: nothing to
    /// race), to a host name through NIO's resolver.
    fileprivate func connect(to key: HTTP1ConnectionPool.Key) -> EventLoopFuture<any Channel> {
        if let address = try? SocketAddress(ipAddress: key.host, port: key.port) {
            return self.connect(to: address)
        }
        return self.connect(host: key.host, port: key.port)
    }
}
