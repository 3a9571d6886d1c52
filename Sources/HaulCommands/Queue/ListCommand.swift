import ArgumentParser
import Foundation
import HaulCore

/// `haul ls`: the queue in two sections, downloading and finished.
struct ListCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "ls", abstract: "List downloads: downloading, then finished.").haulSubcommand

    @Flag(name: .customLong("json"), help: "Print JSON for scripts.")
    var json = false

    @OptionGroup var connection: QueueConnectionOptions

    func run() throws {
        let client = try QueueClient.connect(start: self.connection.start)
        defer { client.close() }
        // Every state: cancelled downloads (`removed`) stay listed among the finished until
        // purged or dropped with `haul rm`, as the web UI lists them.
        let downloads = try client.call(.queueList(QueuePage(states: QueuedDownloadState.allCases))).downloads ?? []
        print(self.json ? QueueFormatting.json(downloads) : QueueFormatting.table(downloads, width: max(100, Terminal.width)))
    }
}

/// `haul show ID`: everything about one download.
struct ShowCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "show", abstract: "Show one download in detail.").haulSubcommand

    @Argument(help: "The download's id.")
    var id: String

    @Flag(name: .customLong("json"), help: "Print JSON for scripts.")
    var json = false

    @OptionGroup var connection: QueueConnectionOptions

    func run() throws {
        let id = try parseDownloadIDs([self.id])[0]
        let client = try QueueClient.connect(start: self.connection.start)
        defer { client.close() }
        guard let download = try client.call(.queueGet(.init(downloadID: id))).download else { throw ExitStatus.generic }
        guard !self.json else { return print(QueueFormatting.json(download)) }
        print(QueueFormatting.details(download))
        // A list: how its files stand, and the first of those that failed with their reasons.
        if download.fileCount != nil {
            let failed = try client.call(.queueFiles(.init(downloadID: id, states: [.failed], limit: Self.failedFilesShown)))
            print(QueueFormatting.listFiles(counts: failed.fileCounts ?? ListFileCounts(), failed: failed.files ?? []))
        }
    }

    /// How many failed files of a list `haul show` names.
    static let failedFilesShown = 20
}
