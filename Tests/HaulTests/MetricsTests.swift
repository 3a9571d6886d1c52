import Foundation
import Haul
import HaulTestSupport
import Synchronization
import Testing

/// Keeps every task's metrics and the order of metrics and completion calls.
final class MetricsDelegate: TransferSessionTaskDelegate, Sendable {
    let collected = Mutex<[Int: TransferSessionTaskMetrics]>([:])
    let calls = Mutex<[String]>([])

    func urlSession(_ session: TransferSession, task: TransferSessionTask, didFinishCollecting metrics: TransferSessionTaskMetrics) {
        self.collected.withLock { $0[task.taskIdentifier] = metrics }
        self.calls.withLock { $0.append("metrics \(task.taskIdentifier)") }
    }

    func urlSession(_ session: TransferSession, task: TransferSessionTask, didCompleteWithError error: (any Error)?) {
        self.calls.withLock { $0.append("complete \(task.taskIdentifier)") }
    }

    func metrics(of task: TransferSessionTask) -> TransferSessionTaskMetrics? {
        self.collected.withLock { $0[task.taskIdentifier] }
    }
}

@Suite("Task metrics: timings, connection reuse, byte counts, redirects, cache")
struct MetricsTests {
    /// Runs a completion-handler data task and waits for it (metrics still go to the delegate).
    func run(_ session: TransferSession, _ request: URLRequest) async throws -> TransferSessionTask {
        try await withCheckedThrowingContinuation { continuation in
            let box = Mutex<TransferSessionDataTask?>(nil)
            let task = session.dataTask(with: request) { _, _, error in
                let task = box.withLock { $0 }!
                if let error { continuation.resume(throwing: error) } else { continuation.resume(returning: task) }
            }
            box.withLock { $0 = task }
            task.resume()
        }
    }

    func session(_ delegate: MetricsDelegate, cache: TransferURLCache? = nil) -> TransferSession {
        let configuration = TransferSessionConfiguration.ephemeral
        configuration.urlCache = cache
        return TransferSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
    }

    @Test("A new connection, then a reused one: phases in order, exact head and body byte counts")
    func phasesAndReuse() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let delegate = MetricsDelegate()
        let session = self.session(delegate)
        defer { session.finishTasksAndInvalidate() }

        let first = try await self.run(session, URLRequest(url: server.url("/file/m?size=200000")))
        let second = try await self.run(session, URLRequest(url: server.url("/file/n?size=1000")))
        // Completion-handler tasks get no didCompleteWithError, but their metrics still come.
        #expect(delegate.calls.withLock { $0 } == ["metrics 1", "metrics 2"])
        let third = session.dataTask(with: server.url("/file/o?size=10"))
        third.resume()
        while delegate.calls.withLock({ $0.count }) < 4 { try await Task.sleep(for: .milliseconds(5)) }
        #expect(delegate.calls.withLock { Array($0.suffix(2)) } == ["metrics 3", "complete 3"], "metrics right before the completion")

        let one = try #require(delegate.metrics(of: first)?.transactionMetrics.first)
        #expect(delegate.metrics(of: first)?.transactionMetrics.count == 1)
        #expect(one.resourceFetchType == .networkLoad && one.networkProtocolName == "http/1.1")
        #expect(!one.isReusedConnection && !one.isProxyConnection)
        let dates = [one.fetchStartDate, one.connectStartDate, one.connectEndDate, one.requestStartDate, one.requestEndDate, one.responseStartDate, one.responseEndDate]
        #expect(dates.allSatisfy { $0 != nil }, "\(dates)")
        let ordered = dates.compactMap { $0 }
        #expect(zip(ordered, ordered.dropFirst()).allSatisfy { $0 <= $1 }, "\(ordered)")
        #expect(one.countOfResponseBodyBytesReceived == 200_000)
        let response = try #require(one.response as? HTTPURLResponse)
        var head = "HTTP/1.1 200 OK\r\n".utf8.count + 2
        for case let (name as String, value as String) in response.allHeaderFields { head += name.utf8.count + 2 + value.utf8.count + 2 }
        #expect(one.countOfResponseHeaderBytesReceived == Int64(head))
        #expect(one.countOfRequestHeaderBytesSent > Int64("GET /file/m?size=200000 HTTP/1.1\r\n\r\n".utf8.count))
        #expect(one.request.value(forHTTPHeaderField: "User-Agent") != nil, "the request as sent")
        let interval = try #require(delegate.metrics(of: first)?.taskInterval)
        #expect(interval.start <= one.fetchStartDate! && interval.end >= one.responseEndDate!)

        let two = try #require(delegate.metrics(of: second)?.transactionMetrics.first)
        #expect(two.isReusedConnection)
        #expect(two.connectStartDate == nil && two.connectEndDate == nil)
        #expect(two.countOfResponseBodyBytesReceived == 1000)
        #expect(server.peakOpenConnections == 1)
        try await server.shutdown()
    }

    @Test("A redirect chain is one transaction per request, and the redirect count")
    func redirects() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let delegate = MetricsDelegate()
        let session = self.session(delegate)
        defer { session.finishTasksAndInvalidate() }
        let task = try await self.run(session, URLRequest(url: server.url("/redirect/2?to=/file/r%3Fsize%3D10")))
        let metrics = try #require(delegate.metrics(of: task))
        #expect(metrics.redirectCount == 2)
        #expect(metrics.transactionMetrics.map { ($0.response as? HTTPURLResponse)?.statusCode } == [302, 302, 200])
        #expect(metrics.transactionMetrics.map { $0.request.url?.path } == ["/redirect/2", "/redirect/1", "/file/r"])
        try await server.shutdown()
    }

    @Test("Upload body bytes are counted; a cache hit is a local-cache transaction without network dates")
    func uploadAndCache() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let delegate = MetricsDelegate()
        let session = self.session(delegate, cache: TransferURLCache(memoryCapacity: 1 << 20, diskCapacity: 0))
        defer { session.finishTasksAndInvalidate() }
        var post = URLRequest(url: server.url("/echo"))
        post.httpMethod = "POST"
        post.httpBody = Data(repeating: 1, count: 300_000)
        let upload = try await self.run(session, post)
        let sent = try #require(delegate.metrics(of: upload)?.transactionMetrics.first)
        #expect(sent.countOfRequestBodyBytesSent == 300_000 && sent.countOfResponseBodyBytesReceived == 300_000)

        _ = try await self.run(session, URLRequest(url: server.url("/cache/m?cc=max-age%3D60")))
        let hit = try await self.run(session, URLRequest(url: server.url("/cache/m?cc=max-age%3D60")))
        let cached = try #require(delegate.metrics(of: hit)?.transactionMetrics.first)
        #expect(cached.resourceFetchType == .localCache)
        #expect(cached.connectStartDate == nil && cached.requestStartDate == nil && cached.networkProtocolName == nil)
        #expect(cached.countOfResponseBodyBytesAfterDecoding == Int64("m version 1\n".utf8.count))
        #expect(server.requestCount(forKey: "cache-m") == 1)
        try await server.shutdown()
    }
}
