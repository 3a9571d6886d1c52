import ArgumentParser
import Foundation
import HaulEngine

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

    /// `haul get …` parsed as `GetCommand` alone, and any other `haul NAME …` as that subcommand
    /// alone: the parser then reflects on that one command's options instead of walking every
    /// subcommand (measured: 3.4 M of the 44 M instructions a one-file `haul get` runs, 5.7 M
    /// more without the completion-script probe; most of what remains is the Swift runtime's
    /// first look-ups of each option's type; `haul ls` spent a fifth of its CPU in the root's
    /// parse). Anything that does not parse that way — help, a usage error, a name that is no
    /// subcommand's — goes through the root parser, so messages and usage lines stay the
    /// root's (a list on standard input is read once for both parses:
    /// `GetCommand.standardInputText`).
    private static func parseAsRoot(fastArguments arguments: [String]?) throws -> any ParsableCommand {
        let given = arguments ?? Array(CommandLine.arguments.dropFirst())
        if let name = given.first {
            if name == GetCommand.commandName {
                // The engine's one-time start-up, on the second core while this one builds the
                // command's configuration and parses (a Dispatch worker: a thread of its own
                // cost ~0.3 MB more of peak RSS, its stack and its heap arena).
                DispatchQueue.global().async { TransferEngine.warmUp() }
                if let get = try? GetCommand.parseAsRoot(Array(given.dropFirst())) { return get }
            } else if let subcommand = Self.configuration.subcommands.first(where: { $0.configuration.commandName == name }),
                let command = try? subcommand.parseAsRoot(Array(given.dropFirst()))
            {
                return command
            }
        }
        return try self.parseAsRoot(arguments)
    }

    /// Parses the arguments, runs the command and exits with wget-style status codes
    /// (see ``ExitStatus``): a usage error exits with 2 rather than argument parser's 64.
    public static func runAndExit(arguments: [String]? = nil) async -> Never {
        do {
            var command = try Self.parseAsRoot(fastArguments: arguments)
            // Casts to the concrete types compare metadata; a cast to a protocol (`as? any
            // AsyncParsableCommand`) scans the program's 9,000 conformance records the first
            // time (0.7 M instructions of a one-file download's 36 M). `get` and the root are the
            // only asynchronous commands (a test holds every other subcommand to
            // `ParsableCommand`).
            if let get = command as? GetCommand {
                try await get.run()
            } else if var root = command as? HaulCommand {
                // The root runs nothing itself: its `run` asks for the help text.
                try root.run()
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

extension CommandConfiguration {
    /// This configuration named as a pseudo-command of `haul`: each subcommand is parsed as the
    /// root when its name comes first (``HaulCommand``'s `parseAsRoot(fastArguments:)`), and
    /// then its usage lines still read `haul NAME`, and the parser skips its look for
    /// `--generate-completion-script`, which builds two more commands' arguments by reflection
    /// (10 M instructions, 2-3 ms). As a subcommand of `haul` it is unaffected: only the root's
    /// super-command name is read.
    var haulSubcommand: CommandConfiguration {
        var configuration = self
        configuration._superCommandName = "haul"
        return configuration
    }
}
