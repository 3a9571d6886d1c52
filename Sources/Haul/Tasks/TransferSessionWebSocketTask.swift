import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HaulCore
import HaulEngine
import NIOCore
import NIOSSL
import Synchronization

/// A WebSocket connection, as `URLSessionWebSocketTask`: `resume()` connects and upgrades,
/// then messages go out with `send` and come in with `receive`, in order; `sendPing` gets
/// its pong; `cancel(with:reason:)` closes with a code. `wss:` follows the session's TLS trust
/// rules (extra roots, the delegate's server-trust challenge) and both go through the session's
/// proxy as http and https requests do (a CONNECT tunnel). Built on SwiftNIO's WebSocket
/// support (``WebSocketConnection``).
///
/// The delegate hears `didOpenWithProtocol` once when the upgrade succeeds, `didCloseWith`
/// once when the closing handshake is done (either side started it), then
/// `didCompleteWithError` (`nil` after a clean close; an error when the connection dropped or
/// never opened).
public final class TransferSessionWebSocketTask: TransferSessionTask, @unchecked Sendable {
    public typealias Message = URLSessionWebSocketTask.Message
    public typealias CloseCode = URLSessionWebSocketTask.CloseCode

    private struct SocketState {
        var connection: Task<WebSocketConnection, any Error>?
        var maximumMessageSize = 1 << 20
        var closeCode: CloseCode = .invalid
        var closeReason: Data?
        var completed = false
    }

    let protocols: [String]
    private let socket = Mutex(SocketState())
    /// Receives (inbound) and sends and pings (outbound), each in order, once open.
    private let lanes = ConnectionLanes<WebSocketConnection>()

    init(session: TransferSession, identifier: Int, request: URLRequest, protocols: [String]) {
        self.protocols = protocols
        super.init(session: session, identifier: identifier, kind: .data, request: request)
    }

    /// The largest message received (reassembled from its fragments) or sent, in bytes; a
    /// larger one closes the connection with `messageTooBig` (1009). Default 1 MiB, as on
    /// Apple's platforms. Set before `resume()`.
    public var maximumMessageSize: Int {
        get { self.socket.withLock { $0.maximumMessageSize } }
        set { self.socket.withLock { $0.maximumMessageSize = max(1, newValue) } }
    }

    /// The code of the closing handshake; `.invalid` while open.
    public var closeCode: CloseCode { self.socket.withLock { $0.closeCode } }

    /// The reason of the closing handshake, if it had one.
    public var closeReason: Data? { self.socket.withLock { $0.closeReason } }

    // MARK: - Messages

    /// Sends `message` after those sent before it; `completionHandler` runs once, on the
    /// delegate queue, when it is handed to the network (or failed).
    public func send(_ message: Message, completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
        let session = self.session
        self.enqueue(sends: true) { connection in
            do {
                try await connection.send(Self.engineMessage(message))
                session.enqueueDelegateCall { _ in completionHandler(nil) }
            } catch {
                session.enqueueDelegateCall { _ in completionHandler(error) }
            }
        } failed: { error in
            session.enqueueDelegateCall { _ in completionHandler(error) }
        }
    }

    public func send(_ message: Message) async throws {
        let error: UncheckedSendable<(any Error)?> = await withCheckedContinuation { continuation in
            self.send(message) { continuation.resume(returning: UncheckedSendable($0)) }
        }
        if let error = error.value { throw error }
    }

    /// Receives the next message (receives are served in the order they were asked for);
    /// `completionHandler` runs once, on the delegate queue.
    public func receive(completionHandler: @escaping @Sendable (Result<Message, any Error>) -> Void) {
        let session = self.session
        self.enqueue(sends: false) { connection in
            do {
                let message = try await connection.receive()
                let result: Message
                switch message {
                case .text(let text): result = .string(text)
                case .data(let data): result = .data(data)
                }
                let boxed = UncheckedSendable(result)
                session.enqueueDelegateCall { _ in completionHandler(.success(boxed.value)) }
            } catch {
                session.enqueueDelegateCall { _ in completionHandler(.failure(error)) }
            }
        } failed: { error in
            session.enqueueDelegateCall { _ in completionHandler(.failure(error)) }
        }
    }

    public func receive() async throws -> Message {
        let result: UncheckedSendable<Result<Message, any Error>> = await withCheckedContinuation { continuation in
            self.receive { continuation.resume(returning: UncheckedSendable($0)) }
        }
        return try result.value.get()
    }

    /// Sends a ping; `pongReceiveHandler` runs once, on the delegate queue, when its pong
    /// arrives (`nil`) or the connection fails (the error).
    public func sendPing(pongReceiveHandler: @escaping @Sendable ((any Error)?) -> Void) {
        let session = self.session
        self.enqueue(sends: true) { connection in
            // The ping goes out in order with the sends; its pong is awaited off the chain.
            connection.ping { error in
                session.enqueueDelegateCall { _ in pongReceiveHandler(error) }
            }
        } failed: { error in
            session.enqueueDelegateCall { _ in pongReceiveHandler(error) }
        }
    }

