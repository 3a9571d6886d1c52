import Foundation

/// A private PostgreSQL cluster on 127.0.0.1 for tests: `initdb` into a new temporary
/// directory, the server started with `pg_ctl` on a free port (its socket in that directory,
/// `fsync` off: a test cluster), stopped and deleted by ``stop()``. When the tests run as root
/// the cluster belongs to the `postgres` user (PostgreSQL refuses to run as root).
///
/// ``url(database:)`` is the `postgres://` URL of a database in it (``createDatabase(_:)``).
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
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-pg-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let asRoot = geteuid() == 0
        let owner = asRoot ? "postgres" : (ProcessInfo.processInfo.environment["USER"] ?? "haul")
        if asRoot {
            chmod(directory.path, 0o777)
            _ = try Self.run(["/bin/chown", "postgres:postgres", directory.path], asUser: nil)
        }
        let data = directory.appendingPathComponent("data").path
        try Self.run(["\(bin)/initdb", "-D", data, "-U", owner, "-A", "trust", "-E", "UTF8", "--no-sync"], asUser: asRoot ? "postgres" : nil)
        let port = try FaultFreePort.find()
        let options = "-p \(port) -h 127.0.0.1 -k \(directory.path) -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        try Self.run(
            ["\(bin)/pg_ctl", "-D", data, "-l", directory.appendingPathComponent("server.log").path, "-o", options, "-w", "-t", "30", "start"],
            asUser: asRoot ? "postgres" : nil
        )
        return LoopbackPostgres(directory: directory, port: port, user: owner)
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
        if let bin = Self.binDirectory {
            _ = try? Self.run(
                ["\(bin)/pg_ctl", "-D", self.directory.appendingPathComponent("data").path, "-m", "immediate", "-w", "stop"],
                asUser: geteuid() == 0 ? "postgres" : nil
            )
        }
        try? FileManager.default.removeItem(at: self.directory)
    }

    @discardableResult
    static func run(_ arguments: [String], asUser user: String?) throws -> String {
        let process = Process()
        if let user {
            process.executableURL = URL(fileURLWithPath: "/usr/sbin/runuser")
            process.arguments = ["-u", user, "--"] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: arguments[0])
            process.arguments = Array(arguments.dropFirst())
        }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        process.standardInput = FileHandle.nullDevice
        // Server programs must not inherit a directory the postgres user cannot enter.
        process.currentDirectoryURL = URL(fileURLWithPath: "/")
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw PostgresError("\((arguments.first as NSString?)?.lastPathComponent ?? "?") failed (\(process.terminationStatus)): \(text.suffix(800))")
        }
        return text
    }

    public struct PostgresError: Error, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }
}

/// A free TCP port on 127.0.0.1 (bound and released; a race with another process is unlikely
/// in a test run).
enum FaultFreePort {
    static func find() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw LoopbackPostgres.PostgresError("socket() failed") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw LoopbackPostgres.PostgresError("bind() failed") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else { throw LoopbackPostgres.PostgresError("getsockname() failed") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
