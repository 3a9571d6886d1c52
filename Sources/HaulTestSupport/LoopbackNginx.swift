import Foundation

/// nginx on 127.0.0.1 with TLS and HTTP/2, for tests of what only a real HTTP/2 server shows:
/// multiplexing, ranges, uploads (WebDAV `PUT`) and reset streams.
///
/// Serves `root` (files the test writes), `/slow/…` (the same files at `slowRate` bytes per
/// second per connection), `/up/…` (`PUT` stores into `uploads`), `/reset` (the stream is reset:
/// nginx's 444). The access log has one line per request: connection number, protocol, method,
/// URI, status, `Range`.
public final class LoopbackNginx: @unchecked Sendable {
    // @unchecked: `process` is set once at start and only read afterwards.
    public let directory: URL
    public let port: Int
    private let process: Process
    public var root: URL { self.directory.appendingPathComponent("www") }
    public var uploads: URL { self.directory.appendingPathComponent("up") }

    /// Whether nginx is installed (scripts/test installs it).
    public static var isAvailable: Bool { Self.executable != nil }

    static var executable: String? {
        ["/usr/sbin/nginx", "/usr/bin/nginx"].first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    private init(directory: URL, port: Int, process: Process) {
        self.directory = directory
        self.port = port
        self.process = process
    }

    /// Starts nginx presenting `certificate` (issued for 127.0.0.1), `http2` on or off.
    public static func start(certificate: TestCertificates.Identity, http2: Bool = true, slowRate: String = "400k") throws -> LoopbackNginx {
        guard let executable = Self.executable else { throw NginxError("nginx is not installed") }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-nginx-\(UUID().uuidString)")
        for name in ["www", "up", "tmp"] {
            let sub = directory.appendingPathComponent(name)
            try FileManager.default.createDirectory(at: sub, withIntermediateDirectories: true)
            // nginx's workers run as another user when the tests run as root.
            chmod(sub.path, 0o777)
        }
        chmod(directory.path, 0o755)
        let port = try Self.freePort()
        let base = directory.path
        let config = """
            daemon off;
            worker_processes 1;
            pid \(base)/nginx.pid;
            error_log \(base)/error.log;
            events { worker_connections 256; }
            http {
                log_format conn '$connection $server_protocol $request_method $uri $status "$http_range"';
                access_log \(base)/access.log conn;
                client_body_temp_path \(base)/tmp; proxy_temp_path \(base)/tmp; fastcgi_temp_path \(base)/tmp;
                uwsgi_temp_path \(base)/tmp; scgi_temp_path \(base)/tmp;
                keepalive_requests 10000;
                server {
                    listen 127.0.0.1:\(port) ssl\(http2 ? " http2" : "");
                    ssl_certificate \(certificate.certificatePath);
                    ssl_certificate_key \(certificate.keyPath);
                    root \(base)/www;
                    location /slow/ { alias \(base)/www/; limit_rate \(slowRate); }
                    location = /reset { return 444; }
                    location /up/ { root \(base); dav_methods PUT; create_full_put_path on; client_max_body_size 200m; }
                }
            }
            """
        let configPath = directory.appendingPathComponent("nginx.conf").path
        try config.write(toFile: configPath, atomically: true, encoding: .utf8)
        // The key must be readable by the workers too.
        chmod(certificate.keyPath, 0o644)
        // In the foreground (`daemon off`): a child this object stops, not a daemon to find.
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["-c", configPath, "-p", base]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let server = LoopbackNginx(directory: directory, port: port, process: process)
        for _ in 0..<300 where !server.isListening && process.isRunning { usleep(10_000) }
        guard server.isListening else { throw NginxError("nginx did not start: \((try? String(contentsOfFile: "\(base)/error.log", encoding: .utf8)) ?? "")") }
        return server
    }

    public func url(_ pathAndQuery: String) -> URL {
        URL(string: "https://127.0.0.1:\(self.port)\(pathAndQuery)")!
    }

    /// Writes `size` bytes of ``TestContent`` (`seed`) as `name` in the root.
    public func addFile(_ name: String, size: Int64, seed: UInt64) throws {
        try Data(TestContent.bytes(0..<size, seed: seed)).write(to: self.root.appendingPathComponent(name))
    }

    /// The access log so far, one entry per request.
    public var accessLog: [LogEntry] {
        let text = (try? String(contentsOf: self.directory.appendingPathComponent("access.log"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap(LogEntry.init)
    }

    public struct LogEntry: Sendable, Hashable {
        public var connection: Int
        public var protocolName: String
        public var method: String
        public var uri: String
        public var status: Int
        /// The request's `Range`, `nil` without one.
        public var range: String?

        init?(_ line: Substring) {
            let parts = line.split(separator: " ", maxSplits: 5)
            guard parts.count == 6, let connection = Int(parts[0]), let status = Int(parts[4]) else { return nil }
            self.connection = connection
            self.protocolName = String(parts[1])
            self.method = String(parts[2])
            self.uri = String(parts[3])
            self.status = status
            let range = parts[5].trimmingCharacters(in: CharacterSet(charactersIn: "\""))
            self.range = range == "-" || range.isEmpty ? nil : range
        }
    }

    /// Stops nginx (SIGTERM: a fast shutdown of master and worker) and removes its files.
    public func stop() {
        if self.process.isRunning { kill(self.process.processIdentifier, SIGTERM) }
        for _ in 0..<500 where self.process.isRunning { usleep(10_000) }
        try? FileManager.default.removeItem(at: self.directory)
    }

    deinit {
        if self.process.isRunning { kill(self.process.processIdentifier, SIGKILL) }
    }

    private var isListening: Bool {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(self.port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }

    static func freePort() throws -> Int {
        // A port the kernel picked, free again once the reservation goes.
        try RefusingPort().port
    }
}

public struct NginxError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}