    /// Closes with `closeCode` and `reason` (at most 123 bytes are sent): the closing
    /// handshake, then the task completes.
    public func cancel(with closeCode: CloseCode, reason: Data?) {
        let code = UInt16(clamping: closeCode.rawValue)
        self.socket.withLock { state in
            if state.closeCode == .invalid {
                state.closeCode = closeCode
                state.closeReason = reason
            }
        }
        let connection = self.socket.withLock { $0.connection }
        guard let connection else {
            self.cancel()
            return
        }
        Task {
            guard let open = try? await connection.value else {
                self.cancel()
                return
            }
            open.close(code: code, reason: reason)
        }
    }

    // MARK: - Lifecycle

    override func perform(_ action: TaskLifecycleStateMachine.Action) {
        switch action {
        case .startTransfer:
            self.connect()
        case .cancelTransfer, .completeAsCancelled:
            if let connection = self.socket.withLock({ $0.connection }) {
                Task { (try? await connection.value)?.close(code: 1001, reason: nil, timeout: .seconds(1)) }
            }
            self.complete(error: self.cancelledError())
        case .pauseTransfer, .none, .deliverResult:
            break
        }
    }

    /// WebSocket tasks do not pause: the connection stays as it is.
    public override func suspend() {}

    private func connect() {
        if let creationError = self.inner.withLock({ $0.creationError }) {
            self.complete(error: creationError)
            return
        }
        guard let request = self.originalRequest, let url = request.url else {
            self.complete(error: URLError(.badURL))
            return
        }
        let session = self.session
        let engine = session.engine
        let snapshot = session.configurationSnapshot
        var headers = HTTPHeaderFields()
        for (name, value) in snapshot.httpAdditionalHeaders ?? [:] where request.value(forHTTPHeaderField: name) == nil {
            headers.add(name: name, value: value)
        }
        for (name, value) in request.allHTTPHeaderFields ?? [:] { headers.add(name: name, value: value) }
        let protocols = self.protocols
        let maximumMessageSize = self.maximumMessageSize
        let connectTimeout = TimeAmount.milliseconds(Int64(min(request.timeoutInterval > 0 ? request.timeoutInterval : snapshot.timeoutIntervalForRequest, snapshot.timeoutIntervalForRequest, 60) * 1000))
        let tls = engine.configuration.tls.clientConfiguration()
        let verify = url.host.flatMap { engine.trustGate?.verificationCallback(host: $0, port: url.port ?? 443) }
        let checkedVerify = UncheckedSendable(verify)
        // The proxy of the equivalent http(s) URL, as for HTTP requests (CONNECT tunnel).
        var equivalent = URLComponents(url: url, resolvingAgainstBaseURL: false)
        equivalent?.scheme = url.scheme?.lowercased() == "wss" ? "https" : "http"
        let proxy = equivalent?.url.flatMap { engine.configuration.proxies.proxy(for: $0) }
        self.inner.withLock { if $0.taskStart == nil { $0.taskStart = Date() } }
        let opening = Task<WebSocketConnection.Opened, any Error> {
            try await WebSocketConnection.connect(
                url: url,
                headers: headers,
                protocols: protocols,
                maximumMessageSize: maximumMessageSize,
                tls: tls,
                verify: checkedVerify.value,
                proxy: proxy,
                connectTimeout: connectTimeout,
                eventLoop: engine.eventLoop
            )
        }
        let connection = Task<WebSocketConnection, any Error> { try await opening.value.connection }
        self.socket.withLock { $0.connection = connection }
        Task {
            do {
                let opened = try await opening.value
                self.inner.withLock { $0.response = HTTPURLResponse(url: url, statusCode: opened.response.statusCode, httpVersion: "HTTP/1.1", headerFields: Dictionary(opened.response.headers.fields.map { ($0.name, $0.value) }) { a, b in "\(a), \(b)" }) }
                session.enqueueDelegateCall { delegate in
                    (delegate as? any TransferSessionWebSocketDelegate)?.urlSession(session, webSocketTask: self, didOpenWithProtocol: opened.selectedProtocol)
                }
                self.lanes.ready.settle(.success(opened.connection))
                await opened.connection.closed()
                await self.connectionClosed(opened.connection)
            } catch {
                self.complete(error: error)
            }
        }
    }

