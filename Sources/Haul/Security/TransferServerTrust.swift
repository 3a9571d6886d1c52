import Crypto
import NIOSSL
import Foundation
import HaulCore
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A server's certificate chain as a session's delegate judges it: the Linux form of the
/// `SecTrust` in a server-trust challenge (``TransferAuthenticationMethodServerTrust``).
///
/// Found as `challenge.protectionSpace.transferServerTrust` in the session-level
/// `urlSession(_:didReceive:completionHandler:)`.
public struct TransferServerTrust: Sendable {
    /// The server's host, as in the request's URL.
    public let host: String
    /// The server's port.
    public let port: Int
    /// The certificates the server presented, DER-encoded, leaf first.
    public let certificates: [Data]

    let defaultEvaluation: @Sendable () async -> Bool

    init(host: String, port: Int, certificates: [Data], defaultEvaluation: @escaping @Sendable () async -> Bool) {
        self.host = host
        self.port = port
        self.certificates = certificates
        self.defaultEvaluation = defaultEvaluation
    }

    /// The SHA-256 of each certificate, lowercase hex, leaf first: what pinning compares.
    public var sha256Fingerprints: [String] {
        self.certificates.map { SHA256.hash(data: $0).hexString }
    }

    /// The SHA-256 of each certificate's public key (its DER SubjectPublicKeyInfo), lowercase
    /// hex, leaf first: the pin that survives certificate renewals with the same key (curl's
    /// `--pinnedpubkey sha256//…` is the base64 of the same digest). `nil` for a certificate
    /// whose key cannot be read.
    public var publicKeySHA256Fingerprints: [String?] {
        self.certificates.map { der in
            guard let certificate = try? NIOSSLCertificate(bytes: Array(der), format: .der),
                let spki = try? certificate.extractPublicKey().toSPKIBytes()
            else { return nil }
            return SHA256.hash(data: spki).hexString
        }
    }

    /// Whether the chain passes default verification — the system's trust roots and the host
    /// name — as `SecTrustEvaluateWithError` tells. The first call opens one more TLS
    /// connection to the server; later calls reuse the answer.
    public func evaluate() async -> Bool {
        await self.defaultEvaluation()
    }

    /// ``evaluate()`` with a completion handler, called once on an arbitrary thread.
    public func evaluate(completionHandler: @escaping @Sendable (Bool) -> Void) {
        let evaluation = self.defaultEvaluation
        Task { completionHandler(await evaluation()) }
    }
}

/// The protection space of a server-trust challenge, carrying the server's chain.
final class ServerTrustProtectionSpace: URLProtectionSpace, @unchecked Sendable {
    let trust: TransferServerTrust

    init(trust: TransferServerTrust) {
        self.trust = trust
        super.init(
            host: trust.host,
            port: trust.port,
            protocol: "https",
            realm: nil,
            authenticationMethod: TransferAuthenticationMethodServerTrust
        )
    }

    required init?(coder aDecoder: NSCoder) {
        nil
    }
}

/// The `authenticationMethod` of a server-trust challenge: the string of Apple's
/// `NSURLAuthenticationMethodServerTrust`, which swift-corelibs-foundation marks unavailable.
public let TransferAuthenticationMethodServerTrust = "NSURLAuthenticationMethodServerTrust"

extension URLProtectionSpace {
    /// The server's certificate chain, in a challenge whose `authenticationMethod` is
    /// `NSURLAuthenticationMethodServerTrust`; `nil` in other challenges. Linux has no
    /// `SecTrust`: this takes the place of `serverTrust`.
    public var transferServerTrust: TransferServerTrust? {
        (self as? ServerTrustProtectionSpace)?.trust
    }
}
