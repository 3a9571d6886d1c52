import NIOSSL

/// The TLS settings of one engine: protocol versions and the client certificate it presents.
package struct TLSOptions: Sendable {
    /// The lowest protocol version offered; `nil` for the library default (TLS 1.0 in NIOSSL,
    /// TLS 1.2 in practice with today's servers).
    package var minimumVersion: TLSVersion?
    /// The highest protocol version offered; `nil` for the newest (TLS 1.3).
    package var maximumVersion: TLSVersion?
    /// The certificate chain (leaf first) and key presented when a server asks for one.
    package var clientIdentity: ClientIdentity?
    /// Certificates trusted as roots besides the system's (a private CA).
    package var additionalTrustRoots: [NIOSSLCertificate] = []

    package struct ClientIdentity: Sendable {
        package var chain: [NIOSSLCertificate]
        package var key: NIOSSLPrivateKey

        package init(chain: [NIOSSLCertificate], key: NIOSSLPrivateKey) {
            self.chain = chain
            self.key = key
        }
    }

    package init() {}

    /// The client configuration with the system's trust roots and full verification.
    package func clientConfiguration() -> TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        if let minimumVersion { configuration.minimumTLSVersion = minimumVersion }
        configuration.maximumTLSVersion = self.maximumVersion
        if !self.additionalTrustRoots.isEmpty {
            configuration.additionalTrustRoots = [.certificates(self.additionalTrustRoots)]
        }
        if let clientIdentity {
            configuration.certificateChain = clientIdentity.chain.map { .certificate($0) }
            configuration.privateKey = .privateKey(clientIdentity.key)
        }
        return configuration
    }

    /// A configuration that trusts exactly `certificates` (a chain the session's delegate
    /// accepted, whose last certificate anchors it) and not the system's roots. The host name
    /// is not checked: the delegate vouched for this server.
    package func pinnedConfiguration(trusting certificates: [NIOSSLCertificate]) -> TLSConfiguration {
        var configuration = self.clientConfiguration()
        configuration.trustRoots = .certificates(certificates)
        configuration.additionalTrustRoots = []
        configuration.certificateVerification = .noHostnameVerification
        return configuration
    }
}
