import Foundation
import Haul
import HaulTestSupport
import NIOSSL
import Synchronization
import Testing

/// A pinning stream delegate that also records close events and completions.
final class StreamEventsDelegate: TransferSessionStreamDelegate, Sendable {
    let pin: String?
    let events = Mutex<[String]>([])
    let trustAsked = Mutex(0)
    private let latch = CompletionLatch()

    init(pin: String? = nil) {
        self.pin = pin
    }

    func urlSession(
        _ session: TransferSession,
        didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        self.trustAsked.withLock { $0 += 1 }
        let fingerprint = challenge.protectionSpace.transferServerTrust?.sha256Fingerprints.first
        completionHandler(fingerprint != nil && fingerprint == self.pin ? .useCredential : .cancelAuthenticationChallenge, nil)
    }

    func urlSession(_ session: TransferSession, readClosedFor streamTask: TransferSessionStreamTask) {
        self.events.withLock { $0.append("readClosed") }
    }

    func urlSession(_ session: TransferSession, writeClosedFor streamTask: TransferSessionStreamTask) {
        self.events.withLock { $0.append("writeClosed") }
    }

    func urlSession(_ session: TransferSession, task: TransferSessionTask, didCompleteWithError error: (any Error)?) {
        self.events.withLock { $0.append("complete \((error as? URLError)?.code.rawValue ?? 0)") }
        self.latch.complete(error)
    }

    func completion() async -> (any Error)? {
        await self.latch.wait()
    }
}

@Suite("Stream tasks: streamTask(withHostName:port:)")
struct StreamTaskTests {
    func session(_ delegate: StreamEventsDelegate) -> TransferSession {
        TransferSession(configuration: .ephemeral, delegate: delegate, delegateQueue: nil)
    }

    func text(_ task: TransferSessionStreamTask, exactly count: Int) async throws -> String {
        let (data, _) = try await task.readData(ofMinLength: count, maxLength: count, timeout: 5)
        return String(decoding: data ?? Data(), as: UTF8.self)
    }

    @Test("Writes and reads in order, calls made before resume wait for the connection, min/max lengths hold")
    func echoAndBulk() async throws {
        let server = try await LoopbackLineServer.start()
        let delegate = StreamEventsDelegate()
        let session = self.session(delegate)
        defer { session.finishTasksAndInvalidate() }
        let task = session.streamTask(withHostName: "127.0.0.1", port: server.port)
        let early = Mutex<String?>(nil)
        task.write(Data("before resume\n".utf8), timeout: 5) { #expect($0 == nil) }
        task.readData(ofMinLength: 20, maxLength: 20, timeout: 5) { data, _, _ in
            early.withLock { $0 = data.map { String(decoding: $0, as: UTF8.self) } }
        }
        task.resume()
        try await task.write(Data("hello\n".utf8), timeout: 5)
        #expect(try await self.text(task, exactly: 12) == "echo: hello\n")
        #expect(early.withLock { $0 } == "echo: before resume\n")

        try await task.write(Data("BULK 300000\n".utf8), timeout: 5)
        var received = Data()
        while received.count < 300_000 {
            let (piece, atEOF) = try await task.readData(ofMinLength: 1, maxLength: 4096, timeout: 5)
            #expect((piece?.count ?? 0) <= 4096 && !atEOF)
            received.append(piece ?? Data())
        }
        #expect(received == Data(TestContent.bytes(0..<300_000, seed: 9)))
        #expect(server.lines == ["before resume", "hello", "BULK 300000"])
        task.cancel()
        #expect((await delegate.completion() as? URLError)?.code == .cancelled)
        try await server.shutdown()
    }

    @Test("A read times out without data; the connection stays usable")
    func readTimeout() async throws {
        let server = try await LoopbackLineServer.start()
        let delegate = StreamEventsDelegate()
        let session = self.session(delegate)
        defer { session.finishTasksAndInvalidate() }
        let task = session.streamTask(withHostName: "127.0.0.1", port: server.port)
        task.resume()
        let started = ContinuousClock.now
        let error = await #expect(throws: URLError.self) { _ = try await task.readData(ofMinLength: 1, maxLength: 10, timeout: 0.2) }
        #expect(error?.code == .timedOut)
        #expect(ContinuousClock.now - started >= .milliseconds(190))
        try await task.write(Data("still here\n".utf8), timeout: 5)
        #expect(try await self.text(task, exactly: 17) == "echo: still here\n")
        task.cancel()
        _ = await delegate.completion()
        try await server.shutdown()
    }

    @Test("closeWrite: the peer sees end of input, answers and closes; both directions end and the task completes")
    func halfClose() async throws {
        let server = try await LoopbackLineServer.start()
        let delegate = StreamEventsDelegate()
        let session = self.session(delegate)
        defer { session.finishTasksAndInvalidate() }
        let task = session.streamTask(withHostName: "127.0.0.1", port: server.port)
        task.resume()
        try await task.write(Data("last words\n".utf8), timeout: 5)
        task.closeWrite()
        var text = ""
        var atEOF = false
        while !atEOF {
            let (data, eof) = try await task.readData(ofMinLength: 1, maxLength: 100, timeout: 5)
            text += String(decoding: data ?? Data(), as: UTF8.self)
            atEOF = eof
        }
        #expect(text == "echo: last words\nEOF-SEEN\n")
        #expect(await delegate.completion() == nil)
        #expect(Set(delegate.events.withLock { $0 }) == ["writeClosed", "readClosed", "complete 0"])
        #expect(delegate.events.withLock { $0.last } == "complete 0")
        try await server.shutdown()
    }

    @Test("startSecureConnection upgrades mid-stream (STARTTLS); a pinned certificate is accepted, another one refused")
    func startTLS() async throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        let identity = try certificates.selfSigned(name: "starttls")
        let server = try await LoopbackLineServer.start(tls: try TestCertificates.serverConfiguration(identity))

        let delegate = StreamEventsDelegate(pin: try identity.sha256())
        let session = self.session(delegate)
        let task = session.streamTask(withHostName: "127.0.0.1", port: server.port)
        task.resume()
        try await task.write(Data("STARTTLS\n".utf8), timeout: 5)
        #expect(try await self.text(task, exactly: 6) == "READY\n")
        task.startSecureConnection()
        try await task.write(Data("secret\n".utf8), timeout: 5)
        #expect(try await self.text(task, exactly: 13) == "echo: secret\n")
        #expect(delegate.trustAsked.withLock { $0 } == 1)
        #expect(server.lines == ["STARTTLS", "secret"], "the secret arrived through TLS, decrypted by the server")
        task.cancel()
        _ = await delegate.completion()
        session.finishTasksAndInvalidate()

        let wrong = StreamEventsDelegate(pin: "0000")
        let refusing = self.session(wrong)
        let refused = refusing.streamTask(withHostName: "127.0.0.1", port: server.port)
        refused.resume()
        try await refused.write(Data("STARTTLS\n".utf8), timeout: 5)
        #expect(try await self.text(refused, exactly: 6) == "READY\n")
        refused.startSecureConnection()
        refused.write(Data("leak\n".utf8), timeout: 5) { _ in }
        let error = await #expect(throws: URLError.self) { _ = try await refused.readData(ofMinLength: 1, maxLength: 100, timeout: 5) }
        #expect([.serverCertificateUntrusted, .secureConnectionFailed].contains(error?.code), "\(String(describing: error))")
        #expect(!server.lines.contains("leak"))
        refused.cancel()
        _ = await wrong.completion()
        refusing.finishTasksAndInvalidate()
        try await server.shutdown()
    }

