import Foundation
import Haul
import HaulTestSupport
import NIOSSL
import Synchronization
import Testing

/// Judges servers' certificate chains by a pinned SHA-256 and records what it was shown.
final class PinningDelegate: TransferSessionDelegate, Sendable {
    let pin: String?
    let shown = Mutex<[TransferServerTrust]>([])
    let defaultVerdicts = Mutex<[Bool]>([])

    /// `pin`: the leaf's SHA-256 to trust; `nil` answers `.performDefaultHandling`.
    init(pin: String?) {
        self.pin = pin
    }

    func urlSession(
        _ session: TransferSession,
        didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        guard challenge.protectionSpace.authenticationMethod == TransferAuthenticationMethodServerTrust,
            let trust = challenge.protectionSpace.transferServerTrust
        else {
            completionHandler(.performDefaultHandling, nil)
            return
        }
        self.shown.withLock { $0.append(trust) }
        guard let pin else {
            completionHandler(.performDefaultHandling, nil)
            return
        }
        trust.evaluate { trustedByDefault in
            self.defaultVerdicts.withLock { $0.append(trustedByDefault) }
            if trust.sha256Fingerprints.first == pin {
                completionHandler(.useCredential, nil)
            } else {
                completionHandler(.cancelAuthenticationChallenge, nil)
            }
        }
    }
}

@Suite("TLS: server trust, pinning, protocol versions, client certificates")
struct TLSTests {
    let certificates: TestCertificates

    init() throws {
        self.certificates = try TestCertificates()
    }

    func session(_ delegate: (any TransferSessionDelegate)?, configure: (TransferSessionConfiguration) -> Void = { _ in }) -> TransferSession {
        let configuration = TransferSessionConfiguration.ephemeral
        configure(configuration)
        return TransferSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
    }

    @Test("A pinned self-signed certificate is accepted: asked once per server, the bytes arrive")
    func pinnedAccepted() async throws {
        defer { certificates.remove() }
        let identity = try certificates.selfSigned(name: "pinned")
        let server = try await FaultInjectingHTTPServer.start(tls: try TestCertificates.serverConfiguration(identity))
        let delegate = PinningDelegate(pin: try identity.sha256())
        let session = self.session(delegate)
        defer { session.finishTasksAndInvalidate() }

        let (data, response) = try await session.data(from: server.url("/file/a?size=300000&seed=7"))
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(data == Data(TestContent.bytes(0..<300_000, seed: 7)))
        let (file, _) = try await session.download(from: server.url("/file/b?size=2000000&seed=8"))
        #expect(try TestContent.sha256Hex(ofFileAt: file.path) == TestContent.sha256Hex(size: 2_000_000, seed: 8))

        let shown = delegate.shown.withLock { $0 }
        #expect(shown.count == 1, "one question per host and port, not per request")
        #expect(shown.first?.host == "127.0.0.1" && shown.first?.port == server.port)
        #expect(shown.first?.certificates.count == 1)
        #expect(shown.first?.certificates.first.map { [UInt8]($0) } == (try identity.derBytes()))
        #expect(delegate.defaultVerdicts.withLock { $0 } == [false], "a self-signed certificate is not trusted by default")
        #expect(shown.first?.publicKeySHA256Fingerprints == [try identity.publicKeySHA256()], "the key pin, as openssl computes it")
        #expect(shown.first?.sha256Fingerprints != shown.first?.publicKeySHA256Fingerprints.compactMap { $0 })
        #expect(server.requests.count == 2)
        try await server.shutdown()
    }

