import Foundation
import Haul
import HaulTestSupport
import Synchronization
import Testing

@Suite("Session and task behaviour")
struct SessionBehaviourTests {
    @Test("A redirect chain is followed and each hop is offered to the delegate")
    func redirectChain() async throws {
        let env = try await TestEnvironment.make()
        let target = "/file/after-redirects?size=100000&seed=21"
        let encoded = target.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        let task = env.session.downloadTask(with: env.server.url("/redirect/3?status=301&to=\(encoded)"))
        task.resume()
        #expect(await env.delegate.completion(of: task) == nil)
        let redirects = env.delegate.events.filter { if case .redirect = $0 { true } else { false } }
        #expect(redirects.count == 3)
        #expect(env.delegate.finishedDigests == [TestContent.sha256Hex(size: 100_000, seed: 21)])
        #expect(task.currentRequest?.url?.path == "/file/after-redirects")
        #expect(task.originalRequest?.url?.path == "/redirect/3")
        try await env.finish()
    }

    @Test("A redirect loop fails with httpTooManyRedirects")
    func redirectLoop() async throws {
        let env = try await TestEnvironment.make()
        let task = env.session.dataTask(with: env.server.url("/loop/a"))
        task.resume()
        let error = try #require(await env.delegate.completion(of: task) as? URLError)
        #expect(error.code == .httpTooManyRedirects)
        #expect(env.server.requests.count <= 3, "the loop is detected, not run to the limit")
        try await env.finish()
    }

    @Test("The delegate can refuse a redirect (the 3xx completes the task) or rewrite it")
    func redirectRefusedOrRewritten() async throws {
        let env = try await TestEnvironment.make()
        env.delegate.redirectDecision = { _ in nil }
        let refused = env.session.dataTask(with: env.server.url("/redirect/1?to=/file/x"))
        refused.resume()
        #expect(await env.delegate.completion(of: refused) == nil)
        #expect((refused.response as? HTTPURLResponse)?.statusCode == 302)

        let port = env.server.port
        env.delegate.redirectDecision = { request in
            var changed = request
            changed.url = URL(string: "http://127.0.0.1:\(port)/file/rewritten?size=1000&seed=3")
            return changed
        }
        let rewritten = env.session.downloadTask(with: env.server.url("/redirect/1?to=/file/x"))
        rewritten.resume()
        #expect(await env.delegate.completion(of: rewritten) == nil)
        #expect(env.delegate.finishedDigests == [TestContent.sha256Hex(size: 1000, seed: 3)])
        try await env.finish()
    }

    @Test("Data tasks: GET with a completion handler, POST with a body, async data(for:)")
    func dataTasks() async throws {
        let env = try await TestEnvironment.make()
        let body = Data((0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        let (data, response) = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<(Data, URLResponse), any Error>) in
            let task = env.session.dataTask(with: env.server.url("/file/small?size=5000&seed=1")) { data, response, error in
                if let error { continuation.resume(throwing: error) } else { continuation.resume(returning: (data!, response!)) }
            }
            task.resume()
        }
        #expect(data == Data(TestContent.bytes(0..<5000, seed: 1)))
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(env.delegate.events.isEmpty, "completion-handler tasks bypass the delegate")

        var post = URLRequest(url: env.server.url("/echo"))
        post.httpMethod = "POST"
        post.httpBody = body
        let (echoed, echoResponse) = try await env.session.data(for: post)
        #expect(echoed == body)
        #expect((echoResponse as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-Echo-Method") == "POST")

        var upload = URLRequest(url: env.server.url("/echo"))
        upload.httpMethod = "PUT"
        let (uploaded, _) = try await env.session.upload(for: upload, from: body)
        #expect(uploaded == body)
        try await env.finish()
    }

    @Test("A data delegate gets the response first, then the body in order; .cancel stops the task")
    func dataDelegate() async throws {
        let env = try await TestEnvironment.make()
        let task = env.session.dataTask(with: env.server.url("/file/streamed?size=300000&seed=2"))
        task.resume()
        #expect(await env.delegate.completion(of: task) == nil)
        #expect(env.delegate.events.first == .response(status: 200))
        #expect(env.delegate.receivedData == Data(TestContent.bytes(0..<300_000, seed: 2)))
        try await env.finish()

        let refusing = try await TestEnvironment.make()
        refusing.delegate.disposition = .cancel
        let cancelled = refusing.session.dataTask(with: refusing.server.url("/file/refused?size=300000"))
        cancelled.resume()
        let error = try #require(await refusing.delegate.completion(of: cancelled) as? URLError)
        #expect(error.code == .cancelled)
        #expect(refusing.delegate.receivedData.isEmpty)
        try await refusing.finish()
    }

