import AsyncHTTPClient
import HaulCore
import Logging
import NIOCore
import NIOPosix
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
        /// Redirects followed in one chain.
        package var maximumRedirects: Int = 16

        package init() {}
    }

    let client: HTTPClient
    /// For data transfers: decodes gzip and deflate bodies, as URLSession does for data tasks
    /// (downloads keep the representation as sent, so they use ``client``). Created on first use.
    private let decodingClientBox: Mutex<HTTPClient?> = Mutex(nil)
    private let clientConfiguration: HTTPClient.Configuration
    /// The loop all of this engine's transfers run on.
    package let eventLoop: any EventLoop
    package let limiter: HostConnectionLimiter
    let redirectPolicy: RedirectPolicy
    package let configuration: Configuration

    /// The session's cookie storage, when it sends and keeps cookies.
    package let cookieJar: (any TransferCookieJar)?

    package init(configuration: Configuration, cookieJar: (any TransferCookieJar)? = nil) {
        self.configuration = configuration
        self.cookieJar = cookieJar
        var pool = HTTPClient.Configuration.ConnectionPool(
            idleTimeout: .seconds(60),
            concurrentHTTP1ConnectionsPerHostSoftLimit: max(1, configuration.maximumConnectionsPerHost)
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
        // One event loop per engine: every connection of the session and every delegate
        // callback run on the same thread, so body chunks never hop between threads and idle
        // connections are always reusable (a connection pinned to another loop would not be).
        // Sessions spread over the loops of the shared group.
        self.eventLoop = MultiThreadedEventLoopGroup.singleton.next()
        self.client = HTTPClient(eventLoopGroup: self.eventLoop, configuration: clientConfiguration)
        self.clientConfiguration = clientConfiguration
        self.limiter = HostConnectionLimiter(limit: configuration.maximumConnectionsPerHost)
        self.redirectPolicy = RedirectPolicy(maximumRedirects: configuration.maximumRedirects)
    }

    /// The client that decodes `Content-Encoding` (gzip, deflate) for data transfers.
    var decodingClient: HTTPClient {
        self.decodingClientBox.withLock { box in
            if let client = box { return client }
            var configuration = self.clientConfiguration
            configuration.decompression = .enabled(limit: .none)
            let client = HTTPClient(eventLoopGroup: self.eventLoop, configuration: configuration)
            box = client
            return client
        }
    }

    /// Closes the connection pools. In-flight requests fail.
    package func shutdown() async {
        try? await self.client.shutdown()
        if let decoding = self.decodingClientBox.withLock({ $0 }) { try? await decoding.shutdown() }
    }

    private static func nanoseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
