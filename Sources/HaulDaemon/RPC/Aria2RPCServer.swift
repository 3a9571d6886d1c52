import Foundation
import HaulCore
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOCore
import Synchronization

/// aria2's RPC on its own port, so that AriaNg, aria2p, Motrix and "send to aria2" browser
/// extensions drive hauld unchanged:
///
/// - `POST /jsonrpc`: one JSON-RPC 2.0 request or a batch (an array);
/// - `GET /jsonrpc?method=M&id=I&params=BASE64` (optionally `&jsoncallback=F` for JSONP), as
///   AriaNg and older front-ends send;
/// - a WebSocket on `/jsonrpc` carrying requests and responses, and aria2's notifications
///   (`aria2.onDownloadStart` …) to every connected socket;
/// - `OPTIONS /jsonrpc`: the CORS preflight of browser front-ends (every answer allows any
///   origin, as aria2's do: the secret is what guards the queue).
///
/// Bodies and messages over 2 MiB are refused. Binds 127.0.0.1 unless told to listen on all
/// addresses. The secret is never logged (requests are not logged at all: a GET carries it in
/// its query).
public final class Aria2RPCServer: Sendable {
    public struct Configuration: Sendable, CustomStringConvertible {
        public var port: Int
        public var listenAll: Bool
        /// `nil` or empty: no token is required (only sensible on a trusted machine).
        public var secret: String?

        public init(port: Int = 6800, listenAll: Bool = false, secret: String?) {
            self.port = port
            self.listenAll = listenAll
            self.secret = secret
        }

        /// Never shows the secret (service descriptions end up in logs).
        public var description: String {
            "RPC(port: \(self.port), listenAll: \(self.listenAll), secret: \(self.secret == nil ? "generated" : self.secret!.isEmpty ? "none" : "set"))"
        }
    }

    let configuration: Configuration
    let methods: Aria2Methods
    let notifier: Aria2Notifier
    let logger: Logger
    private let boundPort: BoundPort
    /// Where it answers: not on the loop that carries the transfers (``TransferCore/serviceLoop``).
    private let serviceLoop: any EventLoop

    /// The listening port, shared with ``Aria2Methods`` (`getGlobalOption`).
    final class BoundPort: Sendable {
        let value = Mutex<Int?>(nil)
    }

    public init(queue: DownloadQueue, configuration: Configuration, shutdown: @escaping @Sendable () -> Void, logger: Logger) {
        let boundPort = BoundPort()
        let port: @Sendable () -> Int? = { boundPort.value.withLock { $0 } }
        self.boundPort = boundPort
        self.configuration = configuration
        self.logger = logger
        self.methods = Aria2Methods(queue: queue, secret: configuration.secret, port: port, shutdown: shutdown, logger: logger)
        self.notifier = Aria2Notifier(queue: queue)
        self.serviceLoop = queue.core.serviceLoop
    }

    /// The port once listening.
    public var port: Int? { self.boundPort.value.withLock { $0 } }

    /// `http://127.0.0.1:PORT/jsonrpc` once listening.
    public var endpoint: String? { self.port.map { "http://127.0.0.1:\($0)/jsonrpc" } }

    public var secret: String? { self.configuration.secret }

    /// Serves until graceful shutdown.
    public func run() async throws {
        // The notifier subscribes to the queue while a WebSocket listens (``Aria2Notifier``).
        defer { self.notifier.stop() }
        let router = Router()
        self.addRoutes(to: router)
        let methods = self.methods
        let notifier = self.notifier
        // Requests are not logged: a GET request's query carries the secret.
        var quiet = self.logger
        quiet.logLevel = max(quiet.logLevel, .notice)
        let app = Application(
            router: router,
            server: .http1WebSocketUpgrade(
                configuration: .init(
                    http1: .init(additionalChannelHandlers: [Aria2HTTPHandler(methods: methods)]),
                    ws: .init(maxFrameSize: Aria2Envelope.maximumRequestSize)
                )
            ) { request, _, _ in
                guard request.path?.split(separator: "?").first == "/jsonrpc" else { return .dontUpgrade }
                return .upgrade([:]) { inbound, outbound, _ in
                    try await Self.serveWebSocket(inbound: inbound, outbound: outbound, methods: methods, notifier: notifier)
                }
            },
            configuration: .init(
                address: .hostname(self.configuration.listenAll ? "0.0.0.0" : "127.0.0.1", port: self.configuration.port),
                serverName: "hauld"
            ),
            onServerRunning: { [weak self] channel in
                guard let self else { return }
                self.boundPort.value.withLock { $0 = channel.localAddress?.port }
                let host = self.configuration.listenAll ? "0.0.0.0" : "127.0.0.1"
                self.logger.info("aria2 RPC on http://\(host):\(self.port ?? 0)/jsonrpc (\(self.secret?.isEmpty == false ? "secret required; 'haul rpc-info' prints it" : "NO secret: anyone who can reach the port controls the queue"))")
            },
            eventLoopGroupProvider: .shared(self.serviceLoop),
            logger: quiet
        )
        try await app.run()
    }

