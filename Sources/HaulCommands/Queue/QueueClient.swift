import ArgumentParser
import Foundation
import HaulDaemonClient
import HaulCore
import Synchronization

/// The `haul` side of the queue commands: one connection to `hauld`, requests answered in
/// order, events for `wait` and `watch`.
struct QueueClient {
    let connection: BackgroundDaemonClient
    let paths: DaemonPaths

    /// Connects to the daemon of this user (`HAUL_DATA_DIR` / `HAUL_RUNTIME_DIR` honoured).
    ///
    /// - Parameter start: start hauld when none runs. When `false` and standard input is a
    ///   terminal, the user is asked; otherwise the command fails with how to start it.
    static func connect(start: Bool) throws -> QueueClient {
        let paths = DaemonPaths.fromEnvironment()
        if let connection = try? BackgroundDaemonClient.connectOnce(paths: paths) {
            return QueueClient(connection: connection, paths: paths)
        }
        var shouldStart = start
        if !shouldStart, isatty(STDIN_FILENO) == 1, isatty(STDERR_FILENO) == 1 {
            Terminal.writeError("hauld is not running. Start it now? [Y/n] ")
            let answer = readLine()?.trimmingCharacters(in: .whitespaces).lowercased() ?? "n"
            shouldStart = answer.isEmpty || answer == "y" || answer == "yes"
        }
        guard shouldStart else {
            Terminal.writeError("""
                haul: hauld is not running (no daemon at \(paths.socketPath)).
                Start it with 'haul daemon' (foreground), 'systemctl --user start hauld', or add --start.

                """)
            throw ExitStatus.generic
        }
        do {
            let connection = try BackgroundDaemonClient.connect(paths: paths)
            Terminal.writeError("haul: started hauld (log: \(paths.logPath))\n")
            return QueueClient(connection: connection, paths: paths)
        } catch {
            Terminal.writeError("haul: cannot start hauld: \(error)\n")
            throw ExitStatus.generic
        }
    }

    /// Sends a request; a refusal becomes a message on standard error and exit status 1.
    func call(_ command: DaemonRequest.Command) throws -> DaemonResponse {
        do {
            return try self.connection.call(DaemonRequest(command))
        } catch {
            Terminal.writeError("haul: \(error)\n")
            throw ExitStatus.generic
        }
    }

    /// Subscribes to queue events; `handler` runs on a network thread, in order.
    func subscribe(_ handler: @escaping @Sendable (DaemonEvent) -> Void) throws {
        self.connection.onEvent(handler)
        _ = try self.call(.queueSubscribe)
    }

    func close() { self.connection.close() }
}

/// Options every queue command shares.
struct QueueConnectionOptions: ParsableArguments {
    @Flag(name: .customLong("start"), help: "Start hauld if it is not running.")
    var start = false
}

/// Parses download ids as users type them.
func parseDownloadIDs(_ texts: [String]) throws -> [Int64] {
    try texts.map { text in
        guard let id = Int64(text.hasPrefix("#") ? String(text.dropFirst()) : text), id > 0 else {
            throw ValidationError("'\(text)' is not a download id (see 'haul ls')")
        }
        return id
    }
}
