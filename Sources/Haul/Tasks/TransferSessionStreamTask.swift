import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HaulCore
import HaulEngine
import NIOCore
import NIOSSL
import Synchronization

/// A TCP connection to a host, read and written in pieces, as `URLSessionStreamTask` (which
/// Foundation on Linux lacks): for protocols that are not HTTP, with TLS started on demand
/// (``startSecureConnection()``) and judged by the session delegate's server-trust challenge.
///
/// Reads complete in the order they were asked for, writes likewise; calls made before
/// ``resume()`` wait for the connection. The task completes (`didCompleteWithError`) when it
/// is cancelled, when connecting fails, or once both directions are closed.
public final class TransferSessionStreamTask: TransferSessionTask, @unchecked Sendable {
    /// The host and port this task connects to.
    public let host: String
    public let port: Int

    private struct StreamState {
        var connection: Task<StreamConnection, any Error>?
        var readClosed = false
        var writeClosed = false
        var completed = false
    }

    private let stream = Mutex(StreamState())
    /// Settled once: with the connection, or with the error that ended the task first.
    /// Reads (inbound) and writes (outbound), each in order, once connected.
    private let lanes = ConnectionLanes<StreamConnection>()

    init(session: TransferSession, identifier: Int, host: String, port: Int) {
        self.host = host
        self.port = port
        var components = URLComponents()
        components.scheme = "tcp"
        components.host = host
        components.port = port
        super.init(session: session, identifier: identifier, kind: .data, request: components.url.map { URLRequest(url: $0) })
    }

    // MARK: - Reading and writing

    /// Reads at least `minBytes` (fewer only at the end of input) and at most `maxBytes`.
    /// `completionHandler` gets the data (`nil` at the end with nothing left), whether the end
    /// of input was reached, and an error (`timedOut` after `timeout` seconds without enough
    /// data; `timeout` ≤ 0 waits forever). Called once, on the delegate queue.
    public func readData(
        ofMinLength minBytes: Int,
        maxLength maxBytes: Int,
        timeout: TimeInterval,
        completionHandler: @escaping @Sendable (Data?, Bool, (any Error)?) -> Void
    ) {
        let session = self.session
        self.enqueue(onReads: true) { connection in
            do {
                let (data, atEOF) = try await connection.read(min: minBytes, max: maxBytes, timeout: Self.timeAmount(timeout))
                if atEOF { self.readEnded() }
                session.enqueueDelegateCall { _ in completionHandler(data, atEOF, nil) }
            } catch {
                session.enqueueDelegateCall { _ in completionHandler(nil, false, error) }
            }
        } failed: { error in
            session.enqueueDelegateCall { _ in completionHandler(nil, false, error) }
        }
    }

    /// Writes `data`; `completionHandler` is called once it is handed to the system (or with
    /// the error), on the delegate queue. `timeout` ≤ 0 waits forever.
    public func write(_ data: Data, timeout: TimeInterval, completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
        let session = self.session
        self.enqueue(onReads: false) { connection in
            do {
                try await connection.write(data, timeout: Self.timeAmount(timeout))
                session.enqueueDelegateCall { _ in completionHandler(nil) }
            } catch {
                session.enqueueDelegateCall { _ in completionHandler(error) }
            }
        } failed: { error in
            session.enqueueDelegateCall { _ in completionHandler(error) }
        }
    }

    /// ``readData(ofMinLength:maxLength:timeout:completionHandler:)`` as an async call.
    public func readData(ofMinLength minBytes: Int, maxLength maxBytes: Int, timeout: TimeInterval) async throws -> (Data?, Bool) {
        let result: UncheckedSendable<(Data?, Bool, (any Error)?)> = await withCheckedContinuation { continuation in
            self.readData(ofMinLength: minBytes, maxLength: maxBytes, timeout: timeout) { data, atEOF, error in
                continuation.resume(returning: UncheckedSendable((data, atEOF, error)))
            }
        }
        if let error = result.value.2 { throw error }
        return (result.value.0, result.value.1)
    }

    /// ``write(_:timeout:completionHandler:)`` as an async call.
    public func write(_ data: Data, timeout: TimeInterval) async throws {
        let error: UncheckedSendable<(any Error)?> = await withCheckedContinuation { continuation in
            self.write(data, timeout: timeout) { continuation.resume(returning: UncheckedSendable($0)) }
        }
        if let error = error.value { throw error }
    }

    /// Stops reading: later reads end at once.
    public func closeRead() {
        self.enqueue(onReads: true) { connection in
            connection.closeRead()
            self.readEnded()
        } failed: { _ in }
    }

    /// Ends the output (after the writes already asked for); the peer sees end of input.
    public func closeWrite() {
        self.enqueue(onReads: false) { connection in
            connection.closeWrite()
            let (first, done) = self.stream.withLock { state -> (Bool, Bool) in
                defer { state.writeClosed = true }
                return (!state.writeClosed, state.readClosed)
            }
            if first { self.notifyClosed(read: false) }
            if done { self.complete(error: nil) }
        } failed: { _ in }
    }

