import Foundation
import NIOSSL

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
