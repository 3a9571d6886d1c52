import ArgumentParser
import Foundation
import HaulCore

/// `haul limit ID RATE`: change one download's speed limit, also while it runs.
struct LimitCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "limit",
        abstract: "Change the speed limit of downloads (takes effect at once, also while they run).",
        discussion: "RATE is per second, e.g. 500K or 2M; 0 removes the limit."
    ).haulSubcommand

    @Argument(help: "Download ids.")
    var ids: [String]

    @Option(name: .customLong("rate"), help: "The new limit, e.g. 500K, 2M, or 0 for none.")
    var rate: String

    @OptionGroup var connection: QueueConnectionOptions

    func validate() throws {
        guard !self.ids.isEmpty else { throw ValidationError("give download ids") }
        _ = try parseDownloadIDs(self.ids)
        guard SpeedLimit.parse(self.rate) != nil else { throw ValidationError("bad --rate '\(self.rate)': use a rate such as 500K, 2M or 0") }
    }

    func run() throws {
        let client = try QueueClient.connect(start: self.connection.start)
        defer { client.close() }
        let limit = SpeedLimit.parse(self.rate) ?? 0
        for id in try parseDownloadIDs(self.ids) {
            _ = try client.call(.queueSetSpeedLimit(.init(downloadID: id, speedLimit: limit)))
            print("download \(id): speed limit \(limit == 0 ? "none" : ByteCountFormatting.bytes(limit) + "/s")")
        }
    }
}
