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