    /// Starts TLS once the writes asked for so far are sent. The server's certificate goes to
    /// the session delegate's `didReceive challenge` (server trust) when the session has a
    /// delegate, else default verification decides. A refused certificate fails the next read
    /// or write with `serverCertificateUntrusted`.
    public func startSecureConnection() {
        let engine = self.session.engine
        let host = self.host
        let port = self.port
        self.enqueue(onReads: false) { connection in
            let configuration = engine.configuration.tls.clientConfiguration()
            let verify = engine.trustGate?.verificationCallback(host: host, port: port)
            do {
                try connection.startTLS(configuration: configuration, verify: verify)
            } catch {
                connection.close()
            }
        } failed: { _ in }
    }

    // MARK: - Lifecycle

    override func perform(_ action: TaskLifecycleStateMachine.Action) {
        switch action {
        case .startTransfer:
            self.connect()
        case .cancelTransfer, .completeAsCancelled:
            let connection = self.stream.withLock { $0.connection }
            if let connection { Task { (try? await connection.value)?.close() } }
            self.complete(error: self.cancelledError())
        case .pauseTransfer, .none, .deliverResult:
            break
        }
    }

    /// Stream tasks cannot be paused; the call is ignored.
    public override func suspend() {}

    private func connect() {
        if let creationError = self.inner.withLock({ $0.creationError }) {
            self.complete(error: creationError)
            return
        }
        let engine = self.session.engine
        let (host, port) = (self.host, self.port)
        let connectTimeout = TimeAmount.milliseconds(Int64(min(self.session.configurationSnapshot.timeoutIntervalForRequest, 30) * 1000))
        self.inner.withLock { if $0.taskStart == nil { $0.taskStart = Date() } }
        let task = Task<StreamConnection, any Error> {
            try await StreamConnection.connect(host: host, port: port, connectTimeout: connectTimeout, eventLoop: engine.eventLoop)
        }
        self.stream.withLock { $0.connection = task }
        Task {
            do {
                self.lanes.ready.settle(.success(try await task.value))
            } catch {
                self.complete(error: error)
            }
        }
    }

    /// Runs `body` after the earlier operations of its direction, once connected; `failed`
    /// gets the error when there is no connection.
    private func enqueue(
        onReads: Bool,
        _ body: @escaping @Sendable (StreamConnection) async -> Void,
        failed: @escaping @Sendable (any Error) -> Void
    ) {
        self.lanes.enqueue(onReads ? .inbound : .outbound, body) { failed(self.error ?? $0) }
    }

    private func readEnded() {
        let (first, done) = self.stream.withLock { state -> (Bool, Bool) in
            defer { state.readClosed = true }
            return (!state.readClosed, state.writeClosed)
        }
        if first { self.notifyClosed(read: true) }
        if done { self.complete(error: nil) }
    }

    private func notifyClosed(read: Bool) {
        let session = self.session
        session.enqueueDelegateCall { delegate in
            guard let streamDelegate = delegate as? any TransferSessionStreamDelegate else { return }
            if read {
                streamDelegate.urlSession(session, readClosedFor: self)
            } else {
                streamDelegate.urlSession(session, writeClosedFor: self)
            }
        }
    }

    private func complete(error: (any Error)?) {
        let first = self.stream.withLock { state -> Bool in
            defer { state.completed = true }
            return !state.completed
        }
        guard first else { return }
        self.lanes.ready.settle(.failure(error ?? URLError(.cancelled)))
        if error != nil, let connection = self.stream.withLock({ $0.connection }) {
            Task { (try? await connection.value)?.close() }
        }
        _ = self.inner.withLock { $0.lifecycle.transferFinished() }
        self.finish(error: error)
    }

    private static func timeAmount(_ seconds: TimeInterval) -> TimeAmount? {
        seconds > 0 ? .milliseconds(Int64(seconds * 1000)) : nil
    }
}

/// A value that is settled once and awaited by any number of callers.
public protocol TransferSessionStreamDelegate: TransferSessionTaskDelegate {
    /// The input ended (the peer closed its side, or ``TransferSessionStreamTask/closeRead()``).
    /// Called once per task.
    func urlSession(_ session: TransferSession, readClosedFor streamTask: TransferSessionStreamTask)
    /// The output was closed (``TransferSessionStreamTask/closeWrite()``). Called once per task.
    func urlSession(_ session: TransferSession, writeClosedFor streamTask: TransferSessionStreamTask)
}

extension TransferSessionStreamDelegate {
    public func urlSession(_ session: TransferSession, readClosedFor streamTask: TransferSessionStreamTask) {}
    public func urlSession(_ session: TransferSession, writeClosedFor streamTask: TransferSessionStreamTask) {}
}
