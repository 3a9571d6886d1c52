import Foundation
import HaulTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Runs the built `haul` executable as a user would, capturing its output.
struct HaulProcess {
    struct Result {
        var status: Int32
        var standardOutput: String
        var standardError: String
    }

    /// The `haul` binary beside the test bundle (`swift build` puts both in the same folder).
    static var executable: URL {
        let bundle = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        for candidate in [bundle, bundle.deletingLastPathComponent(), Bundle.main.bundleURL.deletingLastPathComponent()] {
            let url = candidate.appendingPathComponent("haul")
            if FileManager.default.isExecutableFile(atPath: url.path) { return url }
        }
        return bundle.appendingPathComponent("haul")
    }

    let process = Process()
    private let outputPipe = Pipe()
    private let errorPipe = Pipe()

    /// The user `nobody` (65534), for runs as an unprivileged user.
    static let unprivilegedID = 65534

    /// Written to the program's standard input once it started (else it reads /dev/null).
    private let input: String?

    /// `unprivileged`: run as `nobody` through `setpriv` (the test must run as root).
    /// `input`: the program's standard input.
    init(_ arguments: [String], directory: URL, environment: [String: String] = [:], unprivileged: Bool = false, input: String? = nil) {
        self.input = input
        if !environment.isEmpty {
            self.process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        }
        if unprivileged {
            self.process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            let id = Self.unprivilegedID
            self.process.arguments = ["--reuid=\(id)", "--regid=\(id)", "--clear-groups", Self.executable.path] + arguments
        } else {
            self.process.executableURL = Self.executable
            self.process.arguments = arguments
        }
        self.process.currentDirectoryURL = directory
        self.process.standardOutput = self.outputPipe
        self.process.standardError = self.errorPipe
        self.process.standardInput = input == nil ? FileHandle.nullDevice : self.inputPipe
    }

    private let inputPipe = Pipe()

    func start() throws {
        try self.process.run()
        if let input {
            self.inputPipe.fileHandleForWriting.write(Data(input.utf8))
            try self.inputPipe.fileHandleForWriting.close()
        }
    }

    /// Sends SIGINT, as Ctrl-C does.
    func interrupt() {
        kill(self.process.processIdentifier, SIGINT)
    }

    func wait() async -> Result {
        let output = self.outputPipe.fileHandleForReading
        let error = self.errorPipe.fileHandleForReading
        let process = self.process
        async let outData = blocking { output.readDataToEndOfFile() }
        async let errData = blocking { error.readDataToEndOfFile() }
        let (out, err) = await (outData, errData)
        await blocking { process.waitUntilExit() }
        return Result(
            status: process.terminationStatus,
            standardOutput: String(decoding: out, as: UTF8.self),
            standardError: String(decoding: err, as: UTF8.self)
        )
    }

    /// Runs `haul ARGUMENTS` until `condition` holds (the download is surely under way), then
    /// presses Ctrl-C and waits for it to end. `reached`: whether the condition came in time.
    static func interrupt(
        _ arguments: [String],
        directory: URL,
        unprivileged: Bool = false,
        when condition: () -> Bool
    ) async throws -> (result: Result, reached: Bool) {
        let process = HaulProcess(arguments, directory: directory, unprivileged: unprivileged)
        try process.start()
        let reached = await waitUntil(condition)
        process.interrupt()
        return (await process.wait(), reached)
    }

    /// Runs `haul ARGUMENTS` to the end.
    static func run(_ arguments: [String], directory: URL, environment: [String: String] = [:], unprivileged: Bool = false, input: String? = nil) async throws -> Result {
        let process = HaulProcess(arguments, directory: directory, environment: environment, unprivileged: unprivileged, input: input)
        try process.start()
        return await process.wait()
    }
}

func makeTemporaryDirectory() throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("haul-cli-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}

func listing(_ directory: URL) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).sorted()
}

@discardableResult
func waitUntil(timeout: Duration = .seconds(20), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return condition()
}

/// The size of the file at `path`, or `nil` when there is none.
func fileSize(_ path: String) -> Int64? {
    (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.int64Value
}

