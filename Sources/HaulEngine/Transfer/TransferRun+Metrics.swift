import Foundation
import HaulCore

extension TransferRun {
    /// Keeps an exchange's record, completed with its connection's phase: a connection the
    /// pool opened after this exchange began was opened for it; any other was reused.
    func recordTransaction(_ record: TransactionRecord, probe: ExchangeLogProbe, connectionLog: ConnectionEventLog, isProxied: Bool) {
        var record = record
        record.isProxyConnection = isProxied
        if let scheduled = probe.scheduled { record.requestStart = scheduled }
        if let id = probe.connection, let times = connectionLog.times(ofConnection: id), times.opened >= record.fetchStart {
            record.connectStart = times.opened
            record.connectEnd = times.established
            record.isReusedConnection = false
        } else if probe.connection == nil, record.networkProtocolName == "h2" {
            // AsyncHTTPClient names no connection for an HTTP/2 stream: a connection opened
            // while this exchange waited for its answer was opened for it; otherwise the stream
            // went on a connection that was already open.
            if let times = connectionLog.connectionOpened(from: record.fetchStart, to: record.responseStart ?? Date()) {
                record.connectStart = times.opened
                record.connectEnd = times.established
                record.isReusedConnection = false
            } else {
                record.isReusedConnection = true
            }
        } else {
            record.isReusedConnection = probe.connection != nil
        }
        self.state.withLock { $0.transactions.append(record) }
    }

    /// Keeps the record of an answer that needed no network (the cache, a local URL, a custom
    /// protocol handler).
    func recordLocalTransaction(_ request: TransferRequest, response: ResponseInfo?, bodyBytes: Int64, fetchType: TransactionRecord.FetchType, start: Date) {
        var record = TransactionRecord(request: request, fetchStart: start)
        record.fetchType = fetchType
        record.response = response
        record.responseStart = response == nil ? nil : Date()
        record.responseEnd = record.responseStart
        record.responseBodyBytes = bodyBytes
        self.state.withLock { $0.transactions.append(record) }
    }

    func recordLocalOutcome(_ outcome: TransferOutcome, request: TransferRequest, start: Date) {
        guard case .completed(let response, let bytes) = outcome else { return }
        let length = bytes > 0 ? bytes : Int64(response.headers["Content-Length"] ?? "") ?? 0
        self.recordLocalTransaction(request, response: response, bodyBytes: length, fetchType: .local, start: start)
    }
}
