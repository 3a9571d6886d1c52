import Foundation
import HaulCore
import HaulDaemonClient
import NIOCore
import Synchronization

/// One client connection: writes response and event lines to its channel.
final class DaemonConnection: DaemonClient, Sendable {
    let channel: any Channel
    /// The connection's queue subscription, if it asked for one.
    let subscription = Mutex<UInt64?>(nil)
    /// Requests of this connection handed to a task and not yet answered.
    private let requestsInFlight = Atomic<Int>(0)
    /// Lines written and not yet handed to the channel's event loop; `scheduled` while a hop
    /// to that loop is on its way with them.
    private let outbox = Mutex<(lines: [UInt8], scheduled: Bool)>(([], false))

    init(channel: any Channel) {
        self.channel = channel
    }

    func send(_ event: DaemonEvent) {
        self.write(DaemonServerLine(event: event))
    }

    /// Tells the subscriber that `download` was added or changed: with only the members of
    /// `fields` (and `id`) when its subscription asked for them.
    func sendChange(_ download: QueuedDownloadInfo, fields: [DownloadField]? = nil) {
        guard let bytes = DaemonServerLine.encodedChange(download, fields: fields) else {
            var event = DaemonEvent(kind: .downloadChanged)
            event.download = download
            event.downloadID = download.id
            return self.send(event)
        }
        self.enqueue(bytes)
    }

    var isConnected: Bool { self.channel.isActive }

    /// Whether every request this connection sent before has been answered.
    var isIdle: Bool { self.requestsInFlight.load(ordering: .acquiring) == 0 }

    /// A request goes to a task (answered later, by `respond`, then ``requestAnswered()``).
    func requestStarted() { self.requestsInFlight.add(1, ordering: .relaxed) }

    func requestAnswered() { self.requestsInFlight.subtract(1, ordering: .releasing) }

    func respond(_ response: DaemonResponse) {
        self.write(DaemonServerLine(response: response))
    }

    private func write(_ line: DaemonServerLine) {
        guard let bytes = try? line.encoded() else { return }
        self.enqueue(bytes)
    }

    /// Hands `line` to the channel after the lines written before it. Lines written while a
    /// hop to the channel's loop is on its way go with it, in one write: a subscriber of a
    /// queue of small files hears ~3 changes a file, and each took a hop (a task and a wake-up
    /// of the loop) from the queue's thread (with one subscriber, hauld spent ~35 µs more a file).
    private func enqueue(_ line: [UInt8]) {
        let schedule = self.outbox.withLock { outbox -> Bool in
            // A long answer alone is handed on as it is, not copied.
            if outbox.lines.isEmpty { outbox.lines = line } else { outbox.lines.append(contentsOf: line) }
            defer { outbox.scheduled = true }
            return !outbox.scheduled
        }
        guard schedule else { return }
        self.channel.eventLoop.execute {
            let lines = self.outbox.withLock { outbox -> [UInt8] in
                outbox.scheduled = false
                defer { outbox.lines = [] }
                return outbox.lines
            }
            self.channel.writeAndFlush(ByteBuffer(bytes: lines), promise: nil)
        }
    }
}

