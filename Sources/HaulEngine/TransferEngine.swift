import AsyncHTTPClient
import Foundation
import HaulCore
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import Synchronization

/// Runs transfers for one session: owns the HTTP client (its connection pool), the per-host
/// connection limit and the redirect rules. Create one per session; call ``shutdown()`` once.
package final class TransferEngine: Sendable {
    /// The engine's knobs, copied from a session configuration.
    package struct Configuration: Sendable {
        /// Idle timeout: the longest wait for the next byte.
        package var idleTimeout: Duration = .seconds(60)
        /// Connect timeout.
        package var connectTimeout: Duration = .seconds(30)
        /// Exchanges running at once per host.
        package var maximumConnectionsPerHost: Int = 6
        /// Connections the pool keeps per host; `nil`: ``maximumConnectionsPerHost``. A daemon
        /// whose per-host limit changes at run time sets the highest it allows.
        package var connectionPoolSoftLimitPerHost: Int?
        /// Connections one download may use at once (segmented downloads); 1: one request per
        /// download, as URLSession does.
        package var maximumConnectionsPerDownload: Int = 1
        /// No segment is made smaller than this.
        package var minimumSegmentBytes: Int64 = 1 << 20
        /// Bytes per second at which a download's first connection is left alone: no segments
        /// are added while it keeps this speed (``SplitGate``; `.infinity`: always split).
        package var sufficientConnectionSpeed: Double = SplitGate.defaultFastEnough
        /// Redirects followed in one chain.
        package var maximumRedirects: Int = 16
        /// Proxies by scheme, and the hosts that bypass them.
        package var proxies = ProxySettings()
        /// TLS protocol versions and the client certificate.
        package var tls = TLSOptions()
        /// Whether each exchange's timing is recorded (``TransferRun/transactions``: task
        /// metrics). AsyncHTTPClient tells when connections open and requests are scheduled
        /// only through its debug and trace logs, so recording means formatting a few log
        /// messages per request; programs that never show metrics (`haul get`, hauld) turn it
        /// off and keep the clients' loggers disabled.
        package var recordsMetrics = true
        /// Whether plain-HTTP downloads (a `GET` or `HEAD` with no body, no proxy, no TLS) go
        /// over the engine's own HTTP/1.1 connections (``HTTP1ConnectionPool``) instead of
        /// AsyncHTTPClient's request path, which costs a small download about a third of its
        /// instructions. Only for engines that record no metrics (AsyncHTTPClient's logs are
        /// where connection timings come from). `haul get` and hauld turn it on.
        package var usesDirectHTTP1 = false
        /// Whether a small download's unnamed file is created on the write threads instead of
        /// the event loop while creating files is slow (``FileBodyWriter/createsAreSlow``: on
        /// ext4, a fresh directory with many inodes deleted lately can take most of a
        /// millisecond a file). For an engine whose one loop carries the transfers of many small
        /// files (hauld's), where every other transfer waited behind each creation; a program
        /// with a loop per core (`haul get`) keeps creating on its loops.
        package var offloadsSlowFileCreation = false

        package init() {}
    }

    /// A logger that drops everything (AsyncHTTPClient skips its log messages' work).
    static let silentLogger = Logger(label: "haul.silent", factory: { _ in SwiftLogNoOpLogHandler() })

    /// AsyncHTTPClient's clients, each created on first use (a plain-HTTP `haul get` never needs
    /// one: making the default client at start cost 4 M instructions): the default one, one per
    /// proxy, and ones that decode gzip and deflate bodies for data transfers (downloads keep
    /// the representation as sent). Each with the log of when its connections opened (for
    /// metrics).
    private let clients: Mutex<[ClientKey: (HTTPClient, ConnectionEventLog)]> = Mutex([:])

    private struct ClientKey: Hashable {
        var proxy: ProxySettings.Server?
        var decodes: Bool
    }
    /// The loop all of this engine's transfers run on.
    package let eventLoop: any EventLoop
    /// The tasks of this engine's runs prefer this executor: their steps run on ``eventLoop``.
    package let taskExecutor: EventLoopTaskExecutor
    /// The threads that open partial files and write body bytes into them, so that the event
    /// loop never blocks on the disk (one batch at a time per file; see ``FileBodyWriter``).
    /// Started on first use (``FileBodyWriter`` asks for it only when it hands a write over): a
    /// run of small files written on the loop never starts its threads.
    var fileIOPool: NIOThreadPool { NIOThreadPool.singleton }
    package let limiter: HostConnectionLimiter
    /// The direct HTTP/1.1 connections (``Configuration/usesDirectHTTP1``), if used.
    let directConnections: HTTP1ConnectionPool?
    let redirectPolicy: RedirectPolicy
    package let configuration: Configuration

    /// The session's cookie storage, when it sends and keeps cookies.
    package let cookieJar: (any TransferCookieJar)?

    /// The session's HTTP cache for data transfers, if it has one.
    package let responseCache: (any TransferResponseCache)?

    /// Custom protocol handlers, asked in order before the network.
    package let interceptors: [any TransferInterceptor]

    /// Asks about each https server's certificate chain before the first request to it, when
    /// the session has someone to ask (its delegate).
    package let trustGate: ServerTrustGate?

    package init(
        configuration: Configuration,
        cookieJar: (any TransferCookieJar)? = nil,
        interceptors: [any TransferInterceptor] = [],
        serverTrustHandler: ServerTrustGate.Handler? = nil,
        responseCache: (any TransferResponseCache)? = nil,
        sharingLimiter sharedLimiter: HostConnectionLimiter? = nil
    ) {
        self.configuration = configuration
        self.responseCache = responseCache
        self.cookieJar = cookieJar
        self.interceptors = interceptors
        // One event loop per engine: every connection of the session and every delegate
        // callback run on the same thread, so body chunks never hop between threads and idle
        // connections are always reusable (a connection pinned to another loop would not be).
        // Sessions spread over the loops of the shared group.
        let eventLoop = MultiThreadedEventLoopGroup.singleton.next()
        self.eventLoop = eventLoop
        self.taskExecutor = EventLoopTaskExecutor(eventLoop)
        // Engines that carry one owner's transfers on several loops share one count per host.
        self.limiter = sharedLimiter ?? HostConnectionLimiter(limit: configuration.maximumConnectionsPerHost)
        self.directConnections = configuration.usesDirectHTTP1 && !configuration.recordsMetrics
            ? HTTP1ConnectionPool(
                eventLoop: eventLoop,
                connectTimeout: .nanoseconds(Self.nanoseconds(configuration.connectTimeout)),
                idleTimeout: .nanoseconds(Self.nanoseconds(configuration.idleTimeout)),
                limiter: sharedLimiter
            )
            : nil
        self.redirectPolicy = RedirectPolicy(maximumRedirects: configuration.maximumRedirects)
        self.trustGate = serverTrustHandler.map {
            ServerTrustGate(
                handler: $0,
                options: configuration.tls,
                connectTimeout: .nanoseconds(Self.nanoseconds(configuration.connectTimeout)),
                eventLoop: eventLoop
            )
        }
    }

    /// The configuration every AsyncHTTPClient client starts from (made as each client is).
    private func makeClientConfiguration() -> HTTPClient.Configuration {
        let configuration = self.configuration
        var pool = HTTPClient.Configuration.ConnectionPool(
            idleTimeout: .seconds(60),
            concurrentHTTP1ConnectionsPerHostSoftLimit: max(1, configuration.connectionPoolSoftLimitPerHost ?? configuration.maximumConnectionsPerHost)
        )
        // A refused connection should fail now, not be retried until the connect timeout.
        pool.retryConnectionEstablishment = false
        var clientConfiguration = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            timeout: .init(
                connect: .nanoseconds(Self.nanoseconds(configuration.connectTimeout)),
                read: .nanoseconds(Self.nanoseconds(configuration.idleTimeout))
            ),
            connectionPool: pool,
            decompression: .disabled
        )
        clientConfiguration.httpVersion = .automatic
        clientConfiguration.tlsConfiguration = configuration.tls.clientConfiguration()
        return clientConfiguration
    }

    /// The client for a request to `url`: through the configured proxy, if any applies, and
    /// decoding `Content-Encoding` (gzip, deflate) when `decodes`.
    func client(for url: URL, decodes: Bool) -> (HTTPClient, ConnectionEventLog, isProxied: Bool) {
        let key = ClientKey(proxy: self.configuration.proxies.proxy(for: url), decodes: decodes)
        let (client, log) = self.clients.withLock { clients in
            if let existing = clients[key] { return existing }
            var configuration = self.makeClientConfiguration()
            if key.decodes { configuration.decompression = .enabled(limit: .none) }
            if let proxy = key.proxy {
                let authorization = proxy.username.map { HTTPClient.Authorization.basic(username: $0, password: proxy.password ?? "") }
                configuration.proxy = .server(host: proxy.host, port: proxy.port, authorization: authorization)
            }
            let log = ConnectionEventLog()
            let client = HTTPClient(
                eventLoopGroup: self.eventLoop,
                configuration: configuration,
                backgroundActivityLogger: self.configuration.recordsMetrics ? log.logger : Self.silentLogger
            )
            clients[key] = (client, log)
            return (client, log)
        }
        return (client, log, key.proxy != nil)
    }

    /// Starts a download's exchange over the engine's own HTTP/1.1 connections when they can
    /// carry it (``HTTP1ConnectionPool/carries(origin:method:hasBody:isProxied:)``); `nil`: send
    /// it through AsyncHTTPClient. `origin` is `url`'s. `sink` gets the response; `finished`
    /// makes the delegate's response from it once it has ended, on the loop.
    func startDirectExchange<Response: Sendable>(
        url: URL,
        origin: URLOrigin,
        method: String,
        headers: HTTPHeaders,
        hasBody: Bool,
        sink: any HTTP1ResponseSink,
        finished: @escaping @Sendable () throws -> Response
    ) -> RunningExchange<Response>? {
        guard let pool = self.directConnections,
            HTTP1ConnectionPool.carries(origin: origin, method: method, hasBody: hasBody, isProxied: self.configuration.proxies.proxy(for: url) != nil)
        else { return nil }
        let exchange = pool.execute(url: url, origin: origin, method: HTTPMethod(rawValue: method), headers: headers, sink: sink)
        return .direct(exchange, ended: exchange.ended.flatMapThrowing { try finished() })
    }

    /// Whether a download's `GET` of `url` goes over the engine's own HTTP/1.1 connections
    /// (``Configuration/usesDirectHTTP1``: plain HTTP, no proxy), which engines sharing a
    /// limiter keep within its per-host count together (``DirectConnectionCensus``).
    package func carriesDirectly(_ url: URL) -> Bool {
        guard self.directConnections != nil else { return false }
        return HTTP1ConnectionPool.carries(origin: URLOrigin(url), method: "GET", hasBody: false, isProxied: self.configuration.proxies.proxy(for: url) != nil)
    }

    /// Closes the connection pools. In-flight requests fail.
    package func shutdown() async {
        await self.directConnections?.shutdown()
        for (client, _) in self.clients.withLock({ Array($0.values) }) { try? await client.shutdown() }
    }

    private static func nanoseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
