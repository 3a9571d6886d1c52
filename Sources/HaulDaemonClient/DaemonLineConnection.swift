import Foundation
import HaulCore
import NIOCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A blocking connection to `hauld` for the `haul` command: each request is written and its
/// answer read on the caller's thread, with plain system calls — no event loop, no threads;
/// events (after `queueSubscribe`) are read the same way, when the caller asks for them
/// (``readEvents(timeout:)``), each handed to ``onEvent(_:)``'s handler. A background session
/// of the library, whose events come while the app does other things, uses
/// ``BackgroundDaemonClient``.
///
/// Setting up SwiftNIO's event loops and a channel for one question cost `haul ls` about a
/// quarter of its CPU (two threads started, a bootstrap and a handler pipeline, each of their
/// types looked up by the Swift runtime for the first time); `haul wait` handed each event from
/// the loop's thread to its own.
///
/// The protocol is the same JSON lines: requests are answered in order, so a call reads lines
/// until the answer with its `id`; an event meanwhile goes to the handler, a line it cannot
/// read is skipped. Calls from several threads take turns.
package final class DaemonLineConnection: Sendable {
    private struct State {
        var nextID = 1
        /// Bytes read after the last whole line.
        var pending = ByteBuffer()
        var isClosed = false
        /// Gets every event read, in order (a field of a struct: see ``BackgroundDaemonClient``'s
        /// handlers for why not a `Mutex` of its own).
        var onEvent: (@Sendable (DaemonEvent) -> Void)?
    }

    private let descriptor: Int32
    private let state = Mutex(State())
    /// How long a call waits for its answer.
    private let timeout: Duration

    private init(descriptor: Int32, timeout: Duration) {
        self.descriptor = descriptor
        self.timeout = timeout
    }

    deinit {
        self.close()
    }

    /// Connects to the daemon of `paths`, starting it when none runs. Blocks for at most a
    /// few seconds.
    package static func connect(paths: DaemonPaths, timeout: Duration = .seconds(30)) throws -> DaemonLineConnection {
        try DaemonLauncher.connectStarting(paths: paths) { try Self.connectOnce(paths: $0, timeout: timeout) }
    }

    /// Connects to a running daemon; fails at once when none listens.
    package static func connectOnce(paths: DaemonPaths, timeout: Duration = .seconds(30)) throws -> DaemonLineConnection {
        let path = paths.socketPath
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard path.utf8.count < capacity else {
            throw BackgroundDaemonClient.Failure(description: "the socket path \(path) is longer than \(capacity - 1) bytes")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { bytes in
            bytes.copyBytes(from: path.utf8)
            bytes[path.utf8.count] = 0
        }
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw Self.failure("cannot make a socket") }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else {
            let failure = Self.failure("cannot connect to \(path)")
            Glibc.close(descriptor)
            throw failure
        }
        return DaemonLineConnection(descriptor: descriptor, timeout: timeout)
    }

    /// Sends `request` (its `id` is chosen here) and waits for its answer.
    ///
    /// - Throws: ``BackgroundDaemonClient/Failure`` when the daemon answered with an error, the
    ///   request is too long for the daemon, the connection is gone or no answer came in time.
    package func call(_ request: DaemonRequest) throws -> DaemonResponse {
        try self.state.withLock { state in
            guard !state.isClosed else { throw BackgroundDaemonClient.Failure(description: "the connection to hauld is closed") }
            var request = request
            request.id = state.nextID
            state.nextID += 1
            let line = try request.lineForDaemon()
            let response = try self.whileOpen(&state) { state in
                try self.write(line)
                var answer: DaemonResponse?
                let answered = try self.readLines(&state, until: .now + self.timeout, returnsWhenDrained: false) { line in
                    guard let response = line.response, response.id == request.id else { return false }
                    answer = response
                    return true
                }
                guard answered, let answer else { throw ConnectionLost(description: "hauld did not answer \(request.method.rawValue) within \(self.timeout)") }
                return answer
            }
            if let error = response.error { throw BackgroundDaemonClient.Failure(description: error) }
            return response
        }
    }

    /// `handler` gets every event read from now on (while a call waits for its answer, and by
    /// ``readEvents(timeout:)``), in the order the daemon sent them, on the reading thread, with
    /// this connection's calls held: it must not call the connection.
    package func onEvent(_ handler: @escaping @Sendable (DaemonEvent) -> Void) {
        self.state.withLock { $0.onEvent = handler }
    }

    /// Reads the events that come within `timeout`, each to ``onEvent(_:)``'s handler: returns
    /// as soon as some were read and no more bytes wait, or when the time is up.
    ///
    /// - Throws: ``BackgroundDaemonClient/Failure`` when the connection is gone (closed by the
    ///   daemon, or by ``close()``).
    package func readEvents(timeout: Duration) throws {
        try self.state.withLock { state in
            guard !state.isClosed else { throw BackgroundDaemonClient.Failure(description: "the connection to hauld is closed") }
            try self.whileOpen(&state) { state in
                _ = try self.readLines(&state, until: .now + timeout, returnsWhenDrained: true) { _ in false }
            }
        }
    }

    /// Runs `body`; a connection lost in it closes this one for good (nothing more can be read
    /// in order) and is thrown as a ``BackgroundDaemonClient/Failure``.
    private func whileOpen<T>(_ state: inout State, _ body: (inout State) throws -> T) throws -> T {
        do {
            return try body(&state)
        } catch let failure as ConnectionLost {
            state.isClosed = true
            Glibc.shutdown(self.descriptor, Int32(SHUT_RDWR))
            throw BackgroundDaemonClient.Failure(description: failure.description)
        }
    }

    /// Closes the connection (later calls fail). Safe to call more than once.
    package func close() {
        self.state.withLock { $0.isClosed = true }
        // The descriptor is closed once: `deinit` calls this too.
        if self.closedDescriptor.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged {
            Glibc.close(self.descriptor)
        }
    }

    private let closedDescriptor = Atomic<Bool>(false)

    /// The connection broke or the daemon went quiet: the call fails and so does every later one.
    private struct ConnectionLost: Error, CustomStringConvertible {
        var description: String
    }

    private func write(_ line: [UInt8]) throws {
        try line.withUnsafeBytes { bytes in
            var offset = 0
            while offset < bytes.count {
                // MSG_NOSIGNAL: a daemon gone meanwhile is an error here, not a SIGPIPE that ends `haul`.
                let sent = send(self.descriptor, bytes.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
                if sent < 0 {
                    if errno == EINTR { continue }
                    throw ConnectionLost(description: "cannot write to hauld: \(String(cString: strerror(errno)))")
                }
                offset += sent
            }
        }
    }

    /// Reads whole lines, in order: an event to the handler, each line to `stop`, until `stop`
    /// says so (`true`), `deadline` passes (`false`), or — `returnsWhenDrained` — some lines were
    /// read and no more bytes wait (`false`). Bytes after the last line read stay for the next
    /// reader.
    private func readLines(
        _ state: inout State,
        until deadline: ContinuousClock.Instant,
        returnsWhenDrained: Bool,
        stop: (DaemonServerLine) -> Bool
    ) throws -> Bool {
        // Each byte searched for a newline once, however many reads a long answer takes.
        var scanner = LineScanner(maximumLength: .max)
        var readAny = false
        while true {
            while let bytes = try scanner.nextLine(in: &state.pending) {
                readAny = true
                guard let line = bytes.withUnsafeReadableBytes({ DaemonServerLine.decode(line: $0) }) else { continue }
                if let event = line.event { state.onEvent?(event) }
                if stop(line) { return true }
            }
            // Drained: nothing more waits to be read.
            let wait = readAny && returnsWhenDrained ? Duration.zero : deadline - ContinuousClock.now
            guard wait > .zero || (readAny && returnsWhenDrained) else { return false }
            var poller = pollfd(fd: self.descriptor, events: Int16(POLLIN), revents: 0)
            let milliseconds = wait <= .zero ? 0 : Int32(clamping: wait.components.seconds * 1000 + wait.components.attoseconds / 1_000_000_000_000_000 + 1)
            let ready = poll(&poller, 1, milliseconds)
            if ready < 0 {
                if errno == EINTR { continue }
                throw ConnectionLost(description: "cannot read from hauld: \(String(cString: strerror(errno)))")
            }
            if ready == 0 {
                if readAny && returnsWhenDrained { return false }
                continue
            }
            // The lines read go in one step, before the next read (not one move per line).
            state.pending.discardReadBytes()
            var count = 0
            state.pending.writeWithUnsafeMutableBytes(minimumWritableBytes: 64 << 10) { free in
                count = recv(self.descriptor, free.baseAddress!, free.count, 0)
                return max(count, 0)
            }
            if count < 0 {
                if errno == EINTR { continue }
                throw ConnectionLost(description: "cannot read from hauld: \(String(cString: strerror(errno)))")
            }
            if count == 0 { throw ConnectionLost(description: "hauld closed the connection") }
        }
    }

    private static func failure(_ what: String) -> BackgroundDaemonClient.Failure {
        BackgroundDaemonClient.Failure(description: "\(what): \(String(cString: strerror(errno)))")
    }
}

extension DaemonRequest {
    /// The request as one line for the daemon's socket, newline included.
    ///
    /// - Throws: ``BackgroundDaemonClient/Failure`` when it cannot be encoded, or when it is
    ///   longer than the daemon takes (the daemon would refuse it and close the connection):
    ///   said here, with nothing sent. The limit is the line's before its newline, as the
    ///   daemon counts.
    func lineForDaemon() throws(BackgroundDaemonClient.Failure) -> [UInt8] {
        let line: [UInt8]
        do {
            line = try self.encodedLine()
        } catch {
            throw BackgroundDaemonClient.Failure(description: "cannot encode \(self.method.rawValue): \(error)")
        }
        let length = line.count - 1
        guard length <= DaemonProtocol.maximumLineLength else {
            throw BackgroundDaemonClient.Failure(
                description: "\(self.method.rawValue) takes \(length) bytes, more than one request to hauld may carry (\(DaemonProtocol.maximumLineLength))"
            )
        }
        return line
    }
}
