import ArgumentParser
import Foundation

/// The `haul` command: the root of all subcommands.
public struct HaulCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "haul",
        abstract: "Resumable, verified HTTP downloads, URLSession-style, for Linux.",
        version: "0.1.0",
        subcommands: [
            GetCommand.self,
            AddCommand.self, ListCommand.self, ShowCommand.self, PauseCommand.self, ResumeCommand.self,
            CancelCommand.self, RemoveCommand.self, PurgeCommand.self, WaitCommand.self, WatchCommand.self,
            SetCommand.self, SetURLCommand.self, LimitCommand.self, UICommand.self, RPCInfoCommand.self,
            DaemonCommand.self,
        ]
    )

    public init() {}

    /// Parses the arguments, runs the command and exits with wget-style status codes
    /// (see ``ExitStatus``): a usage error exits with 2 rather than argument parser's 64.
    public static func runAndExit(arguments: [String]? = nil) async -> Never {
        do {
            var command = try parseAsRoot(arguments)
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
            Foundation.exit(0)
        } catch let status as ExitStatus {
            Foundation.exit(status.rawValue)
        } catch {
            let code = exitCode(for: error)
            if code == .validationFailure {
                FileHandle.standardError.write(Data((fullMessage(for: error) + "\n").utf8))
                Foundation.exit(ExitStatus.usage.rawValue)
            }
            exit(withError: error)
        }
    }
}
