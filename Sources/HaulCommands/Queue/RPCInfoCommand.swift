import ArgumentParser
import Foundation

/// `haul rpc-info`: where hauld's aria2 RPC listens, and its secret, for aria2 front-ends
/// (AriaNg, aria2p, Motrix, browser extensions).
struct RPCInfoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rpc-info",
        abstract: "Print the aria2 RPC's endpoint and secret (hauld --enable-rpc).",
        discussion: "Front-ends take the endpoint as the RPC address and the secret as the 'secret token'."
    ).haulSubcommand

    @OptionGroup var connection: QueueConnectionOptions

    @Flag(help: "Print JSON: {\"endpoint\", \"websocket\", \"secret\"}.")
    var json = false

    func run() throws {
        let client = try QueueClient.connect(start: self.connection.start)
        defer { client.close() }
        let response = try client.call(.rpcInfo)
        guard let endpoint = response.rpcURL else { throw ExitStatus.generic }
        let websocket = endpoint.replacingOccurrences(of: "http://", with: "ws://")
        if self.json {
            let object: [String: String] = ["endpoint": endpoint, "websocket": websocket, "secret": response.rpcSecret ?? ""]
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            print(String(decoding: try encoder.encode(object), as: UTF8.self))
            return
        }
        print("endpoint:  \(endpoint)")
        print("websocket: \(websocket)")
        print("secret:    \(response.rpcSecret.flatMap { $0.isEmpty ? nil : $0 } ?? "(none)")")
    }
}
