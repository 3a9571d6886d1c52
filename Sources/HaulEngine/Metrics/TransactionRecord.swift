import Foundation
import HaulCore

/// What one request/response exchange of a run measured: the engine's form of a transaction's
/// metrics. Dates are wall-clock; a `nil` date is a phase that did not happen (a reused
/// connection has no connect phase) or that the HTTP stack does not report.
package struct TransactionRecord: Sendable {
    /// Where the answer came from.
    package enum FetchType: Sendable {
        case networkLoad
        case localCache
        /// A custom protocol handler or a `file:` / `data:` URL answered.
        case local
    }

    package var request: TransferRequest
    package var response: ResponseInfo?
    package var fetchType: FetchType = .networkLoad
    package var fetchStart: Date
    /// The pool started opening the connection this request then used (DNS, TCP and TLS
    /// included: AsyncHTTPClient reports them as one phase).
    package var connectStart: Date?
    package var connectEnd: Date?
    package var isReusedConnection = false
    package var isProxyConnection = false
    package var requestStart: Date?
    package var requestEnd: Date?
    package var responseStart: Date?
    package var responseEnd: Date?
    /// Bytes of the request head as sent (request line, fields, the empty line).
    package var requestHeaderBytes: Int64 = 0
    package var requestBodyBytes: Int64 = 0
    /// Bytes of the response head as received (status line, fields, the empty line).
    package var responseHeaderBytes: Int64 = 0
    /// Body bytes as delivered (after content decoding, for data transfers that decode).
    package var responseBodyBytes: Int64 = 0
    /// `http/1.1`, `h2`.
    package var networkProtocolName: String?

    package init(request: TransferRequest, fetchStart: Date) {
        self.request = request
        self.fetchStart = fetchStart
    }
}