/// Reads request lines of one connection and answers them through the daemon.
final class DaemonConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private let daemon: TransferDaemon
    private let queue: DownloadQueue
    private let web: WebUIServer?
    private let rpc: Aria2RPCServer?
    private var connection: DaemonConnection?
    /// Set by the first error: the connection closes once what it says is written.
    private var isClosing = false

    init(daemon: TransferDaemon, queue: DownloadQueue, web: WebUIServer?, rpc: Aria2RPCServer?) {
        self.daemon = daemon
        self.queue = queue
        self.web = web
        self.rpc = rpc
    }

    func channelActive(context: ChannelHandlerContext) {
        self.connection = DaemonConnection(channel: context.channel)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        if let connection = self.connection {
            self.daemon.detach(client: connection)
            if let subscription = connection.subscription.withLock({ $0 }) { self.queue.unsubscribe(subscription) }
        }
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        WorkingSetTrimmer.noteActivity()
        let line = self.unwrapInboundIn(data)
        guard let connection = self.connection else { return }
        let request: DaemonRequest
        do {
            request = try DaemonRequest.decode(line: line.readableBytesView)
        } catch {
            connection.respond(DaemonResponse(id: Self.requestID(in: line), error: "malformed request: \(Self.describe(error, line: line))"))
            return
        }
        // A short list (what a client polls: counts, a page of a few downloads) reads the
        // queue's in-memory index and awaits nothing, so it is answered here, on the loop, when
        // nothing this connection asked before is still being answered (a later request is
        // never answered ahead of an earlier one it could depend on). Through a task, the hop
        // to a cooperative thread and back was half of a poll's cost: 113-133 µs of hauld's CPU
        // a poll, 57-93 µs here. A search reads every download's text, so it goes to a task;
        // so does a list that finds the queue's state locked (a drain, an add of many): the
        // loop carries every transfer and does not wait for the lock.
        if case .queueList(let page) = request.command, (page.limit ?? .max) <= Self.listsAnsweredAtOnce, page.search == nil,
           connection.isIdle
        {
            var response = DaemonResponse(id: request.id)
            if QueueRequestHandler.listAtOnce(page, queue: self.queue, into: &response) {
                connection.respond(response)
                return
            }
        }
        let daemon = self.daemon
        let queue = self.queue
        let web = self.web
        let rpc = self.rpc
        connection.requestStarted()
        Task {
            defer { connection.requestAnswered() }
            var response = await DaemonRequestHandler.handle(request, daemon: daemon, queue: queue, connection: connection)
            if case .webUI = request.command, response.error == nil {
                if let address = web?.address {
                    response.webURL = address
                } else {
                    response.error = web == nil ? "this hauld serves no web UI (started with --no-web)" : "the web UI is not listening (see hauld.log)"
                }
            }
            if case .rpcInfo = request.command, response.error == nil {
                if let endpoint = rpc?.endpoint {
                    response.rpcURL = endpoint
                    response.rpcSecret = rpc?.secret
                } else {
                    response.error = rpc == nil ? "this hauld serves no aria2 RPC (start it with --enable-rpc)" : "the aria2 RPC is not listening (see hauld.log)"
                }
            }
            connection.respond(response)
            if case .attach(let attach) = request.command, response.error == nil {
                daemon.sendBacklog(session: attach.session)
            }
        }
    }

    /// The longest page of `queueList` answered on the event loop itself: a page copies each
    /// download's kept JSON (~2 µs a download: 1,000 take ~2 ms), so a poll holds the loop,
    /// which carries every transfer, for at most ~0.2 ms; longer pages and searches go to a
    /// task.
    static let listsAnsweredAtOnce = 100

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard !self.isClosing else { return }
        self.isClosing = true
        if error is LineScanner.LineTooLong {
            self.connection?.respond(DaemonResponse(id: 0, error: "request line longer than \(DaemonProtocol.maximumLineLength) bytes"))
        }
        // After the lines the connection's outbox holds (the refusal among them), which go out
        // from this loop in order: closed at once, the client never heard why.
        context.eventLoop.execute { context.close(promise: nil) }
    }

    /// The `id` of a line that is not a request, when it has one (read with Haul's own JSON
    /// reader: the line is a client's, and Foundation's readers trap on some deep texts).
    private static func requestID(in line: ByteBuffer) -> Int {
        guard case .integer(let id)? = (try? JSONValue(parsing: line.readableBytesView))?["id"] else { return 0 }
        return Int(exactly: id) ?? 0
    }

    /// Why a line is not a request, in the client's terms: "resume needs 'taskID'".
    private static func describe(_ error: any Error, line: ByteBuffer) -> String {
        let object = try? JSONValue(parsing: line.readableBytesView)
        let method = object?["method"]?.stringValue.flatMap(DaemonRequest.Method.init(rawValue:))?.rawValue
        switch error {
        case DecodingError.keyNotFound(let key, _):
            return method.map { "\($0) needs '\(key.stringValue)'" } ?? "missing field '\(key.stringValue)'"
        case DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context):
            return "wrong value at '\(context.codingPath.map(\.stringValue).joined(separator: "."))'"
        case DecodingError.dataCorrupted(let context):
            if context.codingPath.isEmpty { return "not JSON" }
            return context.debugDescription.contains("'") ? context.debugDescription
                : "bad value at '\(context.codingPath.map(\.stringValue).joined(separator: "."))'"
        default:
            return "\(error)"
        }
    }
}

/// Runs one request against the daemon.
enum DaemonRequestHandler {
    static func handle(_ request: DaemonRequest, daemon: TransferDaemon, queue: DownloadQueue, connection: DaemonConnection) async -> DaemonResponse {
        var response = DaemonResponse(id: request.id)
        do {
            switch request.command {
            case .queueAdd, .queueList, .queueGet, .queuePause, .queueResume, .queueCancel, .queueRemove, .queuePurge,
                .queueSetURL, .queueSettings, .queueSubscribe, .queueSetSpeedLimit, .queueFiles:
                try await QueueRequestHandler.handle(request.command, queue: queue, connection: connection, into: &response)
            case .ping, .webUI, .rpcInfo:
                response.processID = getpid()
            case .fleetStatus:
                response.processID = getpid()
                response.fleet = queue.fleet()
                response.daemonName = queue.configuration.daemonName
                response.store = queue.store.storeDescription
            case .attach(let attach):
                if let version = attach.protocolVersion, version != DaemonProtocol.version {
                    throw DaemonError("protocol version \(version) is not supported (daemon speaks \(DaemonProtocol.version))")
                }
                response.tasks = try await daemon.attach(
                    session: try Self.session(attach.session, request),
                    launchCommand: attach.launchCommand,
                    client: connection
                )
            case .listTasks(let reference):
                response.tasks = try daemon.snapshots(session: try Self.session(reference.session, request))
            case .createDownload(let create):
                let session = try Self.session(create.session, request)
                switch create.source {
                case .resumeData(let data):
                    response.taskID = try daemon.createDownload(session: session, resumeData: data, options: create.options)
                case .url(let url, let headers):
                    response.taskID = try daemon.createDownload(session: session, url: url, headers: headers, options: create.options)
                }
            case .createUpload(let create):
                response.taskID = try daemon.createUpload(
                    session: try Self.session(create.session, request),
                    url: create.url,
                    method: create.httpMethod,
                    filePath: create.filePath,
                    headers: create.headers,
                    options: create.options
                )
            case .resume(let task):
                try daemon.resume(session: try Self.session(task.session, request), taskID: task.taskID)
            case .suspend(let task):
                try daemon.suspend(session: try Self.session(task.session, request), taskID: task.taskID)
            case .cancel(let cancel):
                response.resumeData = try await daemon.cancel(
                    session: try Self.session(cancel.session, request),
                    taskID: cancel.taskID,
                    produceResumeData: cancel.produceResumeData
                )
            case .acknowledge(let acknowledge):
                try daemon.acknowledge(session: try Self.session(acknowledge.session, request), eventID: acknowledge.eventID)
            }
        } catch {
            return DaemonResponse(id: request.id, error: "\(error)")
        }
        return response
    }

    /// A session identifier, which may not be empty.
    private static func session(_ session: String, _ request: DaemonRequest) throws -> String {
        guard !session.isEmpty else { throw DaemonError("\(request.method.rawValue) needs a non-empty 'session'") }
        return session
    }
}
