import Foundation

/// A private PostgreSQL cluster on 127.0.0.1 for tests: `initdb` into a new temporary
/// directory, the server started with `pg_ctl` on a free port (its socket in that directory,
/// `fsync` off: a test cluster), stopped and deleted by ``stop()``. When the tests run as root
/// the cluster belongs to the `postgres` user (PostgreSQL refuses to run as root).
///
/// ``url(database:)`` is the `postgres://` URL of a database in it (``createDatabase(_:)``).
///
/// A test process that crashes never calls ``stop()``: each cluster records the process that
/// made it (`owner.pid`), and the first ``start()`` of a process stops and deletes the clusters
/// whose process is gone.
public final class LoopbackPostgres: @unchecked Sendable {
    // @unchecked: immutable after start.
    public let directory: URL
    public let port: Int
    public let user: String

    /// Whether PostgreSQL's server programs are installed (`.ci/run` installs them).
    public static var isAvailable: Bool { Self.binDirectory != nil }

    static var binDirectory: String? {
        let candidates = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql"))?
            .sorted { (Int($0) ?? 0) > (Int($1) ?? 0) }
            .map { "/usr/lib/postgresql/\($0)/bin" } ?? []
        return candidates.first { FileManager.default.isExecutableFile(atPath: "\($0)/pg_ctl") }
    }

    private init(directory: URL, port: Int, user: String) {
        self.directory = directory
        self.port = port
        self.user = user
    }

    /// Creates and starts a cluster; waits until it accepts connections.
    public static func start() throws -> LoopbackPostgres {
        guard let bin = Self.binDirectory else { throw PostgresError("PostgreSQL is not installed (apt-get install postgresql)") }
        _ = Self.abandonedClustersStopped
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("\(Self.directoryPrefix)\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try Data("\(getpid())".utf8).write(to: directory.appendingPathComponent("owner.pid"))
        let asRoot = geteuid() == 0
        let owner = asRoot ? "postgres" : (ProcessInfo.processInfo.environment["USER"] ?? "haul")
        if asRoot {
            chmod(directory.path, 0o777)
            _ = try Self.run(["/bin/chown", "postgres:postgres", directory.path], asUser: nil)
        }
        let data = directory.appendingPathComponent("data").path
        try Self.run(["\(bin)/initdb", "-D", data, "-U", owner, "-A", "trust", "-E", "UTF8", "--no-sync"], asUser: asRoot ? "postgres" : nil)
        let port = try LoopbackNginx.freePort()
        let cluster = LoopbackPostgres(directory: directory, port: port, user: owner)
        try cluster.startServer()
        return cluster
    }

    static let directoryPrefix = "haul-pg-"

    /// ``stopAbandonedClusters()``, once a process.
    static let abandonedClustersStopped = LoopbackPostgres.stopAbandonedClusters()

    /// Stops and deletes the clusters whose test process is gone; returns how many.
    @discardableResult
    public static func stopAbandonedClusters() -> Int {
        guard Self.isAvailable else { return 0 }
        let temporary = FileManager.default.temporaryDirectory
        let names = (try? FileManager.default.contentsOfDirectory(atPath: temporary.path)) ?? []
        var stopped = 0
        for name in names where name.hasPrefix(Self.directoryPrefix) {
            let directory = temporary.appendingPathComponent(name)
            guard let text = try? String(contentsOf: directory.appendingPathComponent("owner.pid"), encoding: .utf8),
                let owner = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines)),
                kill(owner, 0) != 0, errno == ESRCH
            else { continue }
            Self.stopAndDelete(directory)
            stopped += 1
        }
        return stopped
    }

    private func startServer() throws {
        guard let bin = Self.binDirectory else { throw PostgresError("PostgreSQL is not installed") }
        let options = "-p \(self.port) -h 127.0.0.1 -k \(self.directory.path) -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        try Self.run(
            [
                "\(bin)/pg_ctl", "-D", self.directory.appendingPathComponent("data").path,
                "-l", self.directory.appendingPathComponent("server.log").path, "-o", options, "-w", "-t", "30", "start",
            ],
            asUser: geteuid() == 0 ? "postgres" : nil
        )
    }

    /// Stops the server (every connection is cut), waits `downtime`, and starts it again on the
    /// same port with the same data: a database that goes away and comes back.
    public func restart(after downtime: Duration = .zero) throws {
        guard let bin = Self.binDirectory else { return }
        try Self.run(
            ["\(bin)/pg_ctl", "-D", self.directory.appendingPathComponent("data").path, "-m", "fast", "-w", "stop"],
            asUser: geteuid() == 0 ? "postgres" : nil
        )
        let seconds = Double(downtime.components.seconds) + Double(downtime.components.attoseconds) * 1e-18
        if seconds > 0 { Thread.sleep(forTimeInterval: seconds) }
        try self.startServer()
    }

    /// Creates database `name` (owned by the cluster's user).
    public func createDatabase(_ name: String) throws {
        guard let bin = Self.binDirectory else { return }
        try Self.run(["\(bin)/createdb", "-h", "127.0.0.1", "-p", "\(self.port)", "-U", self.user, name], asUser: nil)
    }

    public func url(database: String) -> String {
        "postgres://\(self.user)@127.0.0.1:\(self.port)/\(database)"
    }

    /// Stops the server at once and deletes the cluster.
    public func stop() {
        Self.stopAndDelete(self.directory)
    }

    /// Stops the server of the cluster in `directory` at once (if it runs) and deletes it.
    private static func stopAndDelete(_ directory: URL) {
        if let bin = Self.binDirectory {
            _ = try? Self.run(
                ["\(bin)/pg_ctl", "-D", directory.appendingPathComponent("data").path, "-m", "immediate", "-w", "stop"],
                asUser: geteuid() == 0 ? "postgres" : nil
            )
        }
        try? FileManager.default.removeItem(at: directory)
    }

    /// Runs a program to its end with `posix_spawn` and `waitpid`: Foundation's `Process`
    /// notices a program's end through descriptors its children inherit, and the server that
    /// `pg_ctl start` leaves running keeps them open, so `waitUntilExit()` never returned.
    /// Output goes to a file (read back for the error message), never to a pipe.
    @discardableResult
    static func run(_ arguments: [String], asUser user: String?) throws -> String {
        // Server programs must not start in a directory the postgres user cannot enter.
        let argv = ["/bin/sh", "-c", "cd / && exec \"$@\"", "sh"] + (user.map { ["/usr/sbin/runuser", "-u", $0, "--"] } ?? []) + arguments
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("haul-pg-run-\(UUID().uuidString).log").path
        defer { unlink(log) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let cArguments = argv.map { strdup($0) } + [nil]
        defer { for pointer in cArguments { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, argv[0], &actions, nil, cArguments, environ)
        guard spawned == 0 else { throw PostgresError("cannot run \(argv[0]): \(String(cString: strerror(spawned)))") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0, errno == EINTR {}
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        let exited = (status & 0x7f) == 0
        guard exited, (status >> 8) & 0xff == 0 else {
            throw PostgresError("\((arguments.first as NSString?)?.lastPathComponent ?? "?") failed (status \(status)): \(text.suffix(800))")
        }
        return text
    }

    public struct PostgresError: Error, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }
}
