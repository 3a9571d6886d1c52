import ArgumentParser
import Foundation
import HaulDaemonClient
import HaulCore
import Synchronization

/// The `haul` side of the queue commands: one blocking connection to `hauld`
/// (``DaemonLineConnection``: no event loop to set up), requests answered in order, events for
/// `wait` and `watch` read when they ask (``readEvents(timeout:)``).
struct QueueClient {
    private let connection: DaemonLineConnection
    let paths: DaemonPaths

    /// Connects to the daemon of this user (`HAUL_DATA_DIR` / `HAUL_RUNTIME_DIR` honoured).
    ///
    /// - Parameter start: start hauld when none runs. When `false` and standard input is a
    ///   terminal, the user is asked; otherwise the command fails with how to start it.
    static func connect(start: Bool) throws -> QueueClient {
        let paths = DaemonPaths.fromEnvironment()
        if let client = try? Self.connectOnce(paths: paths) { return client }
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
            let connection = try DaemonLineConnection.connect(paths: paths)
            Terminal.writeError("haul: started hauld (log: \(paths.logPath))\n")
            return QueueClient(connection: connection, paths: paths)
        } catch {
            Terminal.writeError("haul: cannot start hauld: \(error)\n")
            throw ExitStatus.generic
        }
    }

    /// A connection to the daemon of `paths` if one runs (none is started).
    static func connectOnce(paths: DaemonPaths) throws -> QueueClient {
        QueueClient(connection: try DaemonLineConnection.connectOnce(paths: paths), paths: paths)
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
        try self.connection.call(request)
    }

    /// Subscribes to queue events (`finishesOnly`: downloads that complete, fail or are
    /// cancelled, and those dropped; `fields`: each download projected to those members, read
    /// as ``DaemonEvent/downloadFields`` says; ``DaemonRequest/QueueSubscription``): `handler`
    /// gets each, in order, on the thread that reads them (this one: while a call waits for its
    /// answer, and in ``readEvents(timeout:)``).
    func subscribe(finishesOnly: Bool = false, fields: [DownloadField]? = nil, _ handler: @escaping @Sendable (DaemonEvent) -> Void) throws {
        self.connection.onEvent(handler)
        _ = try self.call(.queueSubscribe(.init(events: finishesOnly ? .finished : nil, fields: fields)))
    }

    /// Reads the events that come within `timeout` seconds (returning once some were read and
    /// no more wait). Throws when the connection is gone.
    func readEvents(timeout: Double) throws {
        try self.connection.readEvents(timeout: .milliseconds(Int64(timeout * 1000)))
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
