import Crypto
import Foundation
import Haul
import HaulTestSupport
import Synchronization
import Testing

/// Hands out new body streams on request and records the task's events.
final class StreamingDelegate: TransferSessionDataDelegate, @unchecked Sendable {
    let body: Data
    /// How many streams to give before answering `nil`.
    let streamsToGive: Int
    private let lock = NSLock()
    private(set) var asked = 0
    private(set) var received = Data()
    private(set) var sentTotals: [Int64] = []
    private(set) var expectedToSend: [Int64] = []
    private let latch = CompletionLatch()

    init(body: Data, streamsToGive: Int = .max) {
        self.body = body
        self.streamsToGive = streamsToGive
    }

    func urlSession(_ session: TransferSession, task: TransferSessionTask, needNewBodyStream completionHandler: @escaping @Sendable (InputStream?) -> Void) {
        let give = self.lock.withLock { () -> Bool in
            self.asked += 1
            return self.asked <= self.streamsToGive
        }
        completionHandler(give ? InputStream(data: self.body) : nil)
    }

    func urlSession(_ session: TransferSession, task: TransferSessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        self.lock.withLock {
            self.sentTotals.append(totalBytesSent)
            self.expectedToSend.append(totalBytesExpectedToSend)
        }
    }

    func urlSession(_ session: TransferSession, dataTask: TransferSessionDataTask, didReceive data: Data) {
        self.lock.withLock { self.received.append(data) }
    }

    func urlSession(_ session: TransferSession, task: TransferSessionTask, didCompleteWithError error: (any Error)?) {
        self.latch.complete(error)
    }

    func completion() async -> (any Error)? {
        await self.latch.wait()
    }
}

/// Gives 1000 bytes, then fails as a broken pipe or device would.
final class FailingInputStream: InputStream, @unchecked Sendable {
    private var served = false

    init() {
        super.init(data: Data())
    }

    override func open() {}
    override func close() {}
    override var hasBytesAvailable: Bool { true }
    override var streamError: (any Error)? { self.served ? POSIXError(.EIO) : nil }

    override func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength len: Int) -> Int {
        if self.served { return -1 }
        self.served = true
        buffer.initialize(repeating: 7, count: min(1000, len))
        return min(1000, len)
    }
}

@Suite("Streamed uploads: uploadTask(withStreamedRequest:) and needNewBodyStream")
struct StreamedUploadTests {
    static let body = Data((0..<700_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })

    func session(_ delegate: StreamingDelegate) -> TransferSession {
        TransferSession(configuration: .ephemeral, delegate: delegate, delegateQueue: nil)
    }

    @Test("The request's own stream is sent chunked; the server echoes every byte")
    func requestStreamChunked() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let delegate = StreamingDelegate(body: Self.body, streamsToGive: 0)
        let session = self.session(delegate)
        defer { session.finishTasksAndInvalidate() }
        var request = URLRequest(url: server.url("/echo"))
        request.httpMethod = "PUT"
        request.httpBodyStream = InputStream(data: Self.body)
        let task = session.uploadTask(withStreamedRequest: request)
        task.resume()
        #expect(await delegate.completion() == nil)
        #expect(delegate.received == Self.body)
        #expect(delegate.asked == 0, "the request's stream served the first sending")
        #expect(server.requests.last?.header("Transfer-Encoding") == "chunked")
        #expect(server.requests.last?.method == "PUT")
        #expect(delegate.sentTotals.last == Int64(Self.body.count) && delegate.expectedToSend.last == -1)
        try await server.shutdown()
    }

    @Test("Without a request stream the delegate gives one; Content-Length from the request is used")
    func delegateStreamWithLength() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let delegate = StreamingDelegate(body: Self.body)
        let session = self.session(delegate)
        defer { session.finishTasksAndInvalidate() }
        var request = URLRequest(url: server.url("/echo"))
        request.setValue("\(Self.body.count)", forHTTPHeaderField: "Content-Length")
        let task = session.uploadTask(withStreamedRequest: request)
        task.resume()
        #expect(await delegate.completion() == nil)
        #expect(delegate.asked == 1 && delegate.received == Self.body)
        #expect(server.requests.last?.header("Content-Length") == "\(Self.body.count)")
        #expect(server.requests.last?.method == "POST")
        #expect(delegate.expectedToSend.last == Int64(Self.body.count))
        try await server.shutdown()
    }

    @Test("A 307 redirect asks for a new stream and sends the whole body again")
    func redirectNeedsNewStream() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let delegate = StreamingDelegate(body: Self.body)
        let session = self.session(delegate)
        defer { session.finishTasksAndInvalidate() }
        var request = URLRequest(url: server.url("/redirect/1?status=307&to=/echo"))
        request.httpBodyStream = InputStream(data: Self.body)
        session.uploadTask(withStreamedRequest: request).resume()
        #expect(await delegate.completion() == nil)
        #expect(delegate.asked == 1, "one new stream for the redirected request")
        #expect(delegate.received == Self.body)
        #expect(server.requests.map(\.method) == ["POST", "POST"])
        #expect(server.requests.last?.uri == "/echo")
        try await server.shutdown()
    }

    @Test("An authentication retry asks for a new stream; no stream fails with requestBodyStreamExhausted")
    func authenticationRetryAndExhaustion() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let url = server.url("/auth/basic?user=u&pass=p")
        let credentialed = URL(string: url.absoluteString.replacingOccurrences(of: "http://", with: "http://u:p@"))!

        let delegate = StreamingDelegate(body: Self.body)
        let session = self.session(delegate)
        var request = URLRequest(url: credentialed)
        request.httpBodyStream = InputStream(data: Self.body)
        session.uploadTask(withStreamedRequest: request).resume()
        #expect(await delegate.completion() == nil)
        #expect(String(decoding: delegate.received, as: UTF8.self) == "hello u\n")
        #expect(delegate.asked == 1)
        session.finishTasksAndInvalidate()

        let stingy = StreamingDelegate(body: Self.body, streamsToGive: 0)
        let stingySession = self.session(stingy)
        var again = URLRequest(url: credentialed)
        again.httpBodyStream = InputStream(data: Self.body)
        stingySession.uploadTask(withStreamedRequest: again).resume()
        let error = await stingy.completion() as? URLError
        #expect(error?.code == .requestBodyStreamExhausted)
        stingySession.finishTasksAndInvalidate()
        try await server.shutdown()
    }

    @Test("A body stream that fails mid-way fails the upload with its error, never a silently truncated body")
    func failingStream() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let delegate = StreamingDelegate(body: Data(), streamsToGive: 0)
        let session = self.session(delegate)
        defer { session.finishTasksAndInvalidate() }
        var request = URLRequest(url: server.url("/echo"))
        request.httpBodyStream = FailingInputStream()
        session.uploadTask(withStreamedRequest: request).resume()
        let error = await delegate.completion() as? URLError
        #expect(error?.code == .cannotOpenFile, "\(String(describing: error))")
        #expect(error?.localizedDescription.contains("body stream failed") == true)
        #expect(delegate.received.isEmpty, "no echo: the server never got a complete request")
        try await server.shutdown()
    }
}
