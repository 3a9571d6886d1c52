import Foundation
import HaulCore
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization

/// The daemon's web UI: the page, a JSON API over the ``DownloadQueue`` and a server-sent
/// event stream that pushes every change (no polling). Binds 127.0.0.1 only.
///
/// The page shows one page of the list at a time (100 rows), so 10,000 queued downloads cost
/// the browser no more than 100: the event stream carries only changes, and the page asks for
/// its rows again when a change may move a download in or out of what it shows.
///
/// API (all under the token, see ``WebGuardMiddleware``):
/// - `GET /api/downloads?view=downloading|finished&state=S&search=TEXT&offset=N&limit=N` →
///   `{downloads, total, counts, settings}`: a page (without `view`/`limit`: every download),
///   how many match, and how many downloads each state has
/// - `POST /api/downloads` `{urls, directory?, fileName?, checksum?, speedLimit?}` → `{downloads}`:
///   all added in one transaction or none; a body is at most 1 MiB (the page sends a longer
///   list in several)
/// - `POST /api/downloads/ID/pause|resume|cancel`, `DELETE /api/downloads/ID`
/// - `POST /api/downloads/ID/limit` `{speedLimit}` (`"500K"`, `"2M"`, `""` for none) → `{download}`
/// - `POST /api/selection/pause|resume|remove` `{ids}` → `{count}`
/// - `POST /api/pause-all`, `/api/resume-all`, `/api/purge`
/// - `GET /api/events` → `text/event-stream`: `snapshot` (`{counts, settings}`) first, then
///   `download`, `removed`, `settings` events as they happen, and a comment every 15 s to keep
///   proxies from closing it.
public final class WebUIServer: Sendable {
    struct AddBody: Decodable {
        var urls: [String]
        var directory: String?
        var fileName: String?
        var checksum: String?
        var speedLimit: String?
    }

    struct LimitBody: Decodable {
        var speedLimit: String?
    }

    struct SelectionBody: Decodable {
        var ids: [Int64]
    }

    /// What the page's tabs show.
    static let views: [String: [QueuedDownloadState]] = [
        "downloading": [.waiting, .active, .paused],
        "finished": [.complete, .error, .removed],
    ]

    let queue: DownloadQueue
    let token: String
    let requestedPort: Int
    let logger: Logger
    private let boundPort = Mutex<Int?>(nil)

    public init(queue: DownloadQueue, token: String, port: Int, logger: Logger) {
        self.queue = queue
        self.token = token
        self.requestedPort = port
        self.logger = logger
    }

    /// The port once listening.
    public var port: Int? { self.boundPort.withLock { $0 } }

    /// The address to open, with the token in the fragment (never sent to a server or logged).
    public var address: String? {
        self.port.map { "http://127.0.0.1:\($0)/#token=\(self.token)" }
    }

    /// Serves until graceful shutdown.
    public func run() async throws {
        let router = Router()
        router.middlewares.add(WebGuardMiddleware(token: self.token, port: { [weak self] in self?.port }))
        self.addRoutes(to: router)
        let app = Application(
            router: router,
            configuration: .init(address: .hostname("127.0.0.1", port: self.requestedPort), serverName: "hauld"),
            onServerRunning: { [weak self] channel in
                guard let self else { return }
                self.boundPort.withLock { $0 = channel.localAddress?.port }
                self.logger.info("web UI on http://127.0.0.1:\(self.port ?? 0)/ ('haul ui' prints the address with its token)")
            },
            // Not on the loop that carries the transfers (``TransferCore/serviceLoop``).
            eventLoopGroupProvider: .shared(self.queue.core.serviceLoop),
            logger: self.logger
        )
        try await app.run()
    }

