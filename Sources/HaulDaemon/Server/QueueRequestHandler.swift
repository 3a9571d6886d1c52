import Foundation
import HaulCore

/// Runs the queue requests of the socket protocol against the ``DownloadQueue``.
enum QueueRequestHandler {
    static func handle(_ command: DaemonRequest.Command, queue: DownloadQueue, connection: DaemonConnection, into response: inout DaemonResponse) async throws {
        switch command {
        case .queueAdd(.batch(let downloads, nil)):
            let added = try await queue.add(downloads)
            response.encodedDownloads = DownloadRecord.array(queue.records(of: added), fields: nil, capacity: added.count * 300)
        case .queueAdd(.batch(let downloads, let fields?)):
            // Only the members asked for, written from each download's info: no whole record
            // is made (a list makes it when first asked).
            let added = try await queue.add(downloads)
            response.encodedDownloads = DownloadRecord.array(added.lazy.map { DownloadRecord($0, only: fields) }, fields: fields, capacity: added.count * 16 * fields.count)
        case .queueAdd(.one(let download)):
            response.download = try await queue.add(
                urls: download.urls,
                directory: download.directory,
                fileName: download.fileName,
                checksum: download.checksum,
                speedLimit: download.speedLimit,
                priority: download.priority,
                paused: download.paused
            )
        case .queueList(let page):
            Self.list(page, queue: queue, into: &response)
        case .queueGet(let reference):
            response.download = try await queue.download(id: reference.downloadID)
        case .queuePause(.all):
            response.count = try await queue.pauseAll()
        case .queuePause(.many(let ids)):
            response.count = try await queue.pause(ids: ids)
        case .queuePause(.one(let id)):
            try await queue.pause(id: id)
            response.count = 1
        case .queueResume(.all):
            response.count = try await queue.resumeAll()
        case .queueResume(.many(let ids)):
            response.count = try await queue.resume(ids: ids)
        case .queueResume(.one(let id)):
            try await queue.resume(id: id)
            response.count = 1
        case .queueCancel(let reference):
            try await queue.cancel(id: reference.downloadID)
        case .queueRemove(.all):
            throw DaemonError("queueRemove takes 'downloadID' or 'downloadIDs'; use queuePurge to drop every finished download")
        case .queueRemove(.many(let ids)):
            response.count = try await queue.remove(ids: ids)
        case .queueRemove(.one(let id)):
            try await queue.cancel(id: id, deleteFromList: true)
            response.count = 1
        case .queuePurge:
            response.count = try await queue.purge()
        case .queueSetURL(let change):
            response.download = try await queue.setURL(id: change.downloadID, url: change.url)
        case .queueSettings(let change):
            if let change {
                response.settings = try await queue.set(change.settingKey, to: change.settingValue)
            } else {
                response.settings = queue.settings
            }
        case .queueFiles(let page):
            let (files, total, counts) = try await queue.files(page)
            response.files = files
            response.total = total
            response.fileCounts = counts
        case .queueSetSpeedLimit(let change):
            response.download = try await queue.setSpeedLimit(id: change.downloadID, bytesPerSecond: change.speedLimit)
        case .queueSubscribe(let subscription):
            guard connection.subscription.withLock({ $0 }) == nil else { return }
            // `id` always goes with a projection: added here once, not for every change.
            let fields = subscription.fields.map { $0.contains(.id) ? $0 : [.id] + $0 }
            let id = queue.subscribe(finishesOnly: subscription.events == .finished) { [weak connection] change in
                guard let connection else { return }
                if case .changed(let info) = change { return connection.sendChange(info, fields: fields) }
                connection.send(Self.event(for: change))
            }
            connection.subscription.withLock { $0 = id }
        default:
            throw DaemonError("not a queue request: \(command.method.rawValue)")
        }
    }

    /// `queueList`: a page of the queue from its in-memory index, with the total and the
    /// settings.
    static func list(_ page: QueuePage, queue: DownloadQueue, into response: inout DaemonResponse) {
        let (records, total, settings) = queue.recordsAndSettings(page)
        Self.fill(&response, records: records, total: total, settings: settings, fields: page.fields)
    }

    /// ``list(_:queue:into:)`` without waiting: `false` (and nothing filled in) when the queue's
    /// state is locked right now. For the connection's event loop.
    static func listAtOnce(_ page: QueuePage, queue: DownloadQueue, into response: inout DaemonResponse) -> Bool {
        guard let (records, total, settings) = queue.recordsIfUnlocked(page) else { return false }
        Self.fill(&response, records: records, total: total, settings: settings, fields: page.fields)
        return true
    }

    private static func fill(_ response: inout DaemonResponse, records: [DownloadRecord], total: Int, settings: QueueSettings, fields: [DownloadField]?) {
        response.encodedDownloads = DownloadRecord.array(records, fields: fields, capacity: records.count * (fields == nil ? 300 : 40))
        response.total = total
        response.settings = settings
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
}
