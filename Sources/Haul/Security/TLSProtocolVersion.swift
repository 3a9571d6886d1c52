import NIOSSL

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
