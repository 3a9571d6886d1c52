import Foundation
import Haul
import HaulTestSupport
import NIOSSL
import Synchronization
import Testing

/// A message as comparable text (Foundation's `Message` is not `Equatable`).
func describe(_ message: TransferSessionWebSocketTask.Message) -> String {
    switch message {
    case .string(let text): "string \(text)"
    case .data(let data): "data \(data.base64EncodedString())"
    @unknown default: "unknown"
    }
}

/// What a WebSocket delegate heard, in order.
final class WebSocketRecorder: TransferSessionWebSocketDelegate, Sendable {
    let events = Mutex<[String]>([])
    let completion = Mutex<(done: Bool, error: (any Error)?)>((false, nil))

    func urlSession(_ session: TransferSession, webSocketTask: TransferSessionWebSocketTask, didOpenWithProtocol protocol: String?) {
        self.events.withLock { $0.append("open \(`protocol` ?? "-")") }
    }

    func urlSession(_ session: TransferSession, webSocketTask: TransferSessionWebSocketTask, didCloseWith closeCode: TransferSessionWebSocketTask.CloseCode, reason: Data?) {
        self.events.withLock { $0.append("close \(closeCode.rawValue) \(reason.map { String(decoding: $0, as: UTF8.self) } ?? "-")") }
    }

    func urlSession(_ session: TransferSession, task: TransferSessionTask, didCompleteWithError error: (any Error)?) {
        self.events.withLock { $0.append("complete \(error == nil ? "ok" : "error")") }
        self.completion.withLock { $0 = (true, error) }
    }

    var list: [String] { self.events.withLock { $0 } }
    var isComplete: Bool { self.completion.withLock { $0.done } }
}

