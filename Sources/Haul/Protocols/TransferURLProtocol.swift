import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HaulCore
import HaulEngine
import Synchronization

/// A custom protocol handler, as `URLProtocol`: register subclasses in a configuration's
/// ``TransferSessionConfiguration/protocolClasses`` and they answer (or rewrite) the requests
/// they claim — the way apps stub the network in their own tests.
///
/// ```swift
/// final class StubProtocol: TransferURLProtocol, @unchecked Sendable {
///     override class func canInit(with request: URLRequest) -> Bool { request.url?.host == "api.test" }
///     override func startLoading() {
///         let response = HTTPURLResponse(url: request.url!, statusCode: 200, httpVersion: "HTTP/1.1",
///                                        headerFields: ["Content-Type": "application/json"])!
///         client?.urlProtocol(self, didReceive: response, cacheStoragePolicy: .notAllowed)
///         client?.urlProtocol(self, didLoad: Data(#"{"ok":true}"#.utf8))
///         client?.urlProtocolDidFinishLoading(self)
///     }
/// }
/// configuration.protocolClasses = [StubProtocol.self]
/// ```
///
/// `canInit(with:)` is asked for every request a task sends (redirected ones included), on no
/// particular thread. An instance is made per request; `startLoading()` is called once, and
/// `stopLoading()` once when the task is cancelled or suspended before the protocol finished.
open class TransferURLProtocol: @unchecked Sendable {
    // @unchecked: subclasses own their state; Haul calls start and stop once each.

    /// Whether this class answers `request`.
    open class func canInit(with request: URLRequest) -> Bool { false }

    /// The request as this protocol wants it seen (default: unchanged).
    open class func canonicalRequest(for request: URLRequest) -> URLRequest { request }

    public let request: URLRequest
    /// Where to report the response, data and end. Calls may come from any thread.
    public let client: (any TransferURLProtocolClient)?

    public required init(request: URLRequest, client: (any TransferURLProtocolClient)?) {
        self.request = request
        self.client = client
    }

    /// Start answering: report a response, then data, then finish (or fail).
    open func startLoading() {}

    /// Stop: the task no longer wants the answer.
    open func stopLoading() {}
}

/// What a ``TransferURLProtocol`` reports to, as `URLProtocolClient`.
public protocol TransferURLProtocolClient: AnyObject, Sendable {
    func urlProtocol(_ protocol: TransferURLProtocol, didReceive response: URLResponse, cacheStoragePolicy policy: URLCache.StoragePolicy)
    /// The protocol redirects to `request` (instead of a response): the task's delegate is
    /// asked (`willPerformHTTPRedirection`), then the request goes to the protocol class that
    /// claims it, or to the network. Report it before any response; nothing after it counts.
    func urlProtocol(_ protocol: TransferURLProtocol, wasRedirectedTo request: URLRequest, redirectResponse: URLResponse)
    func urlProtocol(_ protocol: TransferURLProtocol, didLoad data: Data)
    func urlProtocolDidFinishLoading(_ protocol: TransferURLProtocol)
    func urlProtocol(_ protocol: TransferURLProtocol, didFailWithError error: any Error)
}

/// Connects a session's protocol classes to its engine.
struct ProtocolClassInterceptor: TransferInterceptor {
    let classes: [TransferURLProtocol.Type]

    func loader(for request: TransferRequest) -> (any TransferLoader)? {
        let urlRequest = request.urlRequest
        guard let type = self.classes.first(where: { $0.canInit(with: urlRequest) }) else { return nil }
        return ProtocolLoader(type: type, request: type.canonicalRequest(for: urlRequest))
    }
}

private final class ProtocolLoader: TransferLoader, TransferURLProtocolClient, @unchecked Sendable {
    // @unchecked: `instance` is set once in start() before any client call can arrive.
    let type: TransferURLProtocol.Type
    let request: URLRequest
    private let sink = Mutex<TransferLoaderSink?>(nil)
    private let instance = Mutex<TransferURLProtocol?>(nil)

    init(type: TransferURLProtocol.Type, request: URLRequest) {
        self.type = type
        self.request = request
    }

    func start(_ sink: TransferLoaderSink) {
        self.sink.withLock { $0 = sink }
        let instance = self.type.init(request: self.request, client: self)
        self.instance.withLock { $0 = instance }
        instance.startLoading()
    }

    func stop() {
        let instance = self.instance.withLock { instance -> TransferURLProtocol? in
            defer { instance = nil }
            return instance
        }
        instance?.stopLoading()
    }

    func urlProtocol(_ protocol: TransferURLProtocol, didReceive response: URLResponse, cacheStoragePolicy policy: URLCache.StoragePolicy) {
        self.sink.withLock { $0 }?.send(.response(Self.responseInfo(response, request: self.request)))
    }

    func urlProtocol(_ protocol: TransferURLProtocol, wasRedirectedTo request: URLRequest, redirectResponse: URLResponse) {
        guard let url = request.url else {
            self.urlProtocol(`protocol`, didFailWithError: URLError(.badURL, userInfo: [NSLocalizedDescriptionKey: "a protocol redirected to a request without a URL"]))
            return
        }
        var headers = HTTPHeaderFields()
        for (name, value) in (request.allHTTPHeaderFields ?? [:]).sorted(by: { $0.key < $1.key }) { headers.add(name: name, value: value) }
        let next = TransferRequest(
            url: url,
            method: request.httpMethod ?? "GET",
            headers: headers,
            body: request.httpBody.map { .data($0) } ?? .none
        )
        self.sink.withLock { $0 }?.send(.redirect(Self.responseInfo(redirectResponse, request: self.request), next))
    }

    func urlProtocol(_ protocol: TransferURLProtocol, didLoad data: Data) {
        self.sink.withLock { $0 }?.send(.data(data))
    }

    func urlProtocolDidFinishLoading(_ protocol: TransferURLProtocol) {
        self.sink.withLock { $0 }?.send(.finished)
    }

    func urlProtocol(_ protocol: TransferURLProtocol, didFailWithError error: any Error) {
        let urlError = error as? URLError ?? URLError(.unknown, userInfo: [NSLocalizedDescriptionKey: "\(error)", NSUnderlyingErrorKey: error])
        self.sink.withLock { $0 }?.send(.failed(urlError))
    }

    static func responseInfo(_ response: URLResponse, request: URLRequest) -> ResponseInfo {
        let url = response.url ?? request.url ?? URL(string: "about:blank")!
        if let http = response as? HTTPURLResponse {
            var headers = HTTPHeaderFields()
            for (name, value) in http.allHeaderFields {
                if let name = name as? String { headers.add(name: name, value: "\(value)") }
            }
            return ResponseInfo(url: url, statusCode: http.statusCode, headers: headers, httpVersion: "HTTP/1.1")
        }
        var headers = HTTPHeaderFields()
        let type = response.mimeType ?? "application/octet-stream"
        headers.add(name: "Content-Type", value: response.textEncodingName.map { "\(type); charset=\($0)" } ?? type)
        if response.expectedContentLength >= 0 { headers.add(name: "Content-Length", value: "\(response.expectedContentLength)") }
        return ResponseInfo(url: url, statusCode: 200, headers: headers, httpVersion: "", isLocal: true)
    }
}
