import Foundation
import HaulCore
import NIOCore
import Synchronization

/// One client connection: writes response and event lines to its channel.
final class DaemonConnection: DaemonClient, Sendable {
    let channel: any Channel
    /// The connection's queue subscription, if it asked for one.
    let subscription = Mutex<UInt64?>(nil)

    init(channel: any Channel) {
        self.channel = channel
    }

    func send(_ event: DaemonEvent) {
        self.write(DaemonServerLine(event: event))
    }

    var isConnected: Bool { self.channel.isActive }

    func respond(_ response: DaemonResponse) {
        self.write(DaemonServerLine(response: response))
    }

    private func write(_ line: DaemonServerLine) {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        guard var data = try? encoder.encode(line) else { return }
        data.append(UInt8(ascii: "\n"))
        self.channel.writeAndFlush(ByteBuffer(bytes: data), promise: nil)
    }
}

/// Reads request lines of one connection and answers them through the daemon.
final class DaemonConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private let daemon: TransferDaemon
    private let queue: DownloadQueue
    private let web: WebUIServer?
    private var connection: DaemonConnection?

    init(daemon: TransferDaemon, queue: DownloadQueue, web: WebUIServer?) {
        self.daemon = daemon
        self.queue = queue
        self.web = web
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
        let line = self.unwrapInboundIn(data)
        guard let connection = self.connection else { return }
        let request: DaemonRequest
        do {
            request = try JSONDecoder().decode(DaemonRequest.self, from: Data(line.readableBytesView))
        } catch {
            connection.respond(DaemonResponse(id: Self.requestID(in: line), error: "malformed request: \(Self.describe(error))"))
            return
        }
        let daemon = self.daemon
        let queue = self.queue
        let web = self.web
        Task {
            var response = await DaemonRequestHandler.handle(request, daemon: daemon, queue: queue, connection: connection)
            if request.method == .webUI, response.error == nil {
                if let address = web?.address {
                    response.webURL = address
                } else {
                    response.error = web == nil ? "this hauld serves no web UI (started with --no-web)" : "the web UI is not listening (see hauld.log)"
                }
            }
            connection.respond(response)
            if request.method == .attach, response.error == nil, let session = request.session {
                daemon.sendBacklog(session: session)
            }
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is JSONLineDecoder.LineTooLong {
            self.connection?.respond(DaemonResponse(id: 0, error: "request line longer than \(DaemonProtocol.maximumLineLength) bytes"))
        }
        context.close(promise: nil)
    }

    private static func requestID(in line: ByteBuffer) -> Int {
        guard let object = try? JSONSerialization.jsonObject(with: Data(line.readableBytesView)) as? [String: Any] else { return 0 }
        return object["id"] as? Int ?? 0
    }

    private static func describe(_ error: any Error) -> String {
        switch error {
        case DecodingError.keyNotFound(let key, _): "missing field '\(key.stringValue)'"
        case DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context):
            "wrong value at '\(context.codingPath.map(\.stringValue).joined(separator: "."))'"
        case DecodingError.dataCorrupted(let context):
            context.codingPath.isEmpty ? "not JSON" : "bad value at '\(context.codingPath.map(\.stringValue).joined(separator: "."))'"
        default: "\(error)"
        }
    }
}

/// Runs one request against the daemon.
enum DaemonRequestHandler {
    static func handle(_ request: DaemonRequest, daemon: TransferDaemon, queue: DownloadQueue, connection: DaemonConnection) async -> DaemonResponse {
        var response = DaemonResponse(id: request.id)
        do {
            switch request.method {
            case .queueAdd, .queueList, .queueGet, .queuePause, .queueResume, .queueCancel, .queueRemove, .queuePurge,
                .queueSetURL, .queueSettings, .queueSubscribe, .queueSetSpeedLimit:
                try await QueueRequestHandler.handle(request, queue: queue, connection: connection, into: &response)
            case .ping, .webUI:
                response.processID = getpid()
            case .attach:
                if let version = request.protocolVersion, version != DaemonProtocol.version {
                    throw DaemonError("protocol version \(version) is not supported (daemon speaks \(DaemonProtocol.version))")
                }
                response.tasks = try await daemon.attach(
                    session: try Self.session(request),
                    launchCommand: request.launchCommand,
                    client: connection
                )
            case .listTasks:
                response.tasks = try daemon.snapshots(session: try Self.session(request))
            case .createDownload where request.resumeData != nil:
                response.taskID = try daemon.createDownload(
                    session: try Self.session(request),
                    resumeData: request.resumeData!,
                    taskDescription: request.taskDescription,
                    isDiscretionary: request.isDiscretionary ?? false,
                    resourceTimeout: request.resourceTimeout ?? 7 * 24 * 3600
                )
            case .createDownload:
                guard let url = request.url else { throw DaemonError("createDownload needs 'url'") }
                response.taskID = try daemon.createDownload(
                    session: try Self.session(request),
                    url: url,
                    headers: request.headers ?? HTTPHeaderFields(),
                    taskDescription: request.taskDescription,
                    isDiscretionary: request.isDiscretionary ?? false,
                    resourceTimeout: request.resourceTimeout ?? 7 * 24 * 3600
                )
            case .createUpload:
                guard let url = request.url, let filePath = request.filePath else {
                    throw DaemonError("createUpload needs 'url' and 'filePath'")
                }
                response.taskID = try daemon.createUpload(
                    session: try Self.session(request),
                    url: url,
                    method: request.httpMethod ?? "POST",
                    filePath: filePath,
                    headers: request.headers ?? HTTPHeaderFields(),
                    taskDescription: request.taskDescription,
                    isDiscretionary: request.isDiscretionary ?? false,
                    resourceTimeout: request.resourceTimeout ?? 7 * 24 * 3600
                )
            case .resume:
                try daemon.resume(session: try Self.session(request), taskID: try Self.taskID(request))
            case .suspend:
                try daemon.suspend(session: try Self.session(request), taskID: try Self.taskID(request))
            case .cancel:
                response.resumeData = try await daemon.cancel(
                    session: try Self.session(request),
                    taskID: try Self.taskID(request),
                    produceResumeData: request.produceResumeData ?? false
                )
            case .acknowledge:
                guard let eventID = request.eventID else { throw DaemonError("acknowledge needs 'eventID'") }
                try daemon.acknowledge(session: try Self.session(request), eventID: eventID)
            }
        } catch {
            return DaemonResponse(id: request.id, error: "\(error)")
        }
        return response
    }

    private static func session(_ request: DaemonRequest) throws -> String {
        guard let session = request.session, !session.isEmpty else { throw DaemonError("\(request.method.rawValue) needs 'session'") }
        return session
    }

    private static func taskID(_ request: DaemonRequest) throws -> Int64 {
        guard let taskID = request.taskID else { throw DaemonError("\(request.method.rawValue) needs 'taskID'") }
        return taskID
    }
}
