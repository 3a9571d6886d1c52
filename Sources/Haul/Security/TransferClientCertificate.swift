import Foundation
import HaulEngine
import NIOSSL

/// The certificate (and its chain) with private key a session presents when a server asks
/// for one: the Linux form of a client-certificate `URLCredential(identity:…)`, set on the
/// configuration (``TransferSessionConfiguration/tlsClientCertificate``) because Linux has no
/// `SecIdentity` to hand over in a challenge.
public struct TransferClientCertificate: Sendable {
    /// Why certificate material could not be used.
    public struct Failure: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    let identity: TLSOptions.ClientIdentity

    /// From PEM text: the certificate chain (leaf first) and its private key.
    public init(certificateChainPEM: Data, privateKeyPEM: Data) throws {
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMBytes(Array(certificateChainPEM))
        } catch {
            throw Failure(description: "the client certificate chain is not PEM certificates: \(error)")
        }
        guard !chain.isEmpty else { throw Failure(description: "the client certificate chain holds no certificate") }
        let key: NIOSSLPrivateKey
        do {
            key = try NIOSSLPrivateKey(bytes: Array(privateKeyPEM), format: .pem)
        } catch {
            throw Failure(description: "the client private key is not a PEM private key: \(error)")
        }
        self.identity = TLSOptions.ClientIdentity(chain: chain, key: key)
    }

    /// From PEM files: the certificate chain (leaf first) and its private key.
    public init(certificateChainFile: String, privateKeyFile: String) throws {
        guard let chain = FileManager.default.contents(atPath: certificateChainFile) else {
            throw Failure(description: "cannot read the client certificate file \(certificateChainFile)")
        }
        guard let key = FileManager.default.contents(atPath: privateKeyFile) else {
            throw Failure(description: "cannot read the client key file \(privateKeyFile)")
        }
        try self.init(certificateChainPEM: chain, privateKeyPEM: key)
    }
}

/// Certificates a session trusts as roots besides the system's (a private certificate
/// authority, a self-signed server): ``TransferSessionConfiguration/tlsAdditionalTrustedCertificates``.
/// A Haul extension; on Apple's platforms this is done in the trust challenge.
public struct TransferTrustedCertificates: Sendable {
    let certificates: [NIOSSLCertificate]

    /// From PEM text holding one or more certificates.
    public init(pem: Data) throws {
        let certificates: [NIOSSLCertificate]
        do {
            certificates = try NIOSSLCertificate.fromPEMBytes(Array(pem))
        } catch {
            throw TransferClientCertificate.Failure(description: "not PEM certificates: \(error)")
        }
        guard !certificates.isEmpty else { throw TransferClientCertificate.Failure(description: "no certificate in the PEM text") }
        self.certificates = certificates
    }

    /// From a PEM file holding one or more certificates.
    public init(pemFile path: String) throws {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw TransferClientCertificate.Failure(description: "cannot read the certificate file \(path)")
        }
        do {
            try self.init(pem: data)
        } catch let failure as TransferClientCertificate.Failure {
            throw TransferClientCertificate.Failure(description: "\(path): \(failure.description)")
        }
    }
}

/// TLS protocol versions, as Apple's `tls_protocol_version_t`.
public enum TLSProtocolVersion: Sendable, Hashable {
    case TLSv10
    case TLSv11
    case TLSv12
    case TLSv13

    var nioVersion: TLSVersion {
        switch self {
        case .TLSv10: .tlsv1
        case .TLSv11: .tlsv11
        case .TLSv12: .tlsv12
        case .TLSv13: .tlsv13
        }
    }
}

/// Apple's name for ``TLSProtocolVersion``, so that code setting
/// `tlsMinimumSupportedProtocolVersion = .TLSv12` ports unchanged.
public typealias tls_protocol_version_t = TLSProtocolVersion