    /// The connection is gone: after a closing handshake the delegate hears `didCloseWith` and
    /// the task completes cleanly; a dropped connection completes it with an error.
    private func connectionClosed(_ connection: WebSocketConnection) async {
        let status = await connection.closeStatus
        let code = status.map { CloseCode(rawValue: Int($0.code)) ?? .invalid } ?? .abnormalClosure
        let (closeCode, reason) = self.socket.withLock { state -> (CloseCode, Data?) in
            if state.closeCode == .invalid {
                state.closeCode = code
                state.closeReason = status?.reason
            }
            return (state.closeCode, state.closeReason)
        }
        let clean = closeCode != .abnormalClosure && closeCode != .invalid && closeCode != .messageTooBig
        let session = self.session
        if closeCode != .abnormalClosure {
            session.enqueueDelegateCall { delegate in
                (delegate as? any TransferSessionWebSocketDelegate)?.urlSession(session, webSocketTask: self, didCloseWith: closeCode, reason: reason)
            }
        }
        self.complete(error: clean ? nil : URLError(closeCode == .messageTooBig ? .dataLengthExceedsMaximum : .networkConnectionLost, userInfo: [
            NSLocalizedDescriptionKey: closeCode == .messageTooBig ? "a message was larger than maximumMessageSize" : "the WebSocket connection was lost",
        ]))
    }

    private func enqueue(
        sends: Bool,
        _ body: @escaping @Sendable (WebSocketConnection) async -> Void,
        failed: @escaping @Sendable (any Error) -> Void
    ) {
        self.lanes.enqueue(sends ? .outbound : .inbound, body) { failed(self.error ?? $0) }
    }

    private func complete(error: (any Error)?) {
        let first = self.socket.withLock { state -> Bool in
            defer { state.completed = true }
            return !state.completed
        }
        guard first else { return }
        self.lanes.ready.settle(.failure(error ?? URLError(.networkConnectionLost, userInfo: [NSLocalizedDescriptionKey: "the WebSocket is closed"])))
        _ = self.inner.withLock { $0.lifecycle.transferFinished() }
        self.finish(error: error)
    }

    private static func engineMessage(_ message: Message) -> WebSocketConnection.Message {
        switch message {
        case .string(let text): .text(text)
        case .data(let data): .data(data)
        @unknown default: .data(Data())
        }
    }
}

/// The delegate of WebSocket tasks: `didOpenWithProtocol` once the upgrade succeeded,
/// `didCloseWith` once the closing handshake is done.
public protocol TransferSessionWebSocketDelegate: TransferSessionTaskDelegate {
    func urlSession(_ session: TransferSession, webSocketTask: TransferSessionWebSocketTask, didOpenWithProtocol protocol: String?)
    func urlSession(
        _ session: TransferSession,
        webSocketTask: TransferSessionWebSocketTask,
        didCloseWith closeCode: TransferSessionWebSocketTask.CloseCode,
        reason: Data?
    )
}

extension TransferSessionWebSocketDelegate {
    public func urlSession(_ session: TransferSession, webSocketTask: TransferSessionWebSocketTask, didOpenWithProtocol protocol: String?) {}
    public func urlSession(
        _ session: TransferSession,
        webSocketTask: TransferSessionWebSocketTask,
        didCloseWith closeCode: TransferSessionWebSocketTask.CloseCode,
        reason: Data?
    ) {}
}

extension TransferSession {
    /// A WebSocket task for `url` (`ws:` or `wss:`).
    public func webSocketTask(with url: URL) -> TransferSessionWebSocketTask {
        self.webSocketTask(with: URLRequest(url: url))
    }

    /// A WebSocket task offering `protocols` (`Sec-WebSocket-Protocol`).
    public func webSocketTask(with url: URL, protocols: [String]) -> TransferSessionWebSocketTask {
        self.makeWebSocketTask(URLRequest(url: url), protocols: protocols)
    }

    /// A WebSocket task for `request` (its headers go with the upgrade request).
    public func webSocketTask(with request: URLRequest) -> TransferSessionWebSocketTask {
        self.makeWebSocketTask(request, protocols: [])
    }

    private func makeWebSocketTask(_ request: URLRequest, protocols: [String]) -> TransferSessionWebSocketTask {
        let task = self.register { identifier in
            TransferSessionWebSocketTask(session: self, identifier: identifier, request: request, protocols: protocols)
        }
        if self.isBackground { task.inner.withLock { $0.creationError = self.unsupportedInBackground("WebSocket tasks") } }
        let scheme = request.url?.scheme?.lowercased()
        if !((scheme == "ws" || scheme == "wss") && request.url?.host?.isEmpty == false) {
            let error = URLError(.badURL, userInfo: [NSLocalizedDescriptionKey: "a WebSocket task needs a ws:// or wss:// URL with a host, got '\(request.url?.absoluteString ?? "")'"])
            task.inner.withLock { $0.creationError = error }
        }
        return task
    }
}
