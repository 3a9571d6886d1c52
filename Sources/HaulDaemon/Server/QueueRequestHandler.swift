import Foundation
import HaulCore

/// Runs the queue requests of the socket protocol against the ``DownloadQueue``.
enum QueueRequestHandler {
    static func handle(_ request: DaemonRequest, queue: DownloadQueue, connection: DaemonConnection, into response: inout DaemonResponse) async throws {
        switch request.method {
        case .queueAdd where request.downloads != nil:
            response.downloads = try await queue.add(request.downloads!)
        case .queueAdd:
            guard let urls = request.urls ?? request.url.map({ [$0] }) else { throw DaemonError("queueAdd needs 'urls'") }
            response.download = try await queue.add(
                urls: urls,
                directory: request.directory,
                fileName: request.fileName,
                checksum: request.checksum,
                speedLimit: request.speedLimit,
                priority: request.priority,
                paused: request.paused ?? false
            )
        case .queueList:
            if let limit = request.limit, limit < 0 { throw DaemonError("queueList: 'limit' cannot be negative") }
            let page = QueuePage(offset: request.offset ?? 0, limit: request.limit, states: request.states, search: request.search)
            (response.downloads, response.total) = try await queue.list(page)
            response.settings = queue.settings
        case .queueGet:
            response.download = try await queue.download(id: try Self.downloadID(request))
        case .queuePause:
            if request.all == true {
                response.count = try await queue.pauseAll()
            } else if let ids = request.downloadIDs {
                response.count = try await queue.pause(ids: ids)
            } else {
                try await queue.pause(id: try Self.downloadID(request))
                response.count = 1
            }
        case .queueResume:
            if request.all == true {
                response.count = try await queue.resumeAll()
            } else if let ids = request.downloadIDs {
                response.count = try await queue.resume(ids: ids)
            } else {
                try await queue.resume(id: try Self.downloadID(request))
                response.count = 1
            }
        case .queueCancel:
            try await queue.cancel(id: try Self.downloadID(request))
        case .queueRemove where request.downloadIDs != nil:
            var removed = 0
            for id in request.downloadIDs! where (try? await queue.cancel(id: id, deleteFromList: true)) != nil { removed += 1 }
            response.count = removed
        case .queueRemove:
            try await queue.cancel(id: try Self.downloadID(request), deleteFromList: true)
        case .queuePurge:
            response.count = try await queue.purge()
        case .queueSetURL:
            guard let url = request.url else { throw DaemonError("queueSetURL needs 'url'") }
            response.download = try await queue.setURL(id: try Self.downloadID(request), url: url)
        case .queueSettings:
            if let key = request.settingKey {
                guard let value = request.settingValue else { throw DaemonError("queueSettings with 'settingKey' needs 'settingValue'") }
                response.settings = try await queue.set(key, to: value)
            } else {
                response.settings = queue.settings
            }
        case .queueSetSpeedLimit:
            guard let limit = request.speedLimit else { throw DaemonError("queueSetSpeedLimit needs 'speedLimit' (bytes per second, 0 for none)") }
            response.download = try await queue.setSpeedLimit(id: try Self.downloadID(request), bytesPerSecond: limit)
        case .queueSubscribe:
            guard connection.subscription.withLock({ $0 }) == nil else { return }
            let id = queue.subscribe { [weak connection] change in
                guard let connection else { return }
                connection.send(Self.event(for: change))
            }
            connection.subscription.withLock { $0 = id }
        default:
            throw DaemonError("not a queue request: \(request.method.rawValue)")
        }
    }

    static func event(for change: QueueChange) -> DaemonEvent {
        switch change {
        case .changed(let info):
            var event = DaemonEvent(kind: .downloadChanged)
            event.download = info
            event.downloadID = info.id
            return event
        case .removed(let id):
            var event = DaemonEvent(kind: .downloadRemoved)
            event.downloadID = id
            return event
        case .settings(let settings):
            var event = DaemonEvent(kind: .settingsChanged)
            event.settings = settings
            return event
        }
    }

    private static func downloadID(_ request: DaemonRequest) throws -> Int64 {
        guard let id = request.downloadID else { throw DaemonError("\(request.method.rawValue) needs 'downloadID'") }
        return id
    }
}
