import AsyncHTTPClient
import Foundation
import HaulCore
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

extension TransferRun {
    /// Maps whatever the HTTP stack threw to the `URLError` URLSession would report.
    static func urlError(for error: any Error, url: URL) -> URLError {
        if let urlError = error as? URLError { return urlError }
        func make(_ code: URLError.Code, _ message: String) -> URLError {
            URLError(code, userInfo: [NSLocalizedDescriptionKey: message, NSURLErrorFailingURLErrorKey: url])
        }
        if let refusal = error as? RedirectPolicy.Refusal {
            switch refusal {
            case .tooManyRedirects(let limit):
                return make(.httpTooManyRedirects, "more than \(limit) redirects")
            case .loop(let target):
                return make(.httpTooManyRedirects, "redirect loop back to \(target.absoluteString)")
            case .missingLocation:
                return make(.redirectToNonExistentLocation, "redirect without a Location")
            case .invalidLocation(let location):
                return make(.redirectToNonExistentLocation, "redirect to an invalid location \(location)")
            case .unsupportedScheme(let scheme):
                return make(.unsupportedURL, "redirect to an unsupported scheme \(scheme)")
            }
        }
        if let clientError = error as? HTTPClientError {
            switch clientError {
            case .readTimeout: return make(.timedOut, "no data received within the idle timeout")
            case .connectTimeout: return make(.timedOut, "connecting to \(url.host ?? "the server") timed out")
            case .deadlineExceeded: return make(.timedOut, "the request deadline passed")
            case .remoteConnectionClosed: return make(.networkConnectionLost, "the server closed the connection")
            case .cancelled: return make(.cancelled, "cancelled")
            case .invalidURL, .emptyHost, .emptyScheme: return make(.badURL, "invalid URL \(url.absoluteString)")
            case _ where String(describing: clientError).contains("unsupportedScheme"): return make(.unsupportedURL, "unsupported URL \(url.absoluteString)")
            case .bodyLengthMismatch: return make(.networkConnectionLost, "the body length did not match")
            case .proxyAuthenticationRequired:
                return make(.userAuthenticationRequired, "the proxy asks for credentials (give them as http://user:password@proxy:port)")
            default: return make(.badServerResponse, "\(clientError)")
            }
        }
        if error is NIOSSLError || error is BoringSSLError || error is NIOSSLExtraError {
            let description = String(describing: error)
            if description.contains("CERTIFICATE_VERIFY_FAILED") {
                return make(.serverCertificateUntrusted, "the server's certificate is not trusted (\(description))")
            }
            if description.contains("CERTIFICATE_REQUIRED") {
                return make(.clientCertificateRequired, "the server requires a client certificate (\(description))")
            }
            return make(.secureConnectionFailed, "the TLS handshake with \(url.host ?? "the server") failed (\(description))")
        }
        if error is HTTPParserError {
            return make(.networkConnectionLost, "the connection ended in the middle of a response (\(error))")
        }
        if let ioError = error as? IOError {
            switch ioError.errnoCode {
            case ECONNRESET, EPIPE: return make(.networkConnectionLost, "the connection was reset by the server")
            case ECONNREFUSED: return make(.cannotConnectToHost, "connection refused by \(url.host ?? "the server")")
            case ETIMEDOUT: return make(.timedOut, "the connection timed out")
            case ENETUNREACH, EHOSTUNREACH: return make(.cannotConnectToHost, "the host is unreachable")
            default: return make(.networkConnectionLost, "\(ioError)")
            }
        }
        if let connectionError = error as? NIOConnectionError {
            if connectionError.dnsAError != nil || connectionError.dnsAAAAError != nil,
                connectionError.connectionErrors.isEmpty
            {
                return make(.cannotFindHost, "cannot resolve \(url.host ?? "the host")")
            }
            return make(.cannotConnectToHost, "cannot connect to \(url.host ?? "the server"): \(connectionError)")
        }
        if error is SocketAddressError {
            return make(.cannotFindHost, "cannot resolve \(url.host ?? "the host")")
        }
        if error is CancellationError { return make(.cancelled, "cancelled") }
        if let channelError = error as? ChannelError {
            switch channelError {
            case .connectTimeout: return make(.timedOut, "connecting timed out")
            case .eof, .ioOnClosedChannel, .alreadyClosed, .outputClosed, .inputClosed:
                return make(.networkConnectionLost, "the connection was closed")
            default: return make(.networkConnectionLost, "\(channelError)")
            }
        }
        let description = String(describing: error)
        if description.contains("connectionRefused") || description.contains("ECONNREFUSED") {
            return make(.cannotConnectToHost, "connection refused by \(url.host ?? "the server")")
        }
        return make(.unknown, description)
    }
}

/// Why a transfer failed: the error URLSession would report, and the server's status as a typed
/// value when the failure is the server's answer (a resume request answered 503, say).
package struct TransferFailure: Error, Sendable {
    package var error: URLError
    /// The unsuccessful status the server answered with, when that is the failure.
    package var serverStatus: Int?

    package init(_ error: URLError, serverStatus: Int? = nil) {
        self.error = error
        self.serverStatus = serverStatus
    }

    /// How it counts for retrying.
    package var kind: TransferFailureKind { TransferFailureKind(self.error, status: self.serverStatus) }
}

extension TransferFailureKind {
    /// How a transfer's `URLError` counts for retrying: `status` (a server answer) first, then
    /// the error's code. The one classification `haul get`, hauld and the queue share.
    package init(_ error: URLError, status: Int?) {
        if let status {
            self = .serverStatus(status)
            return
        }
        switch error.code {
        case .networkConnectionLost, .notConnectedToInternet: self = .connectionLost
        case .timedOut: self = .timedOut
        case .cannotConnectToHost, .cannotFindHost, .dnsLookupFailed: self = .cannotConnect
        default: self = .permanent
        }
    }
}
