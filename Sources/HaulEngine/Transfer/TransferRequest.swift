import Foundation
import HaulCore
import Synchronization

/// A request as the engine sends it: Foundation-free of `URLRequest`'s quirks, `Sendable`.
package struct TransferRequest: Sendable, Hashable {
    /// The body to send.
    package enum Body: Sendable, Hashable {
        case none
        case data(Data)
        /// The contents of the file at the path, streamed (uploads from files).
        case file(String)
        /// A stream asked for each time the body is sent (a streamed upload: again after a
        /// 307/308 redirect or an authentication challenge).
        case stream(BodyStreamSource)

        /// Whether there is no body to send.
        package var isNone: Bool {
            if case .none = self { return true }
            return false
        }
    }

    package var url: URL {
        didSet { self.origin = URLOrigin(self.url) }
    }
    /// `url`'s scheme, host and port, read once (see ``URLOrigin``).
    package private(set) var origin: URLOrigin
    package var method: String
    package var headers: HTTPHeaderFields
    package var body: Body
    /// How the session's response cache may answer (data transfers only).
    package var cachePolicy: CachePolicy

    package init(
        url: URL,
        method: String = "GET",
        headers: HTTPHeaderFields = HTTPHeaderFields(),
        body: Body = .none,
        cachePolicy: CachePolicy = .useProtocolCachePolicy
    ) {
        self.url = url
        self.origin = URLOrigin(url)
        self.method = method.uppercased()
        self.headers = headers
        self.body = body
        self.cachePolicy = cachePolicy
    }
}

/// A response head as the engine saw it.
package struct ResponseInfo: Sendable, Hashable {
    /// The URL that answered (after redirects).
    package var url: URL
    package var statusCode: Int
    package var headers: HTTPHeaderFields
    /// `HTTP/1.1`, `HTTP/2.0`, …
    package var httpVersion: String
    /// A `file:` or `data:` answer made locally (`statusCode` 200, `Content-Type` and
    /// `Content-Length` headers): clients show it as a plain `URLResponse`, not an HTTP one.
    package var isLocal: Bool

    package init(url: URL, statusCode: Int, headers: HTTPHeaderFields, httpVersion: String, isLocal: Bool = false) {
        self.url = url
        self.statusCode = statusCode
        self.headers = headers
        self.httpVersion = httpVersion
        self.isLocal = isLocal
    }
}

/// How a transfer run ended.
package enum TransferOutcome: Sendable {
    /// The final response arrived complete. For downloads the partial file now holds the whole
    /// entity (`bytesOnDisk` bytes); for data transfers the body went to the observer.
    case completed(response: ResponseInfo, bytesOnDisk: Int64)
    /// The transfer failed. `resumePoint` is set when a later attempt can continue from the
    /// bytes on disk; `response` is the last final response seen, if any.
    case failed(TransferFailure, response: ResponseInfo?, resumePoint: ResumePoint?)
    /// The transfer stopped because ``TransferRun/stop(_:)`` asked it to.
    case stopped(TransferRun.StopReason, response: ResponseInfo?, resumePoint: ResumePoint?)
}

/// Where a streamed upload's body comes from: asked once per sending of the request.
package final class BodyStreamSource: Sendable, Hashable {
    /// An input stream handed across threads once, then read by one body writer only.
    package struct Stream: @unchecked Sendable {
        package let inputStream: InputStream
        package init(_ inputStream: InputStream) { self.inputStream = inputStream }
    }

    /// `attempt` counts from 0 (the first sending). `nil`: no body to send (the request fails
    /// with `requestBodyStreamExhausted`).
    package typealias Provider = @Sendable (_ attempt: Int) async -> Stream?

    /// The body length when the request declares one (`Content-Length`), else chunked.
    package let contentLength: Int64?
    private let provider: Provider
    private let attempts = Mutex(0)

    package init(contentLength: Int64?, provider: @escaping Provider) {
        self.contentLength = contentLength
        self.provider = provider
    }

    /// The stream for the next sending.
    package func nextStream() async -> Stream? {
        let attempt = self.attempts.withLock { attempts in
            defer { attempts += 1 }
            return attempts
        }
        return await self.provider(attempt)
    }

    package static func == (lhs: BodyStreamSource, rhs: BodyStreamSource) -> Bool { lhs === rhs }
    package func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}
