import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HaulCore

/// The behaviour of a ``TransferSession``, shaped like `URLSessionConfiguration`.
///
/// A session copies its configuration when it is created: changing a configuration object
/// afterwards does not affect sessions made from it.
///
/// ```swift
/// let configuration = TransferSessionConfiguration.default
/// configuration.timeoutIntervalForRequest = 30
/// let session = TransferSession(configuration: configuration, delegate: self, delegateQueue: nil)
/// ```
public final class TransferSessionConfiguration: @unchecked Sendable {
    // @unchecked: like URLSessionConfiguration this is a mutable settings object meant to be
    // filled in on one thread before a session copies it; sessions never share it.

    /// A session with the default behaviour. Each access returns a new object.
    public class var `default`: TransferSessionConfiguration { TransferSessionConfiguration(kind: .default) }

    /// A session that keeps nothing on disk beyond in-flight download files, which are removed
    /// when the session is invalidated. Each access returns a new object.
    public class var ephemeral: TransferSessionConfiguration { TransferSessionConfiguration(kind: .ephemeral) }

    /// A session whose download tasks run in `hauld`, the background transfer daemon: they go
    /// on after the process exits or crashes, and a later session with the same identifier gets
    /// their results. Background sessions need a delegate, transfer only http and https, always
    /// follow redirects, and have no completion-handler or data tasks, as on Apple's platforms.
    /// Each access returns a new object.
    public class func background(withIdentifier identifier: String) -> TransferSessionConfiguration {
        let configuration = TransferSessionConfiguration(kind: .background)
        configuration.identifier = identifier
        return configuration
    }

    enum Kind: Sendable, Hashable {
        case `default`
        case ephemeral
        case background
    }

    let kind: Kind

    /// The longest time to wait for the next byte of a request or response (idle timeout), in
    /// seconds. Default 60.
    public var timeoutIntervalForRequest: TimeInterval = 60
    /// The longest time a whole task may take, in seconds, retries and resumes included.
    /// Default 7 days.
    public var timeoutIntervalForResource: TimeInterval = 7 * 24 * 3600
    /// Headers added to every request that does not set them itself.
    public var httpAdditionalHeaders: [String: String]?
    /// Requests running at once against one host; more wait their turn. Default 6.
    public var httpMaximumConnectionsPerHost: Int = 6
    /// Haul extension: connections one download task may use at once. Above 1, a download
    /// whose server accepts byte ranges and names the file with a strong validator is fetched
    /// in segments over several connections (adaptive: the slowest part is split, the tail is
    /// raced), each checked to be the same entity; they count against
    /// ``httpMaximumConnectionsPerHost``. Resume data carries the map of finished ranges.
    /// A background session's downloads are segmented in `hauld` the same way (its store
    /// keeps the map across a crash). Mirrors: `TransferSessionDownloadTask.haulMirrors`.
    /// Default 1: one request per task, as URLSession.
    public var haulMaximumConnectionsPerDownload: Int = 1
    /// Haul extension: no segment of a segmented download is smaller than this. Default 1 MiB.
    public var haulMinimumSegmentBytes: Int = 1 << 20
    /// Haul extension: a segmented download whose first connection receives at least this many
    /// bytes per second stays on that one connection; segments are added from the first 50 ms
    /// window below it (a slow or throttled server, a stall), and then for good. Default
    /// 512 MiB/s (beyond what a SATA SSD writes: more connections would add CPU, not speed);
    /// `.infinity` splits every time.
    public var haulSufficientConnectionSpeed: Double = 512 * 1024 * 1024
    /// Redirects followed in one chain before the task fails with `httpTooManyRedirects`.
    /// Default 16, as URLSession.
    public var maximumRedirects: Int = 16
    /// Where in-flight downloads are written. Default: `$TMPDIR/haul` (created when needed).
    public var temporaryDirectory: URL = FileManager.default.temporaryDirectory.appendingPathComponent("haul", isDirectory: true)
    /// Kept for source compatibility with URLSession code; Linux has no cellular policy.
    public var allowsCellularAccess: Bool = true
    /// Kept for source compatibility; in-process sessions always run tasks at once.
    public var isDiscretionary: Bool = false
    /// Kept for source compatibility; connectivity is not awaited.
    public var waitsForConnectivity: Bool = false
    /// Kept for source compatibility: Linux has no service classes for sockets.
    public var networkServiceType: URLRequest.NetworkServiceType = .default
    /// Kept for source compatibility: Linux has no app-extension containers.
    public var sharedContainerIdentifier: String?
    /// Kept for source compatibility (URLSession ignores it too): requests are not pipelined.
    public var httpShouldUsePipelining: Bool = false
    /// Kept for source compatibility: Linux does not reclaim sockets of background processes.
    public var shouldUseExtendedBackgroundIdleMode: Bool = false
    /// Kept for source compatibility: Linux has no expensive or constrained network signal.
    public var allowsExpensiveNetworkAccess: Bool = true
    /// Kept for source compatibility: Linux has no expensive or constrained network signal.
    public var allowsConstrainedNetworkAccess: Bool = true

