import ArgumentParser
import Foundation
import HaulCore

/// `haul pause ID…|--all`.
struct PauseCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "pause", abstract: "Pause downloads, keeping their bytes.").haulSubcommand

    @Argument(help: "Download ids.")
    var ids: [String] = []

    @Flag(name: .customLong("all"), help: "Pause every waiting or active download.")
    var all = false

    @OptionGroup var connection: QueueConnectionOptions

    func validate() throws {
        if self.ids.isEmpty == !self.all { throw ValidationError("give download ids or --all") }
        _ = try parseDownloadIDs(self.ids)
    }

    func run() throws {
        try runControl({ .queuePause(.one($0)) }, ids: self.ids, all: self.all ? .queuePause(.all) : nil, verb: "paused", start: self.connection.start)
    }
}

/// `haul resume ID…|--all`.
struct ResumeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "resume", abstract: "Resume paused or failed downloads.").haulSubcommand

    @Argument(help: "Download ids.")
    var ids: [String] = []

    @Flag(name: .customLong("all"), help: "Resume every paused download.")
    var all = false

    @OptionGroup var connection: QueueConnectionOptions

    func validate() throws {
        if self.ids.isEmpty == !self.all { throw ValidationError("give download ids or --all") }
        _ = try parseDownloadIDs(self.ids)
    }

    func run() throws {
        try runControl({ .queueResume(.one($0)) }, ids: self.ids, all: self.all ? .queueResume(.all) : nil, verb: "resumed", start: self.connection.start)
    }
}

/// `haul cancel ID…`.
struct CancelCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cancel",
        abstract: "Stop downloads for good and delete their partial files (they stay listed until purged)."
    ).haulSubcommand

    @Argument(help: "Download ids.")
    var ids: [String]

    @OptionGroup var connection: QueueConnectionOptions

    func validate() throws { _ = try parseDownloadIDs(self.ids) }

    func run() throws {
        try runControl({ .queueCancel(.init(downloadID: $0)) }, ids: self.ids, all: nil, verb: "cancelled", start: self.connection.start)
    }
}

/// `haul rm ID…`.
struct RemoveCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rm",
        abstract: "Drop downloads from the list (cancelling them if in progress; finished files are kept)."
    ).haulSubcommand

    @Argument(help: "Download ids.")
    var ids: [String]

    @OptionGroup var connection: QueueConnectionOptions

    func validate() throws { _ = try parseDownloadIDs(self.ids) }

    func run() throws {
        try runControl({ .queueRemove(.one($0)) }, ids: self.ids, all: nil, verb: "removed", start: self.connection.start)
    }
}

/// `haul purge`.
struct PurgeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "purge",
        abstract: "Drop finished, failed and cancelled downloads from the list (files are kept)."
    ).haulSubcommand

    @OptionGroup var connection: QueueConnectionOptions

    func run() throws {
        let client = try QueueClient.connect(start: self.connection.start)
        defer { client.close() }
        let count = try client.call(.queuePurge).count ?? 0
        print("purged \(count) download\(count == 1 ? "" : "s")")
    }
}

/// `haul set-url ID URL`.
struct SetURLCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "set-url",
        abstract: "Give a waiting, paused or failed download a new URL (e.g. a fresh signed link).",
        discussion: "The bytes already downloaded are kept when the server confirms (ETag/Last-Modified) that the file is the same."
    ).haulSubcommand

    @Argument(help: "The download's id.")
    var id: String

    @Argument(help: "The new http or https URL.")
    var url: String

    @OptionGroup var connection: QueueConnectionOptions

    func validate() throws {
        _ = try parseDownloadIDs([self.id])
        _ = try AddCommand.httpURL(self.url)
    }

    func run() throws {
        let id = try parseDownloadIDs([self.id])[0]
        let url = try AddCommand.httpURL(self.url)
        let client = try QueueClient.connect(start: self.connection.start)
        defer { client.close() }
        _ = try client.call(.queueSetURL(.init(downloadID: id, url: url)))
        print("download \(id) now fetches \(url.absoluteString)")
    }
}

/// One request per id (or the one `all` request); every id is tried, the status says whether all worked.
private func runControl(
    _ command: (Int64) -> DaemonRequest.Command,
    ids: [String],
    all: DaemonRequest.Command?,
    verb: String,
    start: Bool
) throws {
    let client = try QueueClient.connect(start: start)
    defer { client.close() }
    if let all {
        let count = try client.call(all).count ?? 0
        print("\(verb) \(count) download\(count == 1 ? "" : "s")")
        return
    }
    var failed = false
    for id in try parseDownloadIDs(ids) {
        do {
            _ = try client.call(command(id))
            print("\(verb) \(id)")
        } catch {
            failed = true
        }
    }
    if failed { throw ExitStatus.generic }
}
