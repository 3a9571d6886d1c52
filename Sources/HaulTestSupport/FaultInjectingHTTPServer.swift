import Foundation
import NIOCore
import NIOHTTP1
import NIOHTTPCompression
import NIOPosix
import NIOSSL
import Synchronization

/// An HTTP/1.1 server on 127.0.0.1 for tests and benchmarks, serving deterministic content with
/// faults injected on request. It is real: clients talk to it over TCP.
///
/// ## Routes
/// - `GET /file/NAME?size=N&seed=S` — `N` bytes of ``TestContent`` (default 1 MiB) with `ETag`,
///   `Last-Modified`, `Accept-Ranges: bytes` and single-range support. Options (query items):
///   - `key=K` groups requests for the per-key counters below (default `NAME`).
///   - `etag=strong|weak|none`, `lastModified=0` — which validators are sent.
///   - `ranges=0` — no `Accept-Ranges`, `Range` ignored; `ignoreRange=1` — advertised but ignored.
///   - `cutAfter=B&cutTimes=T&cutMode=reset|close` — the first `T` (default 1) responses for the
///     key stop after `B` body bytes by a TCP reset (default) or a plain close.
///   - `stallAfter=B&stallTimes=T` — the first `T` responses stop sending after `B` bytes and hold
///     the connection open.
///   - `rate=BPS` — throttle the body to about `BPS` bytes per second.
///   - `gate=G&holdAfter=B` — send the head and `B` (default 0) body bytes, then hold the rest
///     until the test calls ``openGate(_:)`` with `G`.
///   - `changeAfter=R` — from the `R`-th request of the key on, the entity is a new version
///     (other bytes, other validators).
///   - `badContentRange=1` — a 206 whose `Content-Range` starts one byte later than asked.
///   - `rangeFault=F&rangeFaultTimes=T&rangeFaultAfter=B&rangeFaultRate=BPS` — the first `T`
///     (default 1) requests for a closed range (`bytes=N-M`, a segment) of the key get fault
///     `F`: `200` (the whole file), `badContentRange`, `otherEntity` (another version's bytes
///     and validators in a 206), `cut` (reset after `B` bytes, default 64 KiB), `stall` (after
///     `B` bytes), `slow` (`BPS`, default 256 KiB/s), `length` (a 206 naming another length).
///   - `partialRange=1` — a 206 covering only 16 bytes of the asked range.
///   - `range416=1` — every range request is answered 416.
///   - `fail503=T&retryAfter=S` — the first `T` requests are answered 503 with `Retry-After: S`.
///   - `chunked=1` — no `Content-Length`, chunked transfer coding.
///   - `gzip=1` — gzip content coding when the client accepts it.
/// - `/setcookie?c=VALUE&c=…[&to=PATH]` answers with one `Set-Cookie` per `c` (a 302 to `to`
///   when given); `/stats` answers with the body bytes sent per key, as JSON.
///   - `lieLength=L` — announce `Content-Length: L` but send `size` bytes and close.
///   - `disposition=V` — send `Content-Disposition: V`.
/// - `GET /cache/NAME?cc=…&etag=1&lastModified=1&expires=S&vary=H` — a small cacheable
///   response with those headers, answering its validators with 304 (see `serveCacheable`).
/// - `GET /redirect/N?to=PATH&status=302` — a chain of `N` redirects ending at `PATH`.
/// - `GET /loop/a` and `/loop/b` — redirect to each other forever.
/// - `GET /status/CODE?retryAfter=S` — that status with a short body.
/// - `ANY /echo` — the request body back, with `X-Echo-Method` and `X-Echo-Length`.
public final class FaultInjectingHTTPServer: Sendable {
    /// A request as the server saw it.
    public struct RecordedRequest: Sendable {
        public var method: String
        public var uri: String
        public var headers: [(String, String)]

        public func header(_ name: String) -> String? {
            self.headers.first { $0.0.lowercased() == name.lowercased() }?.1
        }
    }