    private func addRoutes(to router: Router<BasicRequestContext>) {
        for (path, file) in WebAssets.files {
            router.get(RouterPath(path)) { _, _ in
                Response(
                    status: .ok,
                    headers: [
                        .contentType: file.contentType,
                        .cacheControl: "no-cache",
                        .contentSecurityPolicy: "default-src 'self'; style-src 'self'; script-src 'self'; frame-ancestors 'none'",
                        HTTPField.Name("X-Content-Type-Options")!: "nosniff",
                    ],
                    body: ResponseBody(byteBuffer: ByteBuffer(string: file.body))
                )
            }
        }
        let queue = self.queue
        router.get("/api/downloads") { request, _ in
            try await Self.respond {
                let page = try Self.page(request.uri.queryParameters)
                let (records, total) = queue.records(page)
                let answer = ListAnswer(total: total, counts: Self.counts(queue), settings: queue.settings)
                return WebJSON.response(raw: JSONWriter.inserting(
                    member: "downloads",
                    raw: DownloadRecord.array(records, fields: nil, capacity: records.count * 300),
                    into: Array(try WebJSON.encoder.encode(answer))
                ))
            }
        }
        router.post("/api/downloads/:id/limit") { request, context in
            try await Self.answer {
                let body = try await Self.decode(LimitBody.self, request, context)
                let text = (body.speedLimit ?? "").trimmingCharacters(in: .whitespaces)
                var limit: Int64 = 0
                if !text.isEmpty {
                    guard let parsed = SpeedLimit.parse(text) else { throw DaemonError("bad speed limit '\(text)' (try 500K or 2M)") }
                    limit = parsed
                }
                return ["download": try await queue.setSpeedLimit(id: try Self.id(context), bytesPerSecond: limit)]
            }
        }
        router.post("/api/selection/:action") { request, context in
            try await Self.answer {
                let ids = try await Self.decode(SelectionBody.self, request, context).ids
                guard ids.count <= 100_000 else { throw DaemonError("at most 100000 ids at once") }
                let count: Int
                switch context.parameters.get("action") {
                case "pause": count = try await queue.pause(ids: ids)
                case "resume": count = try await queue.resume(ids: ids)
                case "remove": count = try await queue.remove(ids: ids)
                default: throw DaemonError("unknown action")
                }
                return ["count": count]
            }
        }
        router.post("/api/downloads") { request, context in
            try await Self.answer {
                let body = try await Self.decode(AddBody.self, request, context)
                guard !body.urls.isEmpty else { throw DaemonError("give at least one URL") }
                // Check every URL first: a bad one in the list adds none.
                let urls = try body.urls.map { text -> URL in
                    guard let url = URL(string: text) else { throw DaemonError("not a URL: \(text)") }
                    return url
                }
                if urls.count > 1, body.checksum != nil || body.fileName != nil {
                    throw DaemonError("a checksum or file name applies to a single URL")
                }
                var limit: Int64?
                if let text = body.speedLimit, !text.isEmpty {
                    guard let parsed = SpeedLimit.parse(text) else { throw DaemonError("bad speed limit '\(text)'") }
                    limit = parsed
                }
                for url in urls {
                    guard url.isHTTPWithHost else {
                        throw DaemonError("not an http or https URL: \(url.absoluteString)")
                    }
                }
                // One transaction for the list (a pasted list of thousands was a transaction each).
                let added = try await queue.add(urls.map { url in
                    NewDownload(urls: [url], directory: body.directory, fileName: body.fileName, checksum: body.checksum, speedLimit: limit)
                })
                return ["downloads": added]
            }
        }
        router.post("/api/downloads/:id/:action") { _, context in
            try await Self.answer {
                let id = try Self.id(context)
                switch context.parameters.get("action") {
                case "pause": try await queue.pause(id: id)
                case "resume": try await queue.resume(id: id)
                case "cancel": try await queue.cancel(id: id)
                default: throw DaemonError("unknown action")
                }
                return ["download": try await queue.download(id: id)]
            }
        }
        router.delete("/api/downloads/:id") { _, context in
            try await Self.answer {
                try await queue.cancel(id: try Self.id(context), deleteFromList: true)
                return ["removed": try Self.id(context)]
            }
        }
        router.post("/api/pause-all") { _, _ in try await Self.answer { ["count": try await queue.pauseAll()] } }
        router.post("/api/resume-all") { _, _ in try await Self.answer { ["count": try await queue.resumeAll()] } }
        router.post("/api/purge") { _, _ in try await Self.answer { ["count": try await queue.purge()] } }
        router.get("/api/events") { _, _ in self.eventStream() }
    }

    /// A page of the list; its `downloads` go in as records (``DownloadRecord``).
    struct ListAnswer: Encodable {
        var total: Int
        var counts: [String: Int]
        var settings: QueueSettings
    }

    /// The stream's first event: what the page needs before it asks for rows.
    struct SnapshotAnswer: Encodable {
        var counts: [String: Int]
        var settings: QueueSettings
    }

    /// Downloads per state, and per tab (`downloading`, `finished`).
    static func counts(_ queue: DownloadQueue) -> [String: Int] {
        let byState = queue.stateCounts()
        var counts: [String: Int] = [:]
        for state in QueuedDownloadState.allCases { counts[state.rawValue] = byState[state] ?? 0 }
        for (view, states) in Self.views { counts[view] = states.reduce(0) { $0 + (byState[$1] ?? 0) } }
        return counts
    }

    /// The page a list request asks for; without `view` and `limit`, every download.
    static func page(_ query: Hummingbird.Parameters) throws -> QueuePage {
        var states: [QueuedDownloadState]?
        if let view = query["view"].map(String.init) {
            guard let viewStates = Self.views[view] else { throw DaemonError("unknown view '\(view)' (downloading or finished)") }
            states = viewStates
        }
        if let text = query["state"].map(String.init), !text.isEmpty {
            guard let state = QueuedDownloadState(rawValue: text) else { throw DaemonError("unknown state '\(text)'") }
            if let viewStates = states, !viewStates.contains(state) { states = [] } else { states = [state] }
        }
        func number(_ name: String) throws -> Int? {
            guard let text = query[Substring(name)].map(String.init), !text.isEmpty else { return nil }
            guard let value = Int(text), value >= 0 else { throw DaemonError("'\(name)' must be a number ≥ 0") }
            return value
        }
        let search = query["search"].map(String.init)
        return QueuePage(offset: try number("offset") ?? 0, limit: try number("limit"), states: states, search: search?.isEmpty == true ? nil : search)
    }