    @Test("httpMaximumConnectionsPerHost is enforced")
    func connectionLimit() async throws {
        let env = try await TestEnvironment.make { $0.httpMaximumConnectionsPerHost = 2 }
        let tasks = (0..<6).map { index in
            env.session.downloadTask(with: env.server.url("/file/limit\(index)?size=300000&seed=\(index)&rate=3000000"))
        }
        tasks.forEach { $0.resume() }
        for task in tasks { #expect(await env.delegate.completion(of: task) == nil) }
        #expect(env.delegate.finishedDigests.count == 6)
        #expect(env.server.peakOpenConnections <= 2, "peak was \(env.server.peakOpenConnections)")
        try await env.finish()
    }

    @Test("finishTasksAndInvalidate lets tasks finish, then didBecomeInvalid comes last; new tasks fail")
    func finishAndInvalidate() async throws {
        let env = try await TestEnvironment.make()
        let task = env.session.downloadTask(with: env.server.url("/file/last?size=400000&rate=4000000"))
        task.resume()
        env.session.finishTasksAndInvalidate()
        await env.delegate.invalidation()
        #expect(env.delegate.events.suffix(2) == [.completed(errorCode: nil), .invalidated])
        let late = env.session.dataTask(with: env.server.url("/file/late"))
        late.resume()
        #expect(late.state == .completed)
        #expect((late.error as? URLError)?.code == .cancelled)
        try await env.server.shutdown()
    }

    @Test("invalidateAndCancel cancels running tasks; each completes once with .cancelled")
    func invalidateAndCancel() async throws {
        let env = try await TestEnvironment.make()
        let tasks = (0..<3).map { env.session.downloadTask(with: env.server.url("/file/slow\($0)?size=2000000&stallAfter=100000")) }
        tasks.forEach { $0.resume() }
        #expect(await waitUntil { tasks.allSatisfy { $0.countOfBytesReceived > 0 } })
        env.session.invalidateAndCancel()
        await env.delegate.invalidation()
        let completions = env.delegate.events.filter { if case .completed = $0 { true } else { false } }
        #expect(completions == Array(repeating: .completed(errorCode: URLError.Code.cancelled.rawValue), count: 3))
        #expect(env.delegate.events.last == .invalidated)
        #expect(env.leftoverPartialFiles.isEmpty)
        try await env.server.shutdown()
    }

    @Test("The configuration is copied at session creation; additional headers are sent")
    func configurationIsCopied() async throws {
        let configuration = TransferSessionConfiguration.ephemeral
        configuration.httpAdditionalHeaders = ["X-Haul-Test": "one"]
        let server = try await FaultInjectingHTTPServer.start()
        let session = TransferSession(configuration: configuration)
        configuration.httpAdditionalHeaders = ["X-Haul-Test": "two"]
        configuration.timeoutIntervalForRequest = 1
        #expect(session.configuration.timeoutIntervalForRequest == 60)
        _ = try await session.data(from: server.url("/file/headers?size=10"))
        #expect(server.requests.last?.header("X-Haul-Test") == "one")
        session.finishTasksAndInvalidate()
        try await server.shutdown()
    }

    @Test("timeoutIntervalForResource bounds the whole task")
    func resourceTimeout() async throws {
        // 3 s: long enough for the first 200 kB to arrive even on a loaded 2-core machine.
        let env = try await TestEnvironment.make { $0.timeoutIntervalForResource = 3 }
        // The server sends 200 kB and then nothing: only the resource timeout can end the task.
        let task = env.session.downloadTask(with: env.server.url("/file/forever?size=10000000&stallAfter=200000"))
        task.resume()
        let started = ContinuousClock.now
        let error = try #require(await env.delegate.completion(of: task) as? URLError)
        #expect(error.code == .timedOut)
        #expect(ContinuousClock.now - started < .seconds(10), "the resource timeout, not the 60 s idle timeout, ended it")
        #expect(error.userInfo[TransferSessionDownloadTaskResumeData] != nil, "the 200 kB received can be resumed")
        try await env.finish()
    }

    @Test("A gzip-encoded download is saved as sent, not decoded (Content-Encoding is the entity's)")
    func gzipDownloadIsRaw() async throws {
        let env = try await TestEnvironment.make()
        var request = URLRequest(url: env.server.url("/file/gz?size=200000&gzip=1"))
        request.setValue("gzip", forHTTPHeaderField: "Accept-Encoding")
        let (location, response) = try await env.session.download(for: request)
        #expect((response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Content-Encoding") == "gzip")
        let bytes = try Data(contentsOf: location)
        #expect(bytes.prefix(2) == Data([0x1F, 0x8B]))
        try FileManager.default.removeItem(at: location)
        try await env.finish()
    }

    @Test("Delegate callbacks never overlap, and getAllTasks lists unfinished tasks")
    func serialDelivery() async throws {
        let env = try await TestEnvironment.make()
        let tasks = (0..<4).map { env.session.downloadTask(with: env.server.url("/file/serial\($0)?size=500000&seed=\($0)")) }
        let listed = await env.session.allTasks
        #expect(Set(listed.map(\.taskIdentifier)) == Set(tasks.map(\.taskIdentifier)))
        tasks.forEach { $0.resume() }
        for task in tasks { _ = await env.delegate.completion(of: task) }
        #expect(env.delegate.concurrentCalls == 0)
        #expect(await env.session.allTasks.isEmpty)
        try await env.finish()
    }
}

@Suite("Uploads from files")
struct FileUploadTests {
    @Test("uploadTask(with:fromFile:) streams the file with its length; a missing file is a clear error")
    func uploadFromFile() async throws {
        let env = try await TestEnvironment.make()
        let file = env.directory.appendingPathComponent("payload.bin")
        let bytes = Data(TestContent.bytes(0..<3_000_000, seed: 17))
        try bytes.write(to: file)
        var request = URLRequest(url: env.server.url("/echo"))
        request.httpMethod = "PUT"
        let (echoed, response) = try await env.session.upload(for: request, fromFile: file)
        #expect(echoed == bytes)
        #expect((response as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-Echo-Method") == "PUT")
        #expect(env.server.requests.last?.header("Content-Length") == "3000000")

        let missing = env.session.uploadTask(with: URLRequest(url: env.server.url("/echo")), fromFile: env.directory.appendingPathComponent("nope"))
        missing.resume()
        let error = try #require(await env.delegate.completion(of: missing) as? URLError)
        #expect(error.code == .fileDoesNotExist)
        try await env.finish()
    }
}
