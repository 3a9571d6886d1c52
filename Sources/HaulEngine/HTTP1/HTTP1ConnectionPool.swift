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

    private struct Key: Hashable {
        var host: String
        var port: Int
    }

    private let eventLoop: any EventLoop
    private let connectTimeout: TimeAmount
    private let idleTimeout: TimeAmount
    /// How long an unused connection is kept.
    static let keepAliveTimeout = TimeAmount.seconds(60)
    /// Connections waiting for their next exchange, most recently used last.
    private var idle: [Key: [HTTP1ConnectionHandler]] = [:]
    /// The timers that close idle connections.
    private var idleTimers: [ObjectIdentifier: Scheduled<Void>] = [:]
    /// Every open connection (to close them at shutdown).
    private var open: [ObjectIdentifier: HTTP1ConnectionHandler] = [:]
    private var isShutDown = false

    init(eventLoop: any EventLoop, connectTimeout: TimeAmount, idleTimeout: TimeAmount) {
        self.eventLoop = eventLoop
        self.connectTimeout = connectTimeout
        self.idleTimeout = idleTimeout
    }

    /// Whether a request can go over a direct connection: a `GET` or `HEAD` without a body to
    /// an `http` URL with a host, sent without a proxy.
    static func carries(url: URL, method: String, hasBody: Bool, isProxied: Bool) -> Bool {
        guard !hasBody, !isProxied, method == "GET" || method == "HEAD" else { return false }
        guard let scheme = url.scheme, scheme.utf8.count == 4, scheme.lowercased() == "http" else { return false }
        guard let host = url.host, !host.isEmpty else { return false }
        return true
    }

    /// Sends `method` for `url` with `headers` (plus `Host`) and hands the response to `sink`.
    /// Any thread; the sink is called on the pool's event loop.
    func execute(url: URL, method: HTTPMethod, headers: HTTPHeaders, sink: any HTTP1ResponseSink) -> HTTP1Exchange {
        let host = url.host ?? ""
        let port = url.port ?? 80
        var headers = headers
        if !headers.contains(name: "Host") {
            let name = host.utf8.contains(UInt8(ascii: ":")) ? "[\(host)]" : host
            headers.add(name: "Host", value: url.port == nil || port == 80 ? name : "\(name):\(port)")
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
        let text = url.absoluteString.utf8
        // Past "scheme://" and the authority, to the first "/", "?" or "#".
        guard let schemeEnd = text.firstRange(of: "://".utf8)?.upperBound else { return "/" }
        var start = schemeEnd
        while start < text.endIndex, text[start] != UInt8(ascii: "/"), text[start] != UInt8(ascii: "?"), text[start] != UInt8(ascii: "#") {
            start = text.index(after: start)
        }
        var end = start
        while end < text.endIndex, text[end] != UInt8(ascii: "#") { end = text.index(after: end) }
        guard start < end else { return "/" }
        let target = String(Substring(text[start..<end]))
        return target.utf8.first == UInt8(ascii: "?") ? "/" + target : target
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
                exchange.fail(Self.clientError(for: error), mayRetry: false)
            }
        }
    }

    private func takeIdle(_ key: Key) -> HTTP1ConnectionHandler? {
        while let handler = self.idle[key]?.popLast() {
            self.idleTimers.removeValue(forKey: ObjectIdentifier(handler))?.cancel()
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
        self.idle[key, default: []].append(handler)
        let id = ObjectIdentifier(handler)
        self.idleTimers[id] = self.eventLoop.assumeIsolated().scheduleTask(in: Self.keepAliveTimeout) { [weak handler] in
            self.idleTimers[id] = nil
            guard let handler else { return }
            self.idle[key]?.removeAll { $0 === handler }
            handler.close()
        }
    }

    private func connect(_ key: Key) -> EventLoopFuture<NIOLoopBound<HTTP1ConnectionHandler>> {
        let idleTimeout = self.idleTimeout
        let eventLoop = self.eventLoop
        return ClientBootstrap(group: self.eventLoop)
            .connectTimeout(self.connectTimeout)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(HTTPRequestEncoder())
                    try sync.addHandler(ByteToMessageHandler(HTTPResponseDecoder(leftOverBytesStrategy: .dropBytes, informationalResponseStrategy: .drop)))
                    try sync.addHandler(HTTP1ConnectionHandler(idleTimeout: idleTimeout))
                }
            }
            .connect(host: key.host, port: key.port)
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
                if self.isShutDown { handler.close() }
                return bound
            }
    }

    private func forget(_ handler: HTTP1ConnectionHandler, key: Key) {
        let id = ObjectIdentifier(handler)
        self.open[id] = nil
        self.idleTimers.removeValue(forKey: id)?.cancel()
        self.idle[key]?.removeAll { $0 === handler }
        if self.idle[key]?.isEmpty == true { self.idle[key] = nil }
    }

    /// Closes every connection; exchanges under way fail with `HTTPClientError.cancelled`.
    func shutdown() async {
        try? await self.eventLoop.submit {
            self.isShutDown = true
            for timer in self.idleTimers.values { timer.cancel() }
            self.idleTimers.removeAll()
            self.idle.removeAll()
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
