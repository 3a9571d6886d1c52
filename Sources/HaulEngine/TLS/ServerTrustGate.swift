import Foundation
import HaulCore
import NIOCore
import NIOSSL
import Synchronization

/// What a session's delegate is shown about a server before the first request to it.
package struct ServerTrustQuestion: Sendable {
    package var host: String
    package var port: Int
    /// The certificates the server presented, DER-encoded, leaf first.
    package var certificates: [[UInt8]]
    /// Whether the chain passes default verification (the system's trust roots, the host
    /// name). Runs one more handshake the first time it is asked; the answer is kept.
    package var evaluateByDefault: @Sendable () async -> Bool
}

/// A delegate's verdict on a server's certificate chain.
package enum ServerTrustAnswer: Sendable {
    /// Trust the chain that was shown (pinning, self-signed servers).
    case trustPresentedChain
    /// Default verification decides.
    case performDefaultHandling
    /// Refuse the server: requests fail with `error`.
    case refuse(URLError)
}

/// Asks the session's delegate about each https server once, before the first request to it,
/// and turns the answer into the TLS configuration the engine's requests to that server use.
///
/// Trusting a presented chain pins it: requests to that host and port then trust exactly that
/// chain (not the system's roots), so a later connection presenting another certificate fails.
/// When the accepted chain also passes default verification the default configuration is kept
/// instead, because a chain that ends in an intermediate cannot be used as its own anchor.
/// A refusal is not remembered: the next request asks again.
package final class ServerTrustGate: Sendable {
    package typealias Handler = @Sendable (ServerTrustQuestion) async -> ServerTrustAnswer

    /// How requests to one server go.
    package enum Decision: Sendable {
        /// The engine's default TLS configuration.
        case useDefault
        /// This configuration (trusting only the accepted chain).
        case use(TLSConfiguration)
        /// No request: fail with this error.
        case refused(URLError)
    }

    private let handler: Handler
    private let options: TLSOptions
    private let connectTimeout: TimeAmount
    private let eventLoop: any EventLoop
    /// A decision, and whether it may be kept for later requests.
    private struct Verdict: Sendable {
        var decision: Decision
        var keep: Bool
    }

    private let decisions = Mutex<[String: Task<Verdict, Never>]>([:])

    package init(handler: @escaping Handler, options: TLSOptions, connectTimeout: TimeAmount, eventLoop: any EventLoop) {
        self.handler = handler
        self.options = options
        self.connectTimeout = connectTimeout
        self.eventLoop = eventLoop
    }

    /// The decision for `host`:`port`, asking the delegate when there is none yet. Concurrent
    /// callers for one server share one probe and one question.
    package func decision(host: String, port: Int, proxy: ProxySettings.Server? = nil) async -> Decision {
        let key = "\(host.lowercased()):\(port)"
        let task = self.decisions.withLock { decisions -> Task<Verdict, Never> in
            if let task = decisions[key] { return task }
            let task = Task { await self.decide(host: host, port: port, proxy: proxy) }
            decisions[key] = task
            return task
        }
        let verdict = await task.value
        if !verdict.keep {
            self.decisions.withLock { decisions in
                if decisions[key] == task { decisions[key] = nil }
            }
        }
        return verdict.decision
    }

    /// Judges a chain met on a connection the engine owns (a stream task's STARTTLS): asks the
    /// handler once, with default verification by a probe connection when it defers to it.
    package func judge(host: String, port: Int, chain: [NIOSSLCertificate]) async -> Bool {
        let question = self.question(host: host, port: port, proxy: nil, chain: chain)
        switch await self.handler(question) {
        case .trustPresentedChain: return true
        case .refuse: return false
        case .performDefaultHandling: return await question.evaluateByDefault()
        }
    }

    /// A certificate check for a TLS handshake the engine runs itself (stream tasks' STARTTLS,
    /// WebSocket tasks' `wss:`): ``judge(host:port:chain:)`` decides.
    package func verificationCallback(host: String, port: Int) -> NIOSSLCustomVerificationCallback {
        { chain, promise in
            let boxed = UncheckedChain(chain)
            Task {
                let trusted = await self.judge(host: host, port: port, chain: boxed.chain)
                promise.succeed(trusted ? .certificateVerified : .failed)
            }
        }
    }

    /// The question about `chain`; its default evaluation probes `host`:`port` (through
    /// `proxy`) with the default configuration, at most once.
    private func question(host: String, port: Int, proxy: ProxySettings.Server?, chain: [NIOSSLCertificate]) -> ServerTrustQuestion {
        let defaultConfiguration = self.options.clientConfiguration()
        let connectTimeout = self.connectTimeout
        let eventLoop = self.eventLoop
        let verdict = DefaultVerdict()
        return ServerTrustQuestion(
            host: host,
            port: port,
            certificates: chain.compactMap { try? $0.toDERBytes() },
            evaluateByDefault: {
                await verdict.value {
                    (try? await TLSHandshakeProbe.passesVerification(
                        host: host,
                        port: port,
                        proxy: proxy,
                        configuration: defaultConfiguration,
                        connectTimeout: connectTimeout,
                        eventLoop: eventLoop
                    )) ?? false
                }
            }
        )
    }

    /// Refusals are not kept (the next request asks again), nor is "no chain seen" (the server
    /// was down or not speaking TLS: the delegate must see its chain once it is up).
    private func decide(host: String, port: Int, proxy: ProxySettings.Server?) async -> Verdict {
        let chain: [NIOSSLCertificate]
        do {
            var probeConfiguration = self.options.clientConfiguration()
            probeConfiguration.certificateVerification = .none
            chain = try await TLSHandshakeProbe.presentedChain(
                host: host,
                port: port,
                proxy: proxy,
                configuration: probeConfiguration,
                connectTimeout: self.connectTimeout,
                eventLoop: self.eventLoop
            )
        } catch {
            // No chain to judge (no connection, no TLS): the request itself reports why.
            return Verdict(decision: .useDefault, keep: false)
        }
        let question = self.question(host: host, port: port, proxy: proxy, chain: chain)
        switch await self.handler(question) {
        case .performDefaultHandling:
            return Verdict(decision: .useDefault, keep: true)
        case .refuse(let error):
            return Verdict(decision: .refused(error), keep: false)
        case .trustPresentedChain:
            if await question.evaluateByDefault() { return Verdict(decision: .useDefault, keep: true) }
            return Verdict(decision: .use(self.options.pinnedConfiguration(trusting: chain)), keep: true)
        }
    }
}

/// The default-verification result of one chain, computed at most once.
private actor DefaultVerdict {
    private var result: Bool?

    func value(_ compute: @Sendable () async -> Bool) async -> Bool {
        if let result { return result }
        let computed = await compute()
        self.result = computed
        return computed
    }
}

/// A chain handed from NIOSSL's callback to the task that judges it (certificates are
/// immutable values).
private struct UncheckedChain: @unchecked Sendable {
    let chain: [NIOSSLCertificate]
    init(_ chain: [NIOSSLCertificate]) { self.chain = chain }
}