    /// One WebSocket: each text or binary message is a request (or batch) answered on the same
    /// socket; notifications go out between answers. One writer task sends both, in order.
    static func serveWebSocket(
        inbound: WebSocketInboundStream,
        outbound: WebSocketOutboundWriter,
        methods: Aria2Methods,
        notifier: Aria2Notifier
    ) async throws {
        let (stream, continuation) = AsyncStream<String>.makeStream(bufferingPolicy: .bufferingNewest(4096))
        let listener = notifier.addListener { continuation.yield($0) }
        defer { notifier.removeListener(listener) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for await text in stream { try await outbound.write(.text(text)) }
            }
            defer { continuation.finish() }
            for try await message in inbound.messages(maxSize: Aria2Envelope.maximumRequestSize) {
                WorkingSetTrimmer.noteActivity()
                let bytes: [UInt8]
                switch message {
                case .text(let text): bytes = Array(text.utf8)
                case .binary(let buffer): bytes = Array(buffer.readableBytesView)
                }
                let answer = await methods.answer(bytes)
                continuation.yield(String(decoding: answer, as: UTF8.self))
            }
            continuation.finish()
            try await group.waitForAll()
        }
    }

    static let corsHeaders: HTTPFields = [
        .accessControlAllowOrigin: "*",
        .accessControlAllowMethods: "POST, GET, OPTIONS",
        .accessControlAllowHeaders: "Content-Type, Authorization",
        .accessControlMaxAge: "1728000",
    ]

    private func addRoutes(to router: Router<BasicRequestContext>) {
        let methods = self.methods
        router.on("/jsonrpc", method: .options) { _, _ in
            Response(status: .ok, headers: Self.corsHeaders)
        }
        // Answered by Aria2HTTPHandler on the event loop, except behind an unanswered request of
        // another kind on the same connection.
        router.post("/jsonrpc") { request, _ in
            WorkingSetTrimmer.noteActivity()
            var request = request
            let body: ByteBuffer
            do {
                body = try await request.collectBody(upTo: Aria2Envelope.maximumRequestSize)
            } catch {
                return Self.response(Aria2Envelope.error(id: .null, Aria2Fault(code: -32600, "Request too large.")).bytes, status: .contentTooLarge)
            }
            return Self.response(await methods.answer(body.readableBytesView))
        }
        router.get("/jsonrpc") { request, _ in
            WorkingSetTrimmer.noteActivity()
            let query = request.uri.queryParameters
            guard let method = query["method"].map(String.init) else {
                return Self.response(Aria2Envelope.error(id: .null, .invalidRequest).bytes)
            }
            var id = JSONValue.null
            if let text = query["id"].map(String.init) { id = Self.jsonOrString(text) }
            var params: [JSONValue] = []
            if let encoded = query["params"].map(String.init), !encoded.isEmpty {
                guard let data = Self.base64(encoded), case .array(let values) = (try? JSONValue(parsing: data)) ?? .null else {
                    return Self.response(Aria2Envelope.error(id: id, .invalidParams("params must be a base64-encoded JSON array")).bytes)
                }
                params = values
            }
            let answer = await methods.answer(.single(.success(Aria2Call(id: id, method: method, params: params)))).bytes
            if let callback = query["jsoncallback"].map(String.init) {
                guard callback.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" || $0 == "." || $0 == "$" }), !callback.isEmpty else {
                    return Self.response(Aria2Envelope.error(id: id, .invalidParams("bad jsoncallback")).bytes)
                }
                var headers = Self.corsHeaders
                headers[.contentType] = "text/javascript"
                return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: Array("\(callback)(".utf8) + answer + Array(")".utf8))))
            }
            return Self.response(answer)
        }
        router.post("/rpc") { _, _ in
            Response(status: .notImplemented, headers: Self.corsHeaders, body: ResponseBody(byteBuffer: ByteBuffer(string: "XML-RPC is not supported: use JSON-RPC on /jsonrpc\n")))
        }
    }

    private static func response(_ bytes: [UInt8], status: HTTPResponse.Status = .ok) -> Response {
        var headers = Self.corsHeaders
        headers[.contentType] = "application/json-rpc"
        headers[.cacheControl] = "no-store"
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    /// A query's `id`: JSON when it reads as JSON (`1`, `"x"`), else the text.
    private static func jsonOrString(_ text: String) -> JSONValue {
        (try? JSONValue(parsing: Array(text.utf8))) ?? .string(text)
    }

    /// Standard or URL-safe base64, padding optional.
    private static func base64(_ text: String) -> Data? {
        var normalized = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            .replacingOccurrences(of: " ", with: "+")
        while normalized.count % 4 != 0 { normalized += "=" }
        return Data(base64Encoded: normalized)
    }
}
