import ArgumentParser
import Foundation
import HaulCore

/// `haul ls`: the queue in two sections, downloading and finished.
struct ListCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "ls", abstract: "List downloads: downloading, then finished.")

    @Flag(name: .customLong("json"), help: "Print JSON for scripts.")
    var json = false

    @OptionGroup var connection: QueueConnectionOptions

    func run() throws {
        let client = try QueueClient.connect(start: self.connection.start)
        defer { client.close() }
        let downloads = try client.call(.queueList(QueuePage())).downloads ?? []
        print(self.json ? QueueFormatting.json(downloads) : QueueFormatting.table(downloads, width: max(100, Terminal.width)))
    }
}

/// `haul show ID`: everything about one download.
struct ShowCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "show", abstract: "Show one download in detail.")

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
        print(self.json ? QueueFormatting.json(download) : QueueFormatting.details(download))
    }
}
