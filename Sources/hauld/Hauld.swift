import ArgumentParser
import Foundation
import HaulCore
import HaulDaemon
import Logging
import ServiceLifecycle

/// `hauld`: the background transfer daemon (Haul's `nsurlsessiond`). Runs in the foreground, as
/// services under systemd do; SIGTERM or SIGINT pause every transfer resumably and exit.
@main
struct Hauld: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hauld",
        abstract: "Haul's background transfer daemon.",
        discussion: """
            Data directory: --data-dir, else $HAUL_DATA_DIR, else $XDG_DATA_HOME/haul, else \
            ~/.local/share/haul. Socket directory: --runtime-dir, else $HAUL_RUNTIME_DIR, else \
            $XDG_RUNTIME_DIR/haul, else /tmp/haul-UID (mode 0700).
            """
    )

    @Option(help: "Directory of the store, partial and held files.")
    var dataDir: String?

    @Option(help: "Directory of the socket.")
    var runtimeDir: String?

    @Option(help: "Transfers running at once, background tasks and queue downloads together (saved as the max-concurrent setting).")
    var maximumTransfers: Int?

    // The numbers' defaults are applied here, not given to the parser, which would describe
    // each for its help text at every start (the runtime's first look-ups of Int's and Double's
    // descriptions, ~1.9 M instructions); the help reads as before.
    static let defaultRPCPort = 6800
    static let defaultLeaseSeconds: Double = 15

    @Option(
        name: .customLong("web-port"),
        help: ArgumentHelp("Port of the web UI on 127.0.0.1 (0: any free port). (default: \(DaemonService.defaultWebPort))", valueName: "web-port")
    )
    var webPortGiven: Int?
    var webPort: Int { self.webPortGiven ?? DaemonService.defaultWebPort }

    @Flag(help: "Serve no web UI.")
    var noWeb = false

    @Flag(name: .customLong("enable-rpc"), help: "Serve aria2's JSON-RPC (HTTP and WebSocket on /jsonrpc), as aria2c --enable-rpc.")
    var enableRPC = false

    @Option(name: .customLong("rpc-listen-port"), help: ArgumentHelp("Port of the aria2 RPC (0: any free port). (default: \(Self.defaultRPCPort))", valueName: "rpc-listen-port"))
    var rpcListenPortGiven: Int?
    var rpcListenPort: Int { self.rpcListenPortGiven ?? Self.defaultRPCPort }

    @Flag(name: .customLong("rpc-listen-all"), help: "Listen for the RPC on every address instead of 127.0.0.1 only.")
    var rpcListenAll = false

    @Option(
        name: .customLong("rpc-secret"),
        help: "The RPC's secret ('token:SECRET' in every call). Default: one made on the first start, kept in the data directory; 'haul rpc-info' prints it. An empty value requires none."
    )
    var rpcSecret: String?

    @Option(
        help: "Where the download queue lives: sqlite:PATH or postgres://USER@HOST:PORT/DB (default: the SQLite store in the data directory). Background sessions always use the local store."
    )
    var store: String?

    @Option(help: "This daemon's name in a fleet sharing a PostgreSQL queue (default HOST-PID). Unique per daemon; restarted under the same name, it takes its own downloads back at once.")
    var name: String?

    @Option(
        name: .customLong("lease-seconds"),
        help: ArgumentHelp(
            "Seconds a lease on a download of a shared queue lasts unless renewed; a dead daemon's downloads are taken over after it. (default: \(Self.defaultLeaseSeconds))",
            valueName: "lease-seconds"
        )
    )
    var leaseSecondsGiven: Double?
    var leaseSeconds: Double { self.leaseSecondsGiven ?? Self.defaultLeaseSeconds }

    @Flag(name: .customLong("no-host-runs"), help: "Run every queued download in a run of its own, also plain small ones (their host's run takes them otherwise: the same downloads, less CPU a file; to compare).")
    var noHostRuns = false

    @Flag(help: "Log at debug level: every task start, every time idle memory is handed back (as --log-level debug).")
    var verbose = false

    @Option(
        help: ArgumentHelp(
            "The least level logged: trace, debug, info (the default: a line for each download that completes), notice (only what is out of the ordinary: takeovers, mirrors dropped, …), warning, error or critical.",
            valueName: "level"
        ),
        transform: { name in
            guard let level = Logger.Level(rawValue: name) else {
                throw ValidationError("unknown log level '\(name)' (known: \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", ")))")
            }
            return level
        }
    )
    var logLevel: Logger.Level?

    func validate() throws {
        if self.verbose, self.logLevel != nil { throw ValidationError("--verbose is --log-level debug: give one of them") }
    }

    func run() async throws {
        var paths = DaemonPaths.fromEnvironment()
        if let dataDir { paths.dataDirectory = URL(fileURLWithPath: dataDir, isDirectory: true) }
        if let runtimeDir { paths.runtimeDirectory = URL(fileURLWithPath: runtimeDir, isDirectory: true) }
        // Lines in UTC, put together by hand (a small file's end is logged).
        LoggingSystem.bootstrap { label in DaemonLogHandler(label: label) }
        var logger = Logger(label: "hauld")
        logger.logLevel = self.logLevel ?? (self.verbose ? .debug : .info)
        guard self.leaseSeconds >= 1, self.leaseSeconds <= 3600 else {
            FileHandle.standardError.write(Data("hauld: --lease-seconds must be from 1 to 3600\n".utf8))
            throw ExitCode(1)
        }
        var queueConfiguration = DownloadQueue.Configuration(defaultDirectory: DownloadQueue.defaultDownloadDirectory())
        if let name = self.name {
            guard !name.isEmpty, !name.contains(" "), name.count <= 100 else {
                FileHandle.standardError.write(Data("hauld: --name must be 1 to 100 characters without spaces\n".utf8))
                throw ExitCode(1)
            }
            queueConfiguration.daemonName = name
        }
        queueConfiguration.leaseSeconds = self.leaseSeconds
        queueConfiguration.usesHostRuns = !self.noHostRuns
        let service = DaemonService(
            paths: paths,
            maximumConcurrentTransfers: self.maximumTransfers,
            queueConfiguration: queueConfiguration,
            webPort: self.noWeb ? nil : self.webPort,
            rpc: self.enableRPC
                ? Aria2RPCServer.Configuration(port: self.rpcListenPort, listenAll: self.rpcListenAll, secret: self.rpcSecret)
                : nil,
            queueStore: self.store,
            logger: logger
        )
        let group = ServiceGroup(services: [service], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        do {
            try await group.run()
        } catch let error as DaemonLock.AlreadyRunning {
            FileHandle.standardError.write(Data("hauld: \(error)\n".utf8))
            throw ExitCode(1)
        } catch let error as DaemonError {
            FileHandle.standardError.write(Data("hauld: \(error)\n".utf8))
            throw ExitCode(1)
        }
    }
}


