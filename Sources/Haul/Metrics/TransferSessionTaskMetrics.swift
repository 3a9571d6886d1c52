import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HaulEngine
import Synchronization

/// What a task measured from start to completion, as `URLSessionTaskMetrics`: delivered once
/// per task by `urlSession(_:task:didFinishCollecting:)`, before `didCompleteWithError`.
public final class TransferSessionTaskMetrics: @unchecked Sendable, CustomStringConvertible {
    // @unchecked: immutable after creation (the transactions are made once, under a lock);
    // holds Foundation requests and responses.

    /// Where a transaction's response came from, as `URLSessionTaskMetrics.ResourceFetchType`.
    public enum ResourceFetchType: Sendable, Hashable {
        case unknown
        /// From the server.
        case networkLoad
        /// From the session's ``TransferURLCache`` without asking the server.
        case localCache
    }

    /// One per request sent (each redirect, each authentication retry, each resume) and per
    /// answer from the cache or from a local (`file:`, `data:`, custom protocol) loader, in order.
    /// Made on first access (each holds Foundation request and response objects, which cost
    /// more than the download of a small file; most delegates never look).
    public var transactionMetrics: [TransferSessionTaskTransactionMetrics] {
        self.transactions.withLock { state in
            switch state {
            case .made(let metrics):
                return metrics
            case .records(let records):
                let metrics = records.map(TransferSessionTaskTransactionMetrics.init)
                state = .made(metrics)
                return metrics
            }
        }
    }
    /// From the task's first start to its completion.
    public let taskInterval: DateInterval
    /// Redirects followed.
    public let redirectCount: Int

    private enum Transactions {
        case records([TransactionRecord])
        case made([TransferSessionTaskTransactionMetrics])
    }
    private let transactions: Mutex<Transactions>

    init(transactions: [TransactionRecord], start: Date, end: Date) {
        self.transactions = Mutex(.records(transactions))
        self.taskInterval = DateInterval(start: start, end: max(start, end))
        self.redirectCount = transactions.filter { record in
            guard let status = record.response?.statusCode else { return false }
            return [301, 302, 303, 307, 308].contains(status) && record.response?.headers["Location"] != nil
        }.count
    }

    public var description: String {
        "(Task Interval) \(self.taskInterval.duration.formatted(.number.precision(.fractionLength(3)))) s, "
            + "(Redirect Count) \(self.redirectCount), (Transactions) \(self.transactionMetrics.count)"
    }
}

/// What one request/response exchange measured, as `URLSessionTaskTransactionMetrics`.
///
/// Phases AsyncHTTPClient does not report separately are `nil`: DNS lookup and the TLS
/// handshake are inside ``connectStartDate``…``connectEndDate`` (`domainLookup…` and
/// `secureConnection…` dates stay `nil`), and addresses are not known.
public final class TransferSessionTaskTransactionMetrics: @unchecked Sendable {
    // @unchecked: immutable after creation (the transactions are made once, under a lock);
    // holds Foundation requests and responses.

    /// The request as sent (with the headers Haul added: cookies, conditional, range).
    public let request: URLRequest
    /// The response, if a head arrived.
    public let response: URLResponse?
    public let resourceFetchType: TransferSessionTaskMetrics.ResourceFetchType
    /// When the task began this exchange (before waiting for a connection).
    public let fetchStartDate: Date?
    /// Not reported separately (inside the connect phase).
    public let domainLookupStartDate: Date? = nil
    public let domainLookupEndDate: Date? = nil
    /// The connection was being opened (DNS, TCP and TLS): `nil` for a reused connection.
    public let connectStartDate: Date?
    public let connectEndDate: Date?
    /// Not reported separately (inside the connect phase).
    public let secureConnectionStartDate: Date? = nil
    public let secureConnectionEndDate: Date? = nil
    /// The request was put on the connection / its last byte was written.
    public let requestStartDate: Date?
    public let requestEndDate: Date?
    /// The response head arrived / its last byte arrived.
    public let responseStartDate: Date?
    public let responseEndDate: Date?
    /// `http/1.1` or `h2`; `nil` without a network load.
    public let networkProtocolName: String?
    public let isProxyConnection: Bool
    public let isReusedConnection: Bool
    public let countOfRequestHeaderBytesSent: Int64
    public let countOfRequestBodyBytesSent: Int64
    public let countOfResponseHeaderBytesReceived: Int64
    /// Body bytes received; for data tasks that decode gzip or deflate, the decoded count
    /// (AsyncHTTPClient decodes before Haul sees the bytes).
    public let countOfResponseBodyBytesReceived: Int64
    public let countOfResponseBodyBytesAfterDecoding: Int64

    init(_ record: TransactionRecord) {
        self.request = record.request.urlRequest
        self.response = record.response?.urlResponse
        switch record.fetchType {
        case .networkLoad: self.resourceFetchType = .networkLoad
        case .localCache: self.resourceFetchType = .localCache
        case .local: self.resourceFetchType = .unknown
        }
        self.fetchStartDate = record.fetchStart
        self.connectStartDate = record.connectStart
        self.connectEndDate = record.connectEnd
        self.requestStartDate = record.requestStart
        self.requestEndDate = record.requestEnd
        self.responseStartDate = record.responseStart
        self.responseEndDate = record.responseEnd
        self.networkProtocolName = record.fetchType == .networkLoad ? record.networkProtocolName : nil
        self.isProxyConnection = record.isProxyConnection
        self.isReusedConnection = record.isReusedConnection
        self.countOfRequestHeaderBytesSent = record.requestHeaderBytes
        self.countOfRequestBodyBytesSent = record.requestBodyBytes
        self.countOfResponseHeaderBytesReceived = record.responseHeaderBytes
        self.countOfResponseBodyBytesReceived = record.fetchType == .networkLoad ? record.responseBodyBytes : 0
        self.countOfResponseBodyBytesAfterDecoding = record.responseBodyBytes
    }
}