    /// The live stream: subscribe first, then send the snapshot, so nothing falls between. What
    /// the queue tells meanwhile waits in a ``WebEventMailbox`` and goes out in one write with
    /// whatever else came (a busy queue of small files tells several changes a file).
    private func eventStream() -> Response {
        let queue = self.queue
        let body = ResponseBody { writer in
            let mailbox = WebEventMailbox()
            let subscription = queue.subscribe { mailbox.post(.change($0)) }
            let heartbeat = Task {
                while !Task.isCancelled {
                    try? await Task.sleep(for: .seconds(15))
                    mailbox.post(.keepAlive)
                }
            }
            defer {
                queue.unsubscribe(subscription)
                heartbeat.cancel()
                mailbox.close()
            }
            let snapshot = SnapshotAnswer(counts: Self.counts(queue), settings: queue.settings)
            try await writer.write(ByteBuffer(string: "retry: 2000\nevent: snapshot\ndata: \(WebJSON.string(snapshot))\n\n"))
            try await withGracefulShutdownHandler {
                try await withTaskCancellationHandler {
                    while let items = await mailbox.take() {
                        try await writer.write(ByteBuffer(bytes: Self.events(items)))
                    }
                } onCancel: {
                    mailbox.close()
                }
            } onGracefulShutdown: {
                mailbox.close()
            }
            try await writer.finish(nil)
        }
        return Response(
            status: .ok,
            headers: [.contentType: "text/event-stream", .cacheControl: "no-store"],
            body: body
        )
    }

    /// `items` as the stream's text: a `download` event with its record (as lists have it;
    /// `JSONEncoder`'s for what a record does not hold), `removed`, `settings`, a keep-alive
    /// comment.
    static func events(_ items: [WebEventMailbox.Item]) -> [UInt8] {
        var writer = JSONWriter(capacity: items.count * 400)
        for item in items {
            switch item {
            case .keepAlive:
                writer.append(raw: ": keep-alive\n\n")
            case .change(.changed(let download)):
                writer.append(raw: "event: download\ndata: ")
                if !DownloadRecord.appendWhole(download, to: &writer) { writer.append(verbatim: WebJSON.string(download)) }
                writer.append(raw: "\n\n")
            case .change(.removed(let id)):
                writer.append(raw: "event: removed\ndata: {\"id\":")
                writer.append(integer: id)
                writer.append(raw: "}\n\n")
            case .change(.settings(let settings)):
                writer.append(raw: "event: settings\ndata: ")
                writer.append(verbatim: WebJSON.string(settings))
                writer.append(raw: "\n\n")
            }
        }
        return writer.bytes
    }

    private static func id(_ context: BasicRequestContext) throws -> Int64 {
        guard let id = context.parameters.get("id", as: Int64.self) else { throw DaemonError("the download id must be a number") }
        return id
    }

    /// The longest request body the web API reads (the page sends a longer list of URLs to add
    /// in several requests).
    static let maximumBodySize = 1 << 20

    private static func decode<T: Decodable>(_ type: T.Type, _ request: Request, _ context: BasicRequestContext) async throws -> T {
        guard request.headers[.contentType]?.lowercased().hasPrefix("application/json") == true else {
            throw DaemonError("send JSON (Content-Type: application/json)")
        }
        var request = request
        let buffer: ByteBuffer
        do {
            buffer = try await request.collectBody(upTo: Self.maximumBodySize)
        } catch is NIOTooManyBytesError {
            // Hummingbird's own answer is a bare 413 (the page showed "HTTP 413").
            throw DaemonError("the request is larger than the web API takes (\(Self.maximumBodySize) bytes): send fewer URLs at once")
        }
        do {
            return try JSONDecoder().decode(T.self, from: Data(buffer.readableBytesView), maximumNesting: JSONNesting.limit)
        } catch {
            throw DaemonError("malformed JSON body: \(error)")
        }
    }

    /// Runs `body`; a refusal becomes 400 (404 for an unknown id) with `{"error": …}`.
    private static func answer(_ body: () async throws -> some Encodable) async throws -> Response {
        try await Self.respond { WebJSON.response(try await body()) }
    }

    /// As ``answer(_:)``, for a body that makes its own response (a list written from records).
    private static func respond(_ body: () async throws -> Response) async throws -> Response {
        do {
            return try await body()
        } catch let error as DaemonError {
            let status: HTTPResponse.Status = error.description.hasPrefix("no download with id") ? .notFound : .badRequest
            return WebJSON.response(["error": error.description], status: status)
        }
    }
}
