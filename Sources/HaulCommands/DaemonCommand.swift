import ArgumentParser
import Foundation

/// `haul daemon`: runs `hauld` in the foreground (the same program, found beside `haul`).
struct DaemonCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "daemon",
        abstract: "Run hauld, the background transfer daemon, in the foreground; 'haul daemon status' lists the daemons sharing its queue.",
        discussion: "All arguments go to hauld; see 'hauld --help'. 'haul daemon status [--json]' asks the running daemon instead: the daemons of its fleet (one, unless they share a PostgreSQL queue), with the downloads each runs."
    ).haulSubcommand

    @Argument(parsing: .allUnrecognized, help: "Arguments for hauld.")
    var arguments: [String] = []

    func run() throws {
        if self.arguments.first == "status" {
            try Self.status(json: self.arguments.dropFirst().contains("--json"))
            return
        }
        let environment = ProcessInfo.processInfo.environment
        let own = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
        var candidates: [String] = []
        if let explicit = environment["HAUL_DAEMON_PATH"] { candidates.append(explicit) }
        candidates.append(own.appendingPathComponent("hauld").path)
        candidates += (environment["PATH"] ?? "").split(separator: ":").map { "\($0)/hauld" }
        guard let path = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw ValidationError("hauld was not found beside haul or on PATH")
        }
        let argv = [path] + self.arguments
        var cArguments = argv.map { strdup($0) } + [nil]
        execv(path, &cArguments)
        throw ValidationError("cannot run \(path): \(String(cString: strerror(errno)))")
    }

    /// Prints the fleet of the running daemon.
    static func status(json: Bool) throws {
        let client = try QueueClient.connect(start: false)
        defer { client.close() }
        let response = try client.call(.fleetStatus)
        let fleet = response.fleet ?? []
        if json {
            print(QueueFormatting.json(fleet))
        } else {
            print(QueueFormatting.fleet(fleet, this: response.daemonName, store: response.store))
        }
    }
}
