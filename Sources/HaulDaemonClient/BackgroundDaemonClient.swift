import Foundation
import HaulCore
import NIOCore
import NIOPosix
import Synchronization

/// The connection of a background session to `hauld`: JSON lines over the daemon's Unix
/// socket. Requests are answered in order; events are handed to ``onEvent(_:)``'s handler on an
/// event-loop thread, in the order the daemon sent them.
///
/// `package`: the tests talk to the daemon through it too. The `haul` command, which asks and
/// waits on one thread, uses ``DaemonLineConnection``.
package final class BackgroundDaemonClient: Sendable {
    package struct Failure: Error, CustomStringConvertible {
        package var description: String

        package init(description: String) {
            self.description = description
        }
    }

    private struct State {
        var nextID = 1
        var pending: [Int: @Sendable (Result<DaemonResponse, any Error>) -> Void] = [:]
        var isClosed = false
    }

    /// The handlers, as fields of a struct: a closure kept as a `Mutex`'s own (generic) value
    /// was wrapped in two more reabstraction thunks by every `withLock { $0 }` that read it (the
    /// read goes through the `inout` and is stored back), so the n-th event went through 2n
    /// thunks, each copying the event: `haul wait` on 1,000 small files spent over a second of
    /// CPU, and a long-lived session would end in a stack overflow.
    private struct Handlers {
        var onEvent: (@Sendable (DaemonEvent) -> Void)?
        var onClose: (@Sendable () -> Void)?
    }

    private let channel: any Channel
    private let state = Mutex(State())
    private let handlers = Mutex(Handlers())

    private init(channel: any Channel) {
        self.channel = channel
    }

    /// Connects to the daemon of `paths`, starting it when none runs (as launchd starts
    /// `nsurlsessiond`). Blocks for at most a few seconds.
    package static func connect(paths: DaemonPaths) throws -> BackgroundDaemonClient {
        try DaemonLauncher.connectStarting(paths: paths, Self.connectOnce(paths:))
    }

    /// Connects to a running daemon; fails at once when none listens.
    package static func connectOnce(paths: DaemonPaths) throws -> BackgroundDaemonClient {
        let box = Mutex<BackgroundDaemonClient?>(nil)
        let channel = try ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(LineDecoder()))
                    try channel.pipeline.syncOperations.addHandler(ClientHandler { line in
                        box.withLock { $0 }?.received(line)
                    })
                }
            }
            .connect(unixDomainSocketPath: paths.socketPath)
            .wait()
        let client = BackgroundDaemonClient(channel: channel)
        box.withLock { $0 = client }
        // The one way a close is noticed: the close future tells of one that already happened
        // too (a daemon killed right after accepting the connection, before the client was in
        // the box; its handler's close went unnoticed and every request waited 30 s).
        channel.closeFuture.whenComplete { _ in client.closed() }
        return client
    }

    /// Sends `request` and waits for its answer, blocking the calling thread (never call it
    /// on an event loop). Used where URLSession's API is synchronous and durability is
    /// promised on return, such as `resume()`.
    ///
    /// - Throws: ``Failure`` when the daemon answered with an error or the connection is gone.
    package func call(_ request: DaemonRequest) throws -> DaemonResponse {
        let semaphore = DispatchSemaphore(value: 0)
        let result = Mutex<Result<DaemonResponse, any Error>?>(nil)
        self.send(request) { outcome in
            result.withLock { $0 = outcome }
            semaphore.signal()
        }
        if semaphore.wait(timeout: .now() + 30) == .timedOut {
            throw Failure(description: "hauld did not answer \(request.method.rawValue) within 30 s")
        }
        let response = try result.withLock { $0! }.get()
        if let error = response.error { throw Failure(description: error) }
        return response
    }

    private func send(_ request: DaemonRequest, completion: @escaping @Sendable (Result<DaemonResponse, any Error>) -> Void) {
        var request = request
        let closed = self.state.withLock { state -> Bool in
            guard !state.isClosed else { return true }
            request.id = state.nextID
            state.nextID += 1
            state.pending[request.id] = completion
            return false
        }
        if closed {
            completion(.failure(Failure(description: "the connection to hauld is closed")))
            return
        }
        let line: [UInt8]
        do {
            line = try request.lineForDaemon()
        } catch {
            // Nothing was sent: the call fails now instead of waiting out its timeout.
            _ = self.state.withLock { $0.pending.removeValue(forKey: request.id) }
            completion(.failure(error))
            return
        }
        self.channel.writeAndFlush(ByteBuffer(bytes: line), promise: nil)
    }

    package func close() {
        self.channel.close(promise: nil)
    }

    /// `handler` gets every event, on an event-loop thread, in the order the daemon sent them.
    package func onEvent(_ handler: @escaping @Sendable (DaemonEvent) -> Void) {
        self.handlers.withLock { $0.onEvent = handler }
    }

    /// `handler` runs once when the connection is gone.
    package func onClose(_ handler: @escaping @Sendable () -> Void) {
        self.handlers.withLock { $0.onClose = handler }
    }

    private func received(_ line: DaemonServerLine) {
        if let response = line.response {
            let completion = self.state.withLock { $0.pending.removeValue(forKey: response.id) }
            completion?(.success(response))
        } else if let event = line.event {
            self.handlers.withLock { $0.onEvent }?(event)
        }
    }

    /// The connection is gone: pending requests fail, `onClose` is called (once).
    private func closed() {
        let waiting = self.state.withLock { state -> [@Sendable (Result<DaemonResponse, any Error>) -> Void]? in
            guard !state.isClosed else { return nil }
            state.isClosed = true
            defer { state.pending = [:] }
            return Array(state.pending.values)
        }
        guard let waiting else { return }
        for completion in waiting { completion(.failure(Failure(description: "hauld closed the connection"))) }
        self.handlers.withLock { $0.onClose }?()
    }
}

