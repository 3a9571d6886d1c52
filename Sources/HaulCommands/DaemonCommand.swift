import ArgumentParser
import Foundation

/// `haul daemon`: runs `hauld` in the foreground (the same program, found beside `haul`).
struct DaemonCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "daemon",
        abstract: "Run hauld, the background transfer daemon, in the foreground.",
        discussion: "All arguments go to hauld; see 'hauld --help'."
    )

    @Argument(parsing: .allUnrecognized, help: "Arguments for hauld.")
    var arguments: [String] = []

    func run() throws {
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
}