    struct Counters {
        var requests: [RecordedRequest] = []
        var requestsPerKey: [String: Int] = [:]
        var rangeRequestsPerKey: [String: Int] = [:]
        var bodyBytesPerKey: [String: Int64] = [:]
        var openConnections = 0
        var acceptedConnections = 0
        var peakOpenConnections = 0
        var versions: [String: Int] = [:]
        var openGates: Set<String> = []
        var activeResponsesPerKey: [String: Int] = [:]
        var peakActiveResponsesPerKey: [String: Int] = [:]
    }

    let state = Mutex(Counters())
    /// The TLS context new connections get (``replaceTLS(_:)`` changes it).
    let tlsContext = Mutex<NIOSSLContext?>(nil)
    private let channel: any Channel
    /// The TCP port the server listens on (on 127.0.0.1).
    public let port: Int

    /// `https` when the server speaks TLS, else `http`.
    public let scheme: String

    private init(channel: any Channel, scheme: String) {
        self.channel = channel
        self.port = channel.localAddress?.port ?? 0
        self.scheme = scheme
    }

    /// Starts a server on 127.0.0.1.
    ///
    /// - Parameters:
    ///   - port: the port, or 0 for any free one (a ``RefusingPort``'s port, to start a server
    ///     where connections were refused until now).
    ///   - tls: a server TLS configuration to speak HTTPS (see ``TestCertificates``).
    public static func start(port: Int = 0, tls: TLSConfiguration? = nil) async throws -> FaultInjectingHTTPServer {
        let box = Mutex<FaultInjectingHTTPServer?>(nil)
        let initialContext = try tls.map { try NIOSSLContext(configuration: $0) }
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            // A port given by the test may be held by its ``RefusingPort`` (bound, not listening).
            .serverChannelOption(.socketOption(NIOBSDSocket.Option(rawValue: SO_REUSEPORT)), value: port == 0 ? 0 : 1)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let server = box.withLock { $0 }!
                    let sync = channel.pipeline.syncOperations
                    if let sslContext = server.tlsContext.withLock({ $0 }) { try sync.addHandler(NIOSSLServerHandler(context: sslContext)) }
                    try sync.configureHTTPServerPipeline(withErrorHandling: true)
                    try sync.addHandler(
                        HTTPResponseCompressor(responseCompressionPredicate: { head, _ in
                            if head.headers.contains(name: "x-test-compress") {
                                head.headers.remove(name: "x-test-compress")
                                return .compressIfPossible
                            }
                            return .doNotCompress
                        })
                    )
                    try sync.addHandler(FaultInjectingHTTPHandler(server: server))
                }
            }
            .bind(host: "127.0.0.1", port: port)
            .get()
        let server = FaultInjectingHTTPServer(channel: channel, scheme: tls == nil ? "http" : "https")
        server.tlsContext.withLock { $0 = initialContext }
        box.withLock { $0 = server }
        return server
    }

    /// `http://127.0.0.1:PORT` (or `https://`) followed by `pathAndQuery`.
    public func url(_ pathAndQuery: String) -> URL {
        URL(string: "\(self.scheme)://127.0.0.1:\(self.port)\(pathAndQuery)")!
    }

    /// Connections accepted from now on present `tls`'s identity (an HTTPS server that changed
    /// its certificate, on the same port).
    public func replaceTLS(_ tls: TLSConfiguration) throws {
        let context = try NIOSSLContext(configuration: tls)
        self.tlsContext.withLock { $0 = context }
    }

    /// Stops listening and closes the listening socket.
    public func shutdown() async throws {
        try await self.channel.close()
    }

    /// Every request received so far, in order.
    public var requests: [RecordedRequest] { self.state.withLock { $0.requests } }

    /// Requests received for the counter key `key`.
    public func requestCount(forKey key: String) -> Int { self.state.withLock { $0.requestsPerKey[key] ?? 0 } }

    /// Body bytes sent for the counter key `key`, over all responses.
    public func bodyBytesSent(forKey key: String) -> Int64 { self.state.withLock { $0.bodyBytesPerKey[key] ?? 0 } }

    /// Body bytes sent for `key` once the server has seen every connection close (waiting up to
    /// `timeout`): a write under way when a client went away (a kill, a cancel) is counted only
    /// when the server notices. `nil` when connections stay open past the timeout.
    public func bodyBytesSentOnceClosed(forKey key: String, timeout: Duration = .seconds(20)) async -> Int64? {
        let deadline = ContinuousClock.now + timeout
        while self.openConnections > 0 {
            guard ContinuousClock.now < deadline else { return nil }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return self.bodyBytesSent(forKey: key)
    }

    /// Body bytes sent per key, for every key (served as JSON at `/stats` for scripts).
    public var bodyBytesPerKey: [String: Int64] { self.state.withLock { $0.bodyBytesPerKey } }

    /// The version `/cache/NAME` serves (from 1).
    public func version(of name: String) -> Int { self.state.withLock { $0.versions[name] ?? 1 } }

    /// Makes `/cache/NAME` serve a new version (new body and validators).
    public func bumpVersion(of name: String) { self.state.withLock { $0.versions[name, default: 1] += 1 } }

    /// Lets bodies held at `gate` (`?gate=NAME&holdAfter=N`: the head and N bytes, then
    /// nothing until this call) go on; later requests through that gate are not held.
    public func openGate(_ gate: String) { self.state.withLock { _ = $0.openGates.insert(gate) } }

    func isGateOpen(_ gate: String) -> Bool { self.state.withLock { $0.openGates.contains(gate) } }

    /// The most `/file` responses of `key` that were being sent at once (a download fetched by
    /// two clients at the same time shows 2).
    public func peakActiveResponses(forKey key: String) -> Int { self.state.withLock { $0.peakActiveResponsesPerKey[key] ?? 0 } }

    /// ``peakActiveResponses(forKey:)`` of every key.
    public var peakActiveResponsesPerKey: [String: Int] { self.state.withLock { $0.peakActiveResponsesPerKey } }

    func responseStarted(forKey key: String) {
        self.state.withLock { state in
            state.activeResponsesPerKey[key, default: 0] += 1
            state.peakActiveResponsesPerKey[key] = max(state.peakActiveResponsesPerKey[key] ?? 0, state.activeResponsesPerKey[key]!)
        }
    }

    func responseEnded(forKey key: String) {
        self.state.withLock { $0.activeResponsesPerKey[key, default: 1] -= 1 }
    }

    /// Connections accepted so far.
    public var acceptedConnections: Int { self.state.withLock { $0.acceptedConnections } }

    /// The most connections that were open at once.
    public var peakOpenConnections: Int { self.state.withLock { $0.peakOpenConnections } }
    /// Connections open now.
    public var openConnections: Int { self.state.withLock { $0.openConnections } }

    func record(_ request: RecordedRequest) {
        self.state.withLock { $0.requests.append(request) }
    }

    /// Counts a request for `key` and returns its 1-based number.
    /// Counts requests for a closed range (`bytes=N-M`, a segment) of `key`; the number of this one.
    func nextRangeRequestNumber(forKey key: String) -> Int {
        self.state.withLock { state in
            state.rangeRequestsPerKey[key, default: 0] += 1
            return state.rangeRequestsPerKey[key]!
        }
    }

    func nextRequestNumber(forKey key: String) -> Int {
        self.state.withLock { state in
            state.requestsPerKey[key, default: 0] += 1
            return state.requestsPerKey[key]!
        }
    }

    func addBodyBytes(_ count: Int, forKey key: String) {
        self.state.withLock { $0.bodyBytesPerKey[key, default: 0] += Int64(count) }
    }

    func connectionOpened() {
        self.state.withLock {
            $0.openConnections += 1
            $0.acceptedConnections += 1
            $0.peakOpenConnections = max($0.peakOpenConnections, $0.openConnections)
        }
    }

    func connectionClosed() {
        self.state.withLock { $0.openConnections -= 1 }
    }
}
