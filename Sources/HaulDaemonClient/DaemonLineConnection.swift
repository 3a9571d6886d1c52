import Foundation
import HaulCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A blocking connection to `hauld` for commands that ask and print: each request is written
/// and its answer read on the caller's thread, with plain system calls — no event loop, no
/// threads. `haul ls`, `haul add` and the other one-shot commands use it; what follows events
/// (`haul wait`, `haul watch`, a background session) uses ``BackgroundDaemonClient``.
///
/// Setting up SwiftNIO's event loops and a channel for one question cost `haul ls` about a
/// quarter of its CPU (two threads started, a bootstrap and a handler pipeline, each of their
/// types looked up by the Swift runtime for the first time).
///
/// The protocol is the same JSON lines: requests are answered in order, so a call reads lines
/// until the answer with its `id` (anything else — an event, a line it cannot read — is
/// skipped). Calls from several threads take turns.
package final class DaemonLineConnection: Sendable {
    private struct State {
        var nextID = 1
        /// Bytes read after the last whole line.
        var pending: [UInt8] = []
        var isClosed = false
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
            do {
                try self.write(line)
                let response = try self.readResponse(id: request.id, method: request.method, state: &state)
                if let error = response.error { throw BackgroundDaemonClient.Failure(description: error) }
                return response
            } catch let failure as ConnectionLost {
                // Nothing more can be read in order on this connection.
                state.isClosed = true
                Glibc.shutdown(self.descriptor, Int32(SHUT_RDWR))
                throw BackgroundDaemonClient.Failure(description: failure.description)
            }
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

    /// Reads lines until the answer to request `id`.
    private func readResponse(id: Int, method: DaemonRequest.Method, state: inout State) throws -> DaemonResponse {
        let deadline = ContinuousClock.now + self.timeout
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        var searchFrom = 0
        while true {
            // Every whole line read so far, in order; the bytes of those read go in one step
            // (line by line, a long run of events before the answer was moved once per line).
            var lineStart = 0
            defer { state.pending.removeSubrange(..<lineStart) }
            while let newline = state.pending[max(searchFrom, lineStart)...].firstIndex(of: UInt8(ascii: "\n")) {
                let response = state.pending.withUnsafeBytes { bytes in
                    DaemonServerLine.decode(line: UnsafeRawBufferPointer(rebasing: bytes[lineStart..<newline]))?.response
                }
                lineStart = newline + 1
                if let response, response.id == id { return response }
            }
            searchFrom = state.pending.count - lineStart
            let left = deadline - ContinuousClock.now
            guard left > .zero else { throw ConnectionLost(description: "hauld did not answer \(method.rawValue) within \(self.timeout)") }
            var poller = pollfd(fd: self.descriptor, events: Int16(POLLIN), revents: 0)
            let milliseconds = Int32(clamping: left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1)
            let ready = poll(&poller, 1, milliseconds)
            if ready < 0 {
                if errno == EINTR { continue }
                throw ConnectionLost(description: "cannot read from hauld: \(String(cString: strerror(errno)))")
            }
            if ready == 0 { continue }
            let count = chunk.withUnsafeMutableBytes { recv(self.descriptor, $0.baseAddress!, $0.count, 0) }
            if count < 0 {
                if errno == EINTR { continue }
                throw ConnectionLost(description: "cannot read from hauld: \(String(cString: strerror(errno)))")
            }
            if count == 0 { throw ConnectionLost(description: "hauld closed the connection") }
            state.pending.append(contentsOf: chunk[..<count])
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