    /// The identifier of a background session, `nil` for in-process sessions.
    public internal(set) var identifier: String?
    /// Whether `hauld` launches the client (``launchCommand``) when events of this background
    /// session are waiting and no client is connected — the Linux form of waking the app.
    /// Default `true`, as on Apple's platforms.
    public var sessionSendsLaunchEvents: Bool = true
    /// What `hauld` runs to launch the client; `nil` means the current executable **without
    /// arguments** — never the command line that created the session, which would create its
    /// work again on every launch. The launched program finds the session's identifier in
    /// `HAUL_SESSION_IDENTIFIER` (and `HAUL_LAUNCH_REASON=background-events`): it creates a
    /// session with that identifier and a delegate, as an app woken by `nsurlsessiond` does,
    /// and receives what is waiting.
    public var launchCommand: [String]?

    /// The cookie store: ``TransferCookieStorage/shared`` (on disk) for `.default`, a private
    /// store in memory for `.ephemeral`; `nil` for no cookies at all.
    public var httpCookieStorage: TransferCookieStorage?
    /// Whether requests carry the store's cookies. Default `true`.
    public var httpShouldSetCookies: Bool = true
    /// Which responses may set cookies. Default `.onlyFromMainDocumentDomain` (as URLSession;
    /// a request without a `mainDocumentURL` may set cookies for its own domain).
    public var httpCookieAcceptPolicy: HTTPCookie.AcceptPolicy = .onlyFromMainDocumentDomain
    /// Proxies, as `URLSessionConfiguration.connectionProxyDictionary`: `HTTPEnable`,
    /// `HTTPProxy`, `HTTPPort`, `HTTPSEnable`, `HTTPSProxy`, `HTTPSPort` (https goes through the
    /// proxy with `CONNECT`), `ExceptionsList` (hosts or `.suffixes` to reach directly).
    public var connectionProxyDictionary: [AnyHashable: Any]?
    /// Whether `http_proxy`, `https_proxy` and `no_proxy` from the environment apply (when
    /// ``connectionProxyDictionary`` is `nil`). Default `false`: a library should not change
    /// routes behind its program's back; tools like `haul get` turn it on.
    public var usesEnvironmentProxies: Bool = false
    /// Custom protocol handlers asked, in order, before the network (`URLProtocol` subclasses'
    /// Haul form). Default empty.
    public var protocolClasses: [TransferURLProtocol.Type] = []
    /// Where credentials are found for `.performDefaultHandling` and kept after
    /// `.useCredential`: ``TransferCredentialStorage/shared`` for `.default`, a private store
    /// for `.ephemeral`; `nil` for none.
    public var urlCredentialStorage: TransferCredentialStorage?
    /// The HTTP cache data tasks use: ``TransferURLCache/shared`` (memory and disk) for
    /// `.default`, a private memory-only cache for `.ephemeral`; `nil` for none.
    public var urlCache: TransferURLCache?
    /// The cache policy of requests whose own `cachePolicy` is `.useProtocolCachePolicy`
    /// (and of tasks created from a URL). Default `.useProtocolCachePolicy`.
    public var requestCachePolicy: URLRequest.CachePolicy = .useProtocolCachePolicy
    /// The lowest TLS version offered. Default `.TLSv12`, as URLSession.
    public var tlsMinimumSupportedProtocolVersion: TLSProtocolVersion = .TLSv12
    /// The highest TLS version offered. Default `.TLSv13`.
    public var tlsMaximumSupportedProtocolVersion: TLSProtocolVersion = .TLSv13
    /// The client certificate presented when a server asks for one; `nil` for none.
    public var tlsClientCertificate: TransferClientCertificate?
    /// Root certificates trusted besides the system's, for default verification (a Haul
    /// extension: a private CA without a trust challenge). `nil` for the system's only.
    public var tlsAdditionalTrustedCertificates: TransferTrustedCertificates?

    /// Whether the delegate is shown each https server's chain (one probe handshake per
    /// server). Tools whose delegate never judges trust (`haul get`) turn it off.
    package var asksDelegateAboutServerTrust = true

    init(kind: Kind) {
        self.kind = kind
        switch kind {
        case .default:
            self.httpCookieStorage = .shared
            self.urlCredentialStorage = .shared
            self.urlCache = .shared
        case .ephemeral:
            self.httpCookieStorage = TransferCookieStorage()
            self.urlCredentialStorage = TransferCredentialStorage()
            self.urlCache = TransferURLCache(memoryCapacity: 4 << 20, diskCapacity: 0)
        case .background:
            self.httpCookieStorage = nil
            self.urlCredentialStorage = nil
            self.urlCache = nil
        }
    }

