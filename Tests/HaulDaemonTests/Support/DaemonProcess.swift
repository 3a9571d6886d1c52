import Foundation
import HaulTestSupport
import HaulCore
#if canImport(Glibc)
import Glibc
#endif

/// Runs `hauld` as a child process on a private data and socket directory.
final class DaemonProcess: @unchecked Sendable {
    // @unchecked: `process` is replaced only by the test that owns this object, between awaits.
    let dataDirectory: URL
    let runtimeDirectory: URL
    private(set) var process: Process?

    static var executable: URL {
        let bundle = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        for candidate in [bundle, bundle.deletingLastPathComponent()] {
            let url = candidate.appendingPathComponent("hauld")
            if FileManager.default.isExecutableFile(atPath: url.path) { return url }
        }
        return bundle.appendingPathComponent("hauld")
    }

    init() throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("hauld-test-\(UUID().uuidString)")
        self.dataDirectory = base.appendingPathComponent("data")
        self.runtimeDirectory = base.appendingPathComponent("run")
    }

    var socketPath: String { self.runtimeDirectory.appendingPathComponent("hauld.sock").path }

    /// Starts the daemon and waits until its socket answers.
    func start(extraArguments: [String] = []) async throws {
        let process = Process()
        process.executableURL = Self.executable
        process.arguments = ["--data-dir", self.dataDirectory.path, "--runtime-dir", self.runtimeDirectory.path, "--web-port", "0"] + extraArguments
        process.standardOutput = FileHandle.nullDevice
        let log = self.dataDirectory.deletingLastPathComponent().appendingPathComponent("hauld.log")
        try? FileManager.default.createDirectory(at: log.deletingLastPathComponent(), withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        let handle = try FileHandle(forWritingTo: log)
        handle.seekToEndOfFile()
        process.standardError = handle
        try process.run()
        self.process = process
        for _ in 0..<500 {
            if let client = try? DaemonTestClient(socketPath: self.socketPath) {
                if (try? await client.request(.ping))?.processID != nil {
                    client.close()
                    return
                }
                client.close()
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw DaemonTestError("hauld did not start")
    }

    /// SIGKILL, and wait for the process to be gone.
    func kill9() async {
        guard let process = self.process else { return }
        kill(process.processIdentifier, SIGKILL)
        await blocking { process.waitUntilExit() }
        self.process = nil
    }

    /// SIGTERM (graceful), and wait.
    func terminate() async -> Int32 {
        guard let process = self.process else { return 0 }
        process.terminate()
        await blocking { process.waitUntilExit() }
        self.process = nil
        return process.terminationStatus
    }

    /// A test that fails half-way must not leave a daemon behind: the child is killed, and a
    /// daemon the library started (found through the lock file) is asked to stop.
    deinit {
        if let process = self.process, process.isRunning { kill(process.processIdentifier, SIGKILL) }
        let lock = self.dataDirectory.appendingPathComponent("hauld.lock").path
        if let text = try? String(contentsOfFile: lock, encoding: .utf8),
            let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)), pid > 0,
            let command = try? String(contentsOfFile: "/proc/\(pid)/cmdline", encoding: .utf8),
            command.contains(self.dataDirectory.path)
        {
            kill(pid, SIGTERM)
        }
    }

    func cleanUp() {
        try? FileManager.default.removeItem(at: self.dataDirectory.deletingLastPathComponent())
    }
}

struct DaemonTestError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A blocking JSON-lines client of the daemon socket (reads run on Dispatch threads).
final class DaemonTestClient: @unchecked Sendable {
    // @unchecked: `buffer` is only touched by `readLine`, which the test calls sequentially.
    private let descriptor: Int32
    private var buffer = [UInt8]()
    private var nextID = 100

    init(socketPath: String) throws {
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            let bytes = Array(socketPath.utf8)
            for (index, byte) in bytes.enumerated() where index < raw.count - 1 { raw[index] = byte }
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result == 0 else {
            Glibc.close(descriptor)
            throw DaemonTestError("cannot connect to \(socketPath)")
        }
        self.descriptor = descriptor
    }

    func close() { Glibc.close(self.descriptor) }

    func sendRaw(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { _ = write(self.descriptor, $0.baseAddress, $0.count) }
    }

    func send(_ request: DaemonRequest) throws {
        var data = Array(try JSONEncoder().encode(request))
        data.append(UInt8(ascii: "\n"))
        self.sendRaw(data)
    }

    /// The next line from the daemon, or nil at end of stream.
    func readLine() async -> DaemonServerLine? {
        guard let line = await self.readRawLine() else { return nil }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601  // as hauld encodes them
        return try? decoder.decode(DaemonServerLine.self, from: Data(line))
    }

    /// The next line's bytes (without the newline), or nil at end of stream.
    func readRawLine() async -> [UInt8]? {
        await blocking {
            while true {
                if let newline = self.buffer.firstIndex(of: UInt8(ascii: "\n")) {
                    let line = Array(self.buffer[..<newline])
                    self.buffer.removeSubrange(...newline)
                    return line
                }
                var chunk = [UInt8](repeating: 0, count: 65536)
                let count = chunk.withUnsafeMutableBytes { read(self.descriptor, $0.baseAddress, $0.count) }
                if count <= 0 { return nil }
                self.buffer.append(contentsOf: chunk[0..<count])
            }
        }
    }

    /// Sends `request` and returns its response; events read meanwhile go to `events`.
    func request(_ request: DaemonRequest, events: ((DaemonEvent) -> Void)? = nil) async throws -> DaemonResponse {
        var request = request
        self.nextID += 1
        request.id = self.nextID
        try self.send(request)
        while let line = await self.readLine() {
            if let response = line.response, response.id == request.id { return response }
            if let event = line.event { events?(event) }
        }
        throw DaemonTestError("connection closed before the response to \(request.method)")
    }
}


/// Short forms of the requests the tests send.
extension DaemonRequest {
    static let ping = DaemonRequest(.ping)

    static func attach(_ session: String) -> DaemonRequest {
        DaemonRequest(.attach(.init(session: session)))
    }

    static func download(_ session: String, _ url: URL, isDiscretionary: Bool = false, connections: Int? = nil) -> DaemonRequest {
        var options = DaemonRequest.TaskOptions(isDiscretionary: isDiscretionary)
        options.connections = connections
        return DaemonRequest(.createDownload(.init(session: session, source: .url(url, headers: HTTPHeaderFields()), options: options)))
    }

    /// `taskID` from an earlier answer; a missing one (that answer failed) asks for task -1.
    static func resume(_ session: String, _ taskID: Int64?) -> DaemonRequest {
        DaemonRequest(.resume(.init(session: session, taskID: taskID ?? -1)))
    }

    static func cancel(_ session: String, _ taskID: Int64?, produceResumeData: Bool = false) -> DaemonRequest {
        DaemonRequest(.cancel(.init(session: session, taskID: taskID ?? -1, produceResumeData: produceResumeData)))
    }

    static func acknowledge(_ session: String, _ eventID: Int64?) -> DaemonRequest {
        DaemonRequest(.acknowledge(.init(session: session, eventID: eventID ?? -1)))
    }

    static func listTasks(_ session: String) -> DaemonRequest {
        DaemonRequest(.listTasks(.init(session: session)))
    }
}