    @Test("Cancelling before resume fails the waiting calls with cancelled and completes the task once")
    func cancelBeforeResume() async throws {
        let delegate = StreamEventsDelegate()
        let session = self.session(delegate)
        defer { session.finishTasksAndInvalidate() }
        let task = session.streamTask(withHostName: "127.0.0.1", port: 9)
        let waiting = Task { try await task.readData(ofMinLength: 1, maxLength: 10, timeout: 0) }
        try await Task.sleep(for: .milliseconds(50))
        task.cancel()
        let error = await #expect(throws: URLError.self) { _ = try await waiting.value }
        #expect(error?.code == .cancelled)
        #expect((await delegate.completion() as? URLError)?.code == .cancelled)
        task.resume()  // no effect once completed
        try await Task.sleep(for: .milliseconds(50))
        #expect(delegate.events.withLock { $0 } == ["complete \(URLError.Code.cancelled.rawValue)"])
        #expect(task.state == .completed)
    }

    @Test("A port out of range or an empty host is a clear badURL, not a crash")
    func badEndpoint() async throws {
        let delegate = StreamEventsDelegate()
        let session = self.session(delegate)
        defer { session.finishTasksAndInvalidate() }
        for (host, port) in [("127.0.0.1", 70000), ("127.0.0.1", 0), ("", 80)] {
            let task = session.streamTask(withHostName: host, port: port)
            task.resume()
            let error = await #expect(throws: URLError.self) { _ = try await task.readData(ofMinLength: 1, maxLength: 1, timeout: 1) }
            #expect(error?.code == .badURL, "\(host):\(port)")
        }
    }

    @Test("A refused connection completes the task with cannotConnectToHost and fails its pending reads")
    func refused() async throws {
        let refusing = try RefusingPort()
        let port = refusing.port
        defer { withExtendedLifetime(refusing) {} }
        let delegate = StreamEventsDelegate()
        let session = self.session(delegate)
        defer { session.finishTasksAndInvalidate() }
        let task = session.streamTask(withHostName: "127.0.0.1", port: port)
        task.resume()
        let error = await #expect(throws: URLError.self) { _ = try await task.readData(ofMinLength: 1, maxLength: 10, timeout: 5) }
        #expect(error?.code == .cannotConnectToHost)
        #expect((await delegate.completion() as? URLError)?.code == .cannotConnectToHost)
    }
}