    @Test("A certificate that does not match the pin is refused before any request is sent")
    func wrongPinRefused() async throws {
        defer { certificates.remove() }
        let expected = try certificates.selfSigned(name: "expected")
        let presented = try certificates.selfSigned(name: "impostor")
        let server = try await FaultInjectingHTTPServer.start(tls: try TestCertificates.serverConfiguration(presented))
        let delegate = PinningDelegate(pin: try expected.sha256())
        let session = self.session(delegate)
        defer { session.finishTasksAndInvalidate() }

        let error = await #expect(throws: URLError.self) {
            _ = try await session.data(from: server.url("/file/a?size=1000"))
        }
        #expect(error?.code == .cancelled)
        #expect(server.requests.isEmpty, "no HTTP request reached the refused server")
        // A refusal is not remembered: the next request asks again.
        _ = try? await session.data(from: server.url("/file/a?size=1000"))
        #expect(delegate.shown.withLock { $0.count } == 2)
        try await server.shutdown()
    }

    @Test("Default handling refuses a self-signed certificate, with and without a delegate")
    func defaultHandlingRefusesSelfSigned() async throws {
        defer { certificates.remove() }
        let identity = try certificates.selfSigned(name: "untrusted")
        let server = try await FaultInjectingHTTPServer.start(tls: try TestCertificates.serverConfiguration(identity))
        for delegate in [PinningDelegate(pin: nil), nil] {
            let session = self.session(delegate)
            let error = await #expect(throws: URLError.self) {
                _ = try await session.data(from: server.url("/file/a?size=1000"))
            }
            #expect(error?.code == .serverCertificateUntrusted, "\(String(describing: error))")
            session.finishTasksAndInvalidate()
        }
        #expect(server.requests.isEmpty)
        try await server.shutdown()
    }

    @Test("Trust is per server: a pin accepted for one server is not applied to another")
    func trustIsPerServer() async throws {
        defer { certificates.remove() }
        let first = try certificates.selfSigned(name: "first")
        let second = try certificates.selfSigned(name: "second")
        let serverA = try await FaultInjectingHTTPServer.start(tls: try TestCertificates.serverConfiguration(first))
        let serverB = try await FaultInjectingHTTPServer.start(tls: try TestCertificates.serverConfiguration(second))
        let delegate = PinningDelegate(pin: try first.sha256())
        let session = self.session(delegate)
        defer { session.finishTasksAndInvalidate() }
        _ = try await session.data(from: serverA.url("/file/a?size=1000"))
        await #expect(throws: URLError.self) { _ = try await session.data(from: serverB.url("/file/a?size=1000")) }
        #expect(delegate.shown.withLock { $0.map(\.port) } == [serverA.port, serverB.port])
        #expect(serverB.requests.isEmpty)
        try await serverA.shutdown()
        try await serverB.shutdown()
    }

    @Test("The accepted chain is pinned: a new connection to the same port presenting another certificate fails")
    func pinHoldsOnLaterConnections() async throws {
        defer { certificates.remove() }
        let original = try certificates.selfSigned(name: "original")
        let replacement = try certificates.selfSigned(name: "replacement")
        let server = try await FaultInjectingHTTPServer.start(tls: try TestCertificates.serverConfiguration(original))
        let delegate = PinningDelegate(pin: try original.sha256())
        let session = self.session(delegate)
        defer { session.finishTasksAndInvalidate() }
        var request = URLRequest(url: server.url("/file/a?size=1000"))
        request.setValue("close", forHTTPHeaderField: "Connection")  // no pooled connection survives
        _ = try await session.data(for: request)

        // The same port now presents another certificate (the listener stays: no other
        // test's socket can take the port in between).
        try server.replaceTLS(try TestCertificates.serverConfiguration(replacement))
        let before = server.requests.count
        let error = await #expect(throws: URLError.self) {
            _ = try await session.data(from: server.url("/file/other?size=1000"))
        }
        #expect(error?.code == .serverCertificateUntrusted, "\(String(describing: error))")
        #expect(server.requests.count == before)
        #expect(delegate.shown.withLock { $0.count } == 1, "the decision for this server was already made")
        try await server.shutdown()
    }

    @Test("Through an HTTPS proxy the delegate judges the origin's chain too (the probe tunnels with CONNECT)")
    func trustThroughProxy() async throws {
        defer { certificates.remove() }
        let identity = try certificates.selfSigned(name: "behind-proxy")
        let origin = try await FaultInjectingHTTPServer.start(tls: try TestCertificates.serverConfiguration(identity))
        let proxy = try await LoopbackTunnelProxy.start(originPort: origin.port)
        let url = URL(string: "https://secure.haul.test/file/p?size=40000&seed=4")!  // never resolved: the proxy maps it to loopback

        let delegate = PinningDelegate(pin: try identity.sha256())
        let session = self.session(delegate) {
            $0.connectionProxyDictionary = ["HTTPSEnable": true, "HTTPSProxy": "127.0.0.1", "HTTPSPort": proxy.port]
        }
        let (data, _) = try await session.data(from: url)
        #expect(data == Data(TestContent.bytes(0..<40_000, seed: 4)))
        #expect(delegate.shown.withLock { $0.map(\.host) } == ["secure.haul.test"])
        #expect(
            proxy.connectTargets == Array(repeating: "secure.haul.test:443", count: 3),
            "the probe, the delegate's evaluate() (default verification, also tunnelled) and the request"
        )
        #expect(delegate.defaultVerdicts.withLock { $0 } == [false])
        session.finishTasksAndInvalidate()

        let wrong = PinningDelegate(pin: "00")
        let refusing = self.session(wrong) {
            $0.connectionProxyDictionary = ["HTTPSEnable": true, "HTTPSProxy": "127.0.0.1", "HTTPSPort": proxy.port]
        }
        let error = await #expect(throws: URLError.self) { _ = try await refusing.data(from: url) }
        #expect(error?.code == .cancelled)
        #expect(origin.requests.count == 1, "the refused session sent no request")
        refusing.finishTasksAndInvalidate()
        try await proxy.shutdown()
        try await origin.shutdown()
    }

    @Test("A server that was down when first asked is judged once it is up (no decision kept without a chain)")
    func serverDownThenUp() async throws {
        defer { certificates.remove() }
        let identity = try certificates.selfSigned(name: "late")
        let refusing = try RefusingPort()
        let port = refusing.port
        defer { withExtendedLifetime(refusing) {} }
        let delegate = PinningDelegate(pin: try identity.sha256())
        let session = self.session(delegate)
        defer { session.finishTasksAndInvalidate() }
        let url = URL(string: "https://127.0.0.1:\(port)/file/late?size=1000")!
        let down = await #expect(throws: URLError.self) { _ = try await session.data(from: url) }
        #expect(down?.code == .cannotConnectToHost)
        #expect(delegate.shown.withLock { $0.isEmpty })

        let server = try await FaultInjectingHTTPServer.start(port: port, tls: try TestCertificates.serverConfiguration(identity))
        let (data, _) = try await session.data(from: url)
        #expect(data.count == 1000)
        #expect(delegate.shown.withLock { $0.count } == 1)
        try await server.shutdown()
    }

    @Test("tlsAdditionalTrustedCertificates: a private root is trusted by default verification, others still are not")
    func additionalRoots() async throws {
        defer { certificates.remove() }
        let authority = try certificates.authority(name: "private-ca")
        let issued = try certificates.issue(name: "issued", by: authority, forClient: false)
        let stranger = try certificates.selfSigned(name: "stranger")
        let server = try await FaultInjectingHTTPServer.start(tls: try TestCertificates.serverConfiguration(issued))
        let other = try await FaultInjectingHTTPServer.start(tls: try TestCertificates.serverConfiguration(stranger))
        let session = self.session(nil) {
            $0.tlsAdditionalTrustedCertificates = try? TransferTrustedCertificates(pemFile: authority.certificatePath)
        }
        defer { session.finishTasksAndInvalidate() }
        let (data, _) = try await session.data(from: server.url("/file/ca?size=2000&seed=2"))
        #expect(data == Data(TestContent.bytes(0..<2000, seed: 2)))
        let error = await #expect(throws: URLError.self) { _ = try await session.data(from: other.url("/file/ca?size=10")) }
        #expect(error?.code == .serverCertificateUntrusted)
        #expect(throws: (any Error).self) { _ = try TransferTrustedCertificates(pemFile: "/nonexistent.pem") }
        #expect(throws: (any Error).self) { _ = try TransferTrustedCertificates(pem: Data("junk".utf8)) }
        try await server.shutdown()
        try await other.shutdown()
    }

    @Test("tlsMinimumSupportedProtocolVersion: a TLS 1.2-only server is refused when 1.3 is required")
    func minimumVersion() async throws {
        defer { certificates.remove() }
        let identity = try certificates.selfSigned(name: "old")
        let server = try await FaultInjectingHTTPServer.start(
            tls: try TestCertificates.serverConfiguration(identity, maximumVersion: .tlsv12)
        )
        let pin = try identity.sha256()
        let relaxed = self.session(PinningDelegate(pin: pin))
        let (_, response) = try await relaxed.data(from: server.url("/file/a?size=1000"))
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        relaxed.finishTasksAndInvalidate()

        let strict = self.session(PinningDelegate(pin: pin)) { $0.tlsMinimumSupportedProtocolVersion = .TLSv13 }
        let error = await #expect(throws: URLError.self) {
            _ = try await strict.data(from: server.url("/file/a?size=1000"))
        }
        #expect(error?.code == .secureConnectionFailed, "\(String(describing: error))")
        strict.finishTasksAndInvalidate()
        #expect(server.requests.count == 1)
        try await server.shutdown()
    }

    @Test("Client certificates: a server that requires one refuses a session without it and serves one with it")
    func clientCertificate() async throws {
        defer { certificates.remove() }
        let authority = try certificates.authority(name: "clients-ca")
        let serverIdentity = try certificates.selfSigned(name: "server")
        let client = try certificates.issue(name: "client", by: authority, forClient: true)
        let stranger = try certificates.selfSigned(name: "stranger")
        let server = try await FaultInjectingHTTPServer.start(
            tls: try TestCertificates.serverConfiguration(serverIdentity, requiringClientCertificatesFrom: authority)
        )
        let pin = try serverIdentity.sha256()

        let anonymous = self.session(PinningDelegate(pin: pin))
        let refused = await #expect(throws: URLError.self) {
            _ = try await anonymous.data(from: server.url("/file/a?size=1000"))
        }
        #expect([.clientCertificateRequired, .clientCertificateRejected, .secureConnectionFailed].contains(refused?.code), "\(String(describing: refused))")
        anonymous.finishTasksAndInvalidate()

        let foreign = self.session(PinningDelegate(pin: pin)) {
            $0.tlsClientCertificate = try? TransferClientCertificate(certificateChainFile: stranger.certificatePath, privateKeyFile: stranger.keyPath)
        }
        await #expect(throws: URLError.self) { _ = try await foreign.data(from: server.url("/file/a?size=1000")) }
        foreign.finishTasksAndInvalidate()
        #expect(server.requests.isEmpty)

        let identified = self.session(PinningDelegate(pin: pin)) {
            $0.tlsClientCertificate = try? TransferClientCertificate(certificateChainFile: client.certificatePath, privateKeyFile: client.keyPath)
        }
        let (data, response) = try await identified.data(from: server.url("/file/a?size=5000&seed=3"))
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(data == Data(TestContent.bytes(0..<5000, seed: 3)))
        identified.finishTasksAndInvalidate()
        try await server.shutdown()
    }

    @Test("Broken client certificate material is a clear error, not a silent anonymous session")
    func badClientCertificate() throws {
        #expect(throws: TransferClientCertificate.Failure.self) {
            _ = try TransferClientCertificate(certificateChainPEM: Data("not a certificate".utf8), privateKeyPEM: Data())
        }
        #expect(throws: TransferClientCertificate.Failure.self) {
            _ = try TransferClientCertificate(certificateChainFile: "/nonexistent/cert.pem", privateKeyFile: "/nonexistent/key.pem")
        }
    }
}
