import ArgumentParser
import Foundation

/// `haul ui`: prints the web UI's address, token included.
struct UICommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ui",
        abstract: "Print the address of the web UI (with its access token).",
        discussion: "The token is in the address's fragment (after #): browsers never send it to a server or a log."
    ).haulSubcommand

    @OptionGroup var connection: QueueConnectionOptions

    func run() throws {
        let client = try QueueClient.connect(start: self.connection.start)
        defer { client.close() }
        guard let address = try client.call(.webUI).webURL else { throw ExitStatus.generic }
        print(address)
    }
}
