import ArgumentParser
import Foundation
import HaulDaemonClient
import HaulCore
import Synchronization

/// The `haul` side of the queue commands: one connection to `hauld`, requests answered in
/// order. A command that asks and prints talks over a blocking connection
/// (``DaemonLineConnection``: no event loop to set up); `wait` and `watch`, which follow events,
/// over ``BackgroundDaemonClient`` (``connectForEvents(start:)``).
struct QueueClient {
    private enum Connection {
        case lines(DaemonLineConnection)
        case events(BackgroundDaemonClient)
    }

    private let connection: Connection
    let paths: DaemonPaths

    /// Connects to the daemon of this user (`HAUL_DATA_DIR` / `HAUL_RUNTIME_DIR` honoured).
    ///
    /// - Parameter start: start hauld when none runs. When `false` and standard input is a
    ///   terminal, the user is asked; otherwise the command fails with how to start it.
    static func connect(start: Bool) throws -> QueueClient {
        try Self.connect(start: start, once: { .lines(try DaemonLineConnection.connectOnce(paths: $0)) }, starting: { .lines(try DaemonLineConnection.connect(paths: $0)) })
    }

    /// ``connect(start:)`` for a command that subscribes to events (``subscribe(_:)``,
    /// ``onClose(_:)``).
    static func connectForEvents(start: Bool) throws -> QueueClient {
        try Self.connect(start: start, once: { .events(try BackgroundDaemonClient.connectOnce(paths: $0)) }, starting: { .events(try BackgroundDaemonClient.connect(paths: $0)) })
    }

    /// A connection for events to the daemon of `paths` if one runs (none is started).
    static func connectForEventsOnce(paths: DaemonPaths) throws -> QueueClient {
        QueueClient(connection: .events(try BackgroundDaemonClient.connectOnce(paths: paths)), paths: paths)
    }

    private static func connect(
        start: Bool,
        once: (DaemonPaths) throws -> Connection,
        starting: (DaemonPaths) throws -> Connection
    ) throws -> QueueClient {
        let paths = DaemonPaths.fromEnvironment()
        if let connection = try? once(paths) {
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
            let connection = try starting(paths)
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
            return try self.request(DaemonRequest(command))
        } catch {
            Terminal.writeError("haul: \(error)\n")
            throw ExitStatus.generic
        }
    }

    /// Sends a request and waits for its answer; a refusal is thrown
    /// (``BackgroundDaemonClient/Failure``), for the caller to word.
    func request(_ request: DaemonRequest) throws -> DaemonResponse {
        switch self.connection {
        case .lines(let connection): try connection.call(request)
        case .events(let client): try client.call(request)
        }
    }

    /// Subscribes to queue events; `handler` runs on a network thread, in order. Only on a
    /// connection made by ``connectForEvents(start:)``.
    func subscribe(_ handler: @escaping @Sendable (DaemonEvent) -> Void) throws {
        guard case .events(let client) = self.connection else { preconditionFailure("events need QueueClient.connectForEvents") }
        client.onEvent(handler)
        _ = try self.call(.queueSubscribe)
    }

    /// `handler` runs once when the connection is gone. Only on a connection made by
    /// ``connectForEvents(start:)``.
    func onClose(_ handler: @escaping @Sendable () -> Void) {
        guard case .events(let client) = self.connection else { preconditionFailure("events need QueueClient.connectForEvents") }
        client.onClose(handler)
    }

    func close() {
        switch self.connection {
        case .lines(let connection): connection.close()
        case .events(let client): client.close()
        }
    }
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