/// Splits the daemon's byte stream into lines (``LineScanner``: each byte searched once however
/// many reads a long answer takes; no limit on an answer's length).
private struct LineDecoder: ByteToMessageDecoder {
    typealias InboundOut = ByteBuffer

    private var scanner = LineScanner(maximumLength: .max)

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let line = try self.scanner.nextLine(in: &buffer) else { return .needMoreData }
        context.fireChannelRead(self.wrapInboundOut(line))
        return .continue
    }
}

private final class ClientHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private let onLine: (DaemonServerLine) -> Void
    init(onLine: @escaping (DaemonServerLine) -> Void) {
        self.onLine = onLine
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = self.unwrapInboundIn(data)
        // No line of the daemon's nests deeply; one that does is not the daemon's (ignored).
        if let line = buffer.withUnsafeReadableBytes({ DaemonServerLine.decode(line: $0) }) {
            self.onLine(line)
        }
    }
}

/// Starts `hauld` in its own session (so that Ctrl-C or the end of the client does not reach
/// it), with its output going to `hauld.log` in the data directory.
enum DaemonLauncher {
    /// A connection made by `connectOnce`, after starting the daemon of `paths` when none
    /// answers (as launchd starts `nsurlsessiond`): tried again every 20 ms for up to 5 s.
    static func connectStarting<Connection>(paths: DaemonPaths, _ connectOnce: (DaemonPaths) throws -> Connection) throws -> Connection {
        if let connection = try? connectOnce(paths) { return connection }
        try self.launch(paths: paths)
        var lastError: any Error = BackgroundDaemonClient.Failure(description: "hauld did not start")
        for _ in 0..<250 {
            do { return try connectOnce(paths) } catch { lastError = error }
            usleep(20_000)
        }
        throw BackgroundDaemonClient.Failure(description: "cannot reach hauld at \(paths.socketPath): \(lastError)")
    }

    static func launch(paths: DaemonPaths) throws {
        guard let executable = self.executable() else {
            throw BackgroundDaemonClient.Failure(
                description: "hauld is not running and its executable was not found (set HAUL_DAEMON_PATH or put hauld on PATH)"
            )
        }
        try FileManager.default.createDirectory(at: paths.dataDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        if !FileManager.default.fileExists(atPath: paths.logPath) {
            _ = FileManager.default.createFile(atPath: paths.logPath, contents: nil, attributes: [.posixPermissions: 0o600])
        }
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: paths.logPath))
        log.seekToEndOfFile()
        let process = Process()
        let arguments = ["--data-dir", paths.dataDirectory.path, "--runtime-dir", paths.runtimeDirectory.path]
        if let setsid = ["/usr/bin/setsid", "/bin/setsid"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) {
            process.executableURL = URL(fileURLWithPath: setsid)
            process.arguments = [executable] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = arguments
        }
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = log
        process.standardError = log
        try process.run()
    }

    /// `$HAUL_DAEMON_PATH`, else `hauld` beside the running executable, else on `PATH`.
    static func executable() -> String? {
        let environment = ProcessInfo.processInfo.environment
        if let explicit = environment["HAUL_DAEMON_PATH"], FileManager.default.isExecutableFile(atPath: explicit) {
            return explicit
        }
        let ownDirectory = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
        let sibling = ownDirectory.appendingPathComponent("hauld").path
        if FileManager.default.isExecutableFile(atPath: sibling) { return sibling }
        for directory in (environment["PATH"] ?? "").split(separator: ":") {
            let candidate = "\(directory)/hauld"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }
}
