import Foundation
import Haul
import HaulTestSupport
import Synchronization
import Testing

/// Answers `stub://` and `http://api.stub.test` requests from memory; fails `/fail`; streams
/// `/slow` until stopped.
final class StubProtocol: TransferURLProtocol, @unchecked Sendable {
    static let started = Mutex(0)
    static let stopped = Mutex(0)

    override class func canInit(with request: URLRequest) -> Bool {
        request.url?.scheme == "stub" || request.url?.host == "api.stub.test"
    }

    override class func canonicalRequest(for request: URLRequest) -> URLRequest {
        var request = request
        request.setValue("yes", forHTTPHeaderField: "X-Canonical")
        return request
    }

    override func startLoading() {
        Self.started.withLock { $0 += 1 }
        let url = self.request.url!
        if url.path.hasPrefix("/moved") {
            // /moved?to=URL redirects there (a stub, or the network).
            let target = URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems?.first { $0.name == "to" }?.value
            let redirect = HTTPURLResponse(url: url, statusCode: 302, httpVersion: "HTTP/1.1", headerFields: ["Location": target ?? ""])!
            self.client?.urlProtocol(self, wasRedirectedTo: URLRequest(url: URL(string: target ?? "stub://nowhere")!), redirectResponse: redirect)
            return
        }
        if url.path == "/fail" {
            self.client?.urlProtocol(self, didFailWithError: URLError(.notConnectedToInternet))
            return
        }
        let response = HTTPURLResponse(url: url, statusCode: 201, httpVersion: "HTTP/1.1", headerFields: [
            "Content-Type": "application/json", "X-Canonical-Seen": self.request.value(forHTTPHeaderField: "X-Canonical") ?? "no",
        ])!
        self.client?.urlProtocol(self, didReceive: response, cacheStoragePolicy: .notAllowed)
        if url.path == "/slow" {
            // Four seconds of sleeps: on a serial queue of its own (an overcommit thread), not on
            // one of the global pool's few threads that other tests' delegate queues need.
            DispatchQueue(label: "haul.tests.slow-protocol").async {
                for _ in 0..<200 {
                    if Self.stopped.withLock({ $0 }) > 0 { return }
                    self.client?.urlProtocol(self, didLoad: Data(repeating: 1, count: 1000))
                    usleep(20_000)
                }
                self.client?.urlProtocolDidFinishLoading(self)
            }
            return
        }
        self.client?.urlProtocol(self, didLoad: Data(#"{"stubbed":"#.utf8))
        self.client?.urlProtocol(self, didLoad: Data(#" true}"#.utf8))
        self.client?.urlProtocolDidFinishLoading(self)
    }

    override func stopLoading() {
        Self.stopped.withLock { $0 += 1 }
    }
}

@Suite("Custom protocol classes", .serialized)
struct ProtocolClassTests {
    func session() -> TransferSession {
        let configuration = TransferSessionConfiguration.ephemeral
        configuration.protocolClasses = [StubProtocol.self]
        return TransferSession(configuration: configuration)
    }

    @Test("A protocol class answers the requests it claims, any scheme, canonicalised; others reach the network")
    func answers() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let session = self.session()
        let (data, response) = try await session.data(from: URL(string: "http://api.stub.test/items")!)
        #expect(String(decoding: data, as: UTF8.self) == #"{"stubbed": true}"#)
        let http = try #require(response as? HTTPURLResponse)
        #expect(http.statusCode == 201 && http.value(forHTTPHeaderField: "X-Canonical-Seen") == "yes")
        let (custom, _) = try await session.data(from: URL(string: "stub://anything/at/all")!)
        #expect(custom.count == 17)
        let (location, _) = try await session.download(from: URL(string: "stub://host/file")!)
        #expect(try Data(contentsOf: location) == Data(#"{"stubbed": true}"#.utf8))
        let (real, _) = try await session.data(from: server.url("/file/real?size=10"))
        #expect(real.count == 10 && server.requests.count == 1, "unclaimed requests go to the network")
        session.finishTasksAndInvalidate()
        try await server.shutdown()
    }

    @Test("A protocol's failure is the task's error; cancelling stops the protocol")
    func failureAndStop() async throws {
        let session = self.session()
        do {
            _ = try await session.data(from: URL(string: "stub://host/fail")!)
            Issue.record("the stub's failure was not reported")
        } catch let error as URLError {
            #expect(error.code == .notConnectedToInternet)
        }
        StubProtocol.stopped.withLock { $0 = 0 }
        let task = session.dataTask(with: URL(string: "stub://host/slow")!)
        task.resume()
        #expect(await waitUntil { task.countOfBytesReceived >= 3000 })
        task.cancel()
        #expect(await waitUntil { task.state == .completed })
        #expect((task.error as? URLError)?.code == .cancelled)
        #expect(StubProtocol.stopped.withLock { $0 } == 1, "stopLoading was called once")
        session.finishTasksAndInvalidate()
    }

    @Test("A protocol's redirect goes through willPerformHTTPRedirection to another stub or to the network; network redirects reach protocols too")
    func redirects() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let delegate = RecordingDelegate(keepDirectory: try makeTemporaryDirectory())
        let configuration = TransferSessionConfiguration.ephemeral
        configuration.protocolClasses = [StubProtocol.self]
        let session = TransferSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }

        let toStub = session.dataTask(with: URL(string: "stub://a/moved?to=stub://b/final")!)
        toStub.resume()
        #expect(await delegate.completion(of: toStub) == nil)
        #expect(toStub.currentRequest?.url?.absoluteString == "stub://b/final")
        #expect((toStub.response as? HTTPURLResponse)?.statusCode == 201)

        let network = server.url("/file/from-stub?size=100&seed=2").absoluteString
        let toNetwork = session.dataTask(with: URL(string: "stub://a/moved?to=\(network.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)")!)
        toNetwork.resume()
        #expect(await delegate.completion(of: toNetwork) == nil)
        #expect((toNetwork.response as? HTTPURLResponse)?.statusCode == 200)
        #expect(server.requests.last?.uri == "/file/from-stub?size=100&seed=2")

        // A network 302 to a host only the stub knows: the stub answers the redirected request.
        let toAPI = session.dataTask(with: server.url("/redirect/1?to=\("http://api.stub.test/x".addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)"))
        toAPI.resume()
        #expect(await delegate.completion(of: toAPI) == nil)
        #expect((toAPI.response as? HTTPURLResponse)?.statusCode == 201)
        #expect(toAPI.currentRequest?.url?.host == "api.stub.test")
        let redirects = delegate.events.compactMap { event -> String? in
            if case .redirect(let status, let target) = event { return "\(status) \(target)" }
            return nil
        }
        #expect(redirects == ["302 /final", "302 /file/from-stub", "302 /x"], "the recorder keeps the target path")
        try await server.shutdown()
    }
}
