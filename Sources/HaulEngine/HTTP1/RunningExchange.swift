import AsyncHTTPClient
import NIOCore

/// An exchange under way, on whichever path carries it: AsyncHTTPClient's task, or a direct
/// HTTP/1.1 exchange (``HTTP1ConnectionPool``) whose end is mapped to the same response.
enum RunningExchange<Response: Sendable>: Sendable {
    case client(HTTPClient.Task<Response>)
    case direct(HTTP1Exchange, ended: EventLoopFuture<Response>)

    /// Succeeds with the delegate's response once the exchange ended; fails with why not.
    var futureResult: EventLoopFuture<Response> {
        switch self {
        case .client(let task): task.futureResult
        case .direct(_, let ended): ended
        }
    }

    /// Ends the exchange now (it fails with `HTTPClientError.cancelled`). Any thread.
    func cancel() {
        switch self {
        case .client(let task): task.cancel()
        case .direct(let exchange, _): exchange.cancel()
        }
    }
}