@Suite("WebSocket tasks against a loopback WebSocket server")
struct WebSocketTaskTests {
    @Test("Echo of text and data (async and completion forms), the chosen subprotocol, request headers sent")
    func echo() async throws {
        let server = try await LoopbackWebSocketServer.start()
        let recorder = WebSocketRecorder()
        let session = TransferSession(configuration: .ephemeral, delegate: recorder, delegateQueue: nil)
        var request = URLRequest(url: server.url("/chat"))
        request.setValue("yes", forHTTPHeaderField: "X-Haul-Test")
        let task = session.webSocketTask(with: request)
        task.resume()
        try await task.send(.string("hello"))
        #expect(describe(try await task.receive()) == describe(.string("hello")))
        try await task.send(.data(Data([0, 1, 2, 255])))
        #expect(describe(try await task.receive()) == describe(.data(Data([0, 1, 2, 255]))))
        let received = await withCheckedContinuation { continuation in
            task.send(.string("héllo 🚀")) { error in #expect(error == nil) }
            task.receive { continuation.resume(returning: (try? $0.get()).map { "\($0)" } ?? "failed") }
        }
        #expect(received == "\(TransferSessionWebSocketTask.Message.string("héllo 🚀"))")
        try await task.send(.string("headers"))
        guard case .string(let headers) = try await task.receive() else {
            Issue.record("headers not text")
            return
        }
        #expect(headers.contains("X-Haul-Test: yes"), "\(headers)")
        // Messages in order, many at once.
        for index in 0..<50 { task.send(.string("m\(index)")) { _ in } }
        for index in 0..<50 { #expect(describe(try await task.receive()) == describe(.string("m\(index)"))) }
        task.cancel(with: .normalClosure, reason: nil)
        #expect(await waitUntil { recorder.isComplete })
        #expect(recorder.list.first == "open -")

        let chat = session.webSocketTask(with: server.url("/chat"), protocols: ["chat.v1", "chat.v2"])
        chat.resume()
        try await chat.send(.string("ping me"))
        _ = try await chat.receive()
        #expect(recorder.list.contains("open chat.v2"))
        chat.cancel(with: .goingAway, reason: nil)
        session.finishTasksAndInvalidate()
        try await server.shutdown()
    }

    @Test("Fragmented and large messages are reassembled; a message over maximumMessageSize closes with 1009")
    func fragmentsAndSizes() async throws {
        let server = try await LoopbackWebSocketServer.start()
        let session = TransferSession(configuration: .ephemeral)
        let task = session.webSocketTask(with: server.url("/big"))
        task.resume()
        try await task.send(.string("fragments:7:300000"))
        guard case .data(let data) = try await task.receive() else {
            Issue.record("not data")
            return
        }
        #expect(data == Data((0..<300_000).map { UInt8($0 % 251) }))
        let large = Data((0..<900_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try await task.send(.data(large))
        guard case .data(let echoed) = try await task.receive() else {
            Issue.record("not data")
            return
        }
        #expect(echoed == large)
        task.cancel(with: .normalClosure, reason: nil)

        let recorder = WebSocketRecorder()
        let small = TransferSession(configuration: .ephemeral, delegate: recorder, delegateQueue: nil)
        let limited = small.webSocketTask(with: server.url("/limited"))
        limited.maximumMessageSize = 1000
        limited.resume()
        try await limited.send(.string("fragments:3:5000"))
        await #expect(throws: (any Error).self) { try await limited.receive() }
        #expect(await waitUntil { recorder.isComplete })
        #expect(limited.closeCode == .messageTooBig)
        await #expect(throws: (any Error).self) { try await limited.send(.data(Data(count: 2000))) }
        session.finishTasksAndInvalidate()
        small.finishTasksAndInvalidate()
        try await server.shutdown()
    }

    @Test("Pings get their pongs; the server's close code and reason; a client close; an abrupt drop")
    func pingsAndClosing() async throws {
        let server = try await LoopbackWebSocketServer.start()
        let recorder = WebSocketRecorder()
        let session = TransferSession(configuration: .ephemeral, delegate: recorder, delegateQueue: nil)
        let task = session.webSocketTask(with: server.url("/ping"))
        task.resume()
        let pongs = Mutex(0)
        for _ in 0..<3 {
            task.sendPing { error in
                #expect(error == nil)
                pongs.withLock { $0 += 1 }
            }
        }
        #expect(await waitUntil { pongs.withLock { $0 } == 3 })
        try await task.send(.string("close:1008:policy says no"))
        #expect(await waitUntil { recorder.isComplete })
        #expect(task.closeCode == .policyViolation)
        #expect(task.closeReason == Data("policy says no".utf8))
        #expect(recorder.list == ["open -", "close 1008 policy says no", "complete ok"], "\(recorder.list)")
        await #expect(throws: (any Error).self) { try await task.receive() }

        let clientRecorder = WebSocketRecorder()
        let clientSession = TransferSession(configuration: .ephemeral, delegate: clientRecorder, delegateQueue: nil)
        let closing = clientSession.webSocketTask(with: server.url("/bye"))
        closing.resume()
        try await closing.send(.string("x"))
        _ = try await closing.receive()
        closing.cancel(with: .goingAway, reason: Data("done".utf8))
        #expect(await waitUntil { clientRecorder.isComplete })
        #expect(closing.closeCode == .goingAway && closing.closeReason == Data("done".utf8))
        #expect(clientRecorder.list == ["open -", "close 1001 done", "complete ok"], "\(clientRecorder.list)")

        let dropRecorder = WebSocketRecorder()
        let dropSession = TransferSession(configuration: .ephemeral, delegate: dropRecorder, delegateQueue: nil)
        let dropped = dropSession.webSocketTask(with: server.url("/drop"))
        dropped.resume()
        try await dropped.send(.string("drop"))
        await #expect(throws: (any Error).self) { try await dropped.receive() }
        #expect(await waitUntil { dropRecorder.isComplete })
        #expect(dropRecorder.completion.withLock { $0.error } != nil, "a dropped connection is an error")
        #expect(dropped.closeCode == .abnormalClosure)
        #expect(!dropRecorder.list.contains { $0.hasPrefix("close") }, "no closing handshake happened")
        for session in [session, clientSession, dropSession] { session.finishTasksAndInvalidate() }
        try await server.shutdown()
    }

    @Test("ws: and wss: through the configured proxy: a CONNECT tunnel to the named host")
    func throughProxy() async throws {
        let server = try await LoopbackWebSocketServer.start()
        let proxy = try await LoopbackTunnelProxy.start(originPort: server.port)
        let configuration = TransferSessionConfiguration.ephemeral
        configuration.connectionProxyDictionary = ["HTTPEnable": 1, "HTTPProxy": "127.0.0.1", "HTTPPort": proxy.port]
        let session = TransferSession(configuration: configuration)
        // A host only the proxy can reach (the client never resolves it).
        let task = session.webSocketTask(with: URL(string: "ws://origin.haul.test/tunnel")!)
        task.resume()
        try await task.send(.string("through the proxy"))
        #expect(describe(try await task.receive()) == describe(.string("through the proxy")))
        #expect(proxy.connectTargets == ["origin.haul.test:80"])
        task.cancel(with: .normalClosure, reason: nil)
        session.finishTasksAndInvalidate()
        try await proxy.shutdown()
        try await server.shutdown()
    }

    @Test("wss: trusted through the configuration's extra roots, refused without them; a refused upgrade; bad URLs")
    func tlsAndRefusals() async throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        let authority = try certificates.authority(name: "ws-ca")
        let leaf = try certificates.issue(name: "ws-server", by: authority, forClient: false)
        let server = try await LoopbackWebSocketServer.start(tls: TestCertificates.serverConfiguration(leaf))
        let configuration = TransferSessionConfiguration.ephemeral
        configuration.tlsAdditionalTrustedCertificates = try TransferTrustedCertificates(pemFile: authority.certificatePath)
        let session = TransferSession(configuration: configuration)
        let secure = session.webSocketTask(with: server.url("/secure"))
        secure.resume()
        try await secure.send(.string("over tls"))
        #expect(describe(try await secure.receive()) == describe(.string("over tls")))
        secure.cancel(with: .normalClosure, reason: nil)

        let untrusting = TransferSession(configuration: .ephemeral)
        let refusedTLS = untrusting.webSocketTask(with: server.url("/secure"))
        refusedTLS.resume()
        do {
            _ = try await refusedTLS.receive()
            Issue.record("an untrusted wss server was accepted")
        } catch let error as URLError {
            #expect(error.code == .serverCertificateUntrusted, "\(error)")
        }

        let plain = try await LoopbackWebSocketServer.start()
        let refused = untrusting.webSocketTask(with: plain.url("/refuse"))
        refused.resume()
        do {
            _ = try await refused.receive()
            Issue.record("a refused upgrade opened")
        } catch let error as URLError {
            #expect(error.code == .badServerResponse && error.localizedDescription.contains("403"), "\(error)")
        }
        let bad = untrusting.webSocketTask(with: URL(string: "http://127.0.0.1/not-ws")!)
        bad.resume()
        await #expect(throws: URLError.self) { try await bad.receive() }
        session.finishTasksAndInvalidate()
        untrusting.finishTasksAndInvalidate()
        try await server.shutdown()
        try await plain.shutdown()
    }
}