    /// An independent copy, as `URLSessionConfiguration.copy()`.
    public func copy() -> TransferSessionConfiguration {
        let copy = TransferSessionConfiguration(kind: self.kind)
        copy.timeoutIntervalForRequest = self.timeoutIntervalForRequest
        copy.timeoutIntervalForResource = self.timeoutIntervalForResource
        copy.httpAdditionalHeaders = self.httpAdditionalHeaders
        copy.httpMaximumConnectionsPerHost = self.httpMaximumConnectionsPerHost
        copy.maximumRedirects = self.maximumRedirects
        copy.haulMaximumConnectionsPerDownload = self.haulMaximumConnectionsPerDownload
        copy.haulMinimumSegmentBytes = self.haulMinimumSegmentBytes
        copy.haulSufficientConnectionSpeed = self.haulSufficientConnectionSpeed
        copy.temporaryDirectory = self.temporaryDirectory
        copy.allowsCellularAccess = self.allowsCellularAccess
        copy.isDiscretionary = self.isDiscretionary
        copy.waitsForConnectivity = self.waitsForConnectivity
        copy.networkServiceType = self.networkServiceType
        copy.sharedContainerIdentifier = self.sharedContainerIdentifier
        copy.httpShouldUsePipelining = self.httpShouldUsePipelining
        copy.shouldUseExtendedBackgroundIdleMode = self.shouldUseExtendedBackgroundIdleMode
        copy.allowsExpensiveNetworkAccess = self.allowsExpensiveNetworkAccess
        copy.allowsConstrainedNetworkAccess = self.allowsConstrainedNetworkAccess
        copy.identifier = self.identifier
        copy.sessionSendsLaunchEvents = self.sessionSendsLaunchEvents
        copy.launchCommand = self.launchCommand
        copy.httpCookieStorage = self.httpCookieStorage
        copy.httpShouldSetCookies = self.httpShouldSetCookies
        copy.httpCookieAcceptPolicy = self.httpCookieAcceptPolicy
        copy.urlCredentialStorage = self.urlCredentialStorage
        copy.connectionProxyDictionary = self.connectionProxyDictionary
        copy.usesEnvironmentProxies = self.usesEnvironmentProxies
        copy.protocolClasses = self.protocolClasses
        copy.tlsMinimumSupportedProtocolVersion = self.tlsMinimumSupportedProtocolVersion
        copy.tlsMaximumSupportedProtocolVersion = self.tlsMaximumSupportedProtocolVersion
        copy.tlsClientCertificate = self.tlsClientCertificate
        copy.tlsAdditionalTrustedCertificates = self.tlsAdditionalTrustedCertificates
        copy.urlCache = self.urlCache
        copy.asksDelegateAboutServerTrust = self.asksDelegateAboutServerTrust
        copy.requestCachePolicy = self.requestCachePolicy
        return copy
    }

    /// The proxies these settings select.
    var proxySettings: ProxySettings {
        if let dictionary = self.connectionProxyDictionary {
            var strings: [String: Any] = [:]
            for (key, value) in dictionary { strings["\(key)"] = value }
            return ProxySettings.fromDictionary(strings)
        }
        return self.usesEnvironmentProxies ? ProxySettings.fromEnvironment(ProcessInfo.processInfo.environment) : ProxySettings()
    }

    /// The immutable snapshot a session keeps.
    var snapshot: Snapshot {
        Snapshot(
            kind: self.kind,
            timeoutIntervalForRequest: self.timeoutIntervalForRequest,
            timeoutIntervalForResource: self.timeoutIntervalForResource,
            httpAdditionalHeaders: self.httpAdditionalHeaders ?? [:],
            httpMaximumConnectionsPerHost: self.httpMaximumConnectionsPerHost,
            maximumRedirects: self.maximumRedirects,
            temporaryDirectory: self.temporaryDirectory,
            identifier: self.identifier,
            sessionSendsLaunchEvents: self.sessionSendsLaunchEvents,
            launchCommand: self.launchCommand,
            requestCachePolicy: Self.cachePolicy(self.requestCachePolicy) ?? .useProtocolCachePolicy
        )
    }

    /// The engine's form of a `URLRequest.CachePolicy` (`nil` for a case Haul does not know).
    static func cachePolicy(_ policy: URLRequest.CachePolicy) -> CachePolicy? {
        switch policy {
        case .useProtocolCachePolicy: .useProtocolCachePolicy
        case .reloadIgnoringLocalCacheData, .reloadIgnoringLocalAndRemoteCacheData: .reloadIgnoringLocalCacheData
        case .returnCacheDataElseLoad: .returnCacheDataElseLoad
        case .returnCacheDataDontLoad: .returnCacheDataDontLoad
        case .reloadRevalidatingCacheData: .reloadRevalidatingCacheData
        @unknown default: nil
        }
    }

    struct Snapshot: Sendable {
        var kind: Kind
        var timeoutIntervalForRequest: TimeInterval
        var timeoutIntervalForResource: TimeInterval
        var httpAdditionalHeaders: [String: String]
        var httpMaximumConnectionsPerHost: Int
        var maximumRedirects: Int
        var temporaryDirectory: URL
        var identifier: String?
        var sessionSendsLaunchEvents: Bool
        var launchCommand: [String]?
        var requestCachePolicy: CachePolicy
    }
}
