import Foundation
import Haul
import HaulTestSupport
import Synchronization
import Testing

/// A data delegate that answers `willCacheResponse` with a scripted choice.
final class CachingDelegate: TransferSessionDataDelegate, @unchecked Sendable {
    enum Choice {
        case keep
        case refuse
        case memoryOnly
        case replaceBody(String)
    }

    let choice: Choice
    private let lock = NSLock()
    private var asked: [CachedURLResponse] = []
    private var received: [Int: Data] = [:]
    private var waiters: [Int: CheckedContinuation<(Data, (any Error)?), Never>] = [:]
    private var done: [Int: (Data, (any Error)?)] = [:]

    init(_ choice: Choice) {
        self.choice = choice
    }

    var proposals: [CachedURLResponse] { self.lock.withLock { self.asked } }

    func urlSession(_ session: TransferSession, dataTask: TransferSessionDataTask, didReceive data: Data) {
        self.lock.withLock { self.received[dataTask.taskIdentifier, default: Data()].append(data) }
    }

    func urlSession(
        _ session: TransferSession,
        dataTask: TransferSessionDataTask,
        willCacheResponse proposedResponse: CachedURLResponse,
        completionHandler: @escaping @Sendable (CachedURLResponse?) -> Void
    ) {
        self.lock.withLock { self.asked.append(proposedResponse) }
        switch self.choice {
        case .keep: completionHandler(proposedResponse)
        case .refuse: completionHandler(nil)
        case .memoryOnly:
            completionHandler(CachedURLResponse(response: proposedResponse.response, data: proposedResponse.data, userInfo: nil, storagePolicy: .allowedInMemoryOnly))
        case .replaceBody(let text):
            completionHandler(CachedURLResponse(response: proposedResponse.response, data: Data(text.utf8), userInfo: nil, storagePolicy: .allowed))
        }
    }

    func urlSession(_ session: TransferSession, task: TransferSessionTask, didCompleteWithError error: (any Error)?) {
        let result = self.lock.withLock { () -> ((Data, (any Error)?), CheckedContinuation<(Data, (any Error)?), Never>?) in
            let result = (self.received[task.taskIdentifier] ?? Data(), error)
            self.done[task.taskIdentifier] = result
            return (result, self.waiters.removeValue(forKey: task.taskIdentifier))
        }
        result.1?.resume(returning: result.0)
    }

    /// Runs a delegate-driven data task for `url` to its end.
    func fetch(_ url: URL, in session: TransferSession) async -> (Data, (any Error)?) {
        let task = session.dataTask(with: url)
        return await withCheckedContinuation { continuation in
            let already = self.lock.withLock { () -> (Data, (any Error)?)? in
                if let result = self.done[task.taskIdentifier] { return result }
                self.waiters[task.taskIdentifier] = continuation
                return nil
            }
            if let already { continuation.resume(returning: already) }
            task.resume()
        }
    }
}

@Suite("HTTP cache: hits, misses, revalidation, policies, willCacheResponse, disk")
struct CacheTests {
    let directory: URL

    init() throws {
        self.directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-cache-\(UUID().uuidString)", isDirectory: true)
    }

    func makeCache(memory: Int = 1 << 20, disk: Int = 4 << 20) -> TransferURLCache {
        TransferURLCache(memoryCapacity: memory, diskCapacity: disk, directory: self.directory)
    }

    func session(_ cache: TransferURLCache?, delegate: (any TransferSessionDelegate)? = nil, policy: URLRequest.CachePolicy = .useProtocolCachePolicy) -> TransferSession {
        let configuration = TransferSessionConfiguration.ephemeral
        configuration.urlCache = cache
        configuration.requestCachePolicy = policy
        return TransferSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
    }

    func text(_ session: TransferSession, _ url: URL, policy: URLRequest.CachePolicy? = nil, headers: [String: String] = [:]) async throws -> (String, HTTPURLResponse) {
        var request = URLRequest(url: url)
        if let policy { request.cachePolicy = policy }
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let (data, response) = try await session.data(for: request)
        return (String(decoding: data, as: UTF8.self), response as! HTTPURLResponse)
    }

    @Test("A fresh response (max-age) is answered from the cache without the network")
    func freshHit() async throws {
        defer { try? FileManager.default.removeItem(at: self.directory) }
        let server = try await FaultInjectingHTTPServer.start()
        let session = self.session(self.makeCache())
        defer { session.finishTasksAndInvalidate() }
        let url = server.url("/cache/fresh?cc=max-age%3D60")
        let (first, _) = try await self.text(session, url)
        server.bumpVersion(of: "fresh")  // the origin changed, but the entry is still fresh
        let (second, response) = try await self.text(session, url)
        #expect(first == "fresh version 1\n" && second == first)
        #expect(response.statusCode == 200 && response.value(forHTTPHeaderField: "Cache-Control") == "max-age=60")
        #expect(server.requestCount(forKey: "cache-fresh") == 1)
        let cache = try #require(session.configuration.urlCache)
        let task = session.dataTask(with: url)
        cache.getCachedResponse(for: task) { cached in
            #expect(cached.map { String(decoding: $0.data, as: UTF8.self) } == "fresh version 1\n")
            #expect((cached?.response as? HTTPURLResponse)?.statusCode == 200)
        }
        task.cancel()
        // Another session sharing the cache object finds the entry too.
        let other = self.session(session.configuration.urlCache)
        #expect(try await self.text(other, url).0 == first)
        other.finishTasksAndInvalidate()
        #expect(server.requestCount(forKey: "cache-fresh") == 1)
        try await server.shutdown()
    }

    @Test("no-store responses and requests are never stored; a session without a cache always asks")
    func misses() async throws {
        defer { try? FileManager.default.removeItem(at: self.directory) }
        let server = try await FaultInjectingHTTPServer.start()
        let cache = self.makeCache()
        let session = self.session(cache)
        _ = try await self.text(session, server.url("/cache/nostore?cc=no-store%2C%20max-age%3D60"))
        _ = try await self.text(session, server.url("/cache/nostore?cc=no-store%2C%20max-age%3D60"))
        #expect(server.requestCount(forKey: "cache-nostore") == 2)
        _ = try await self.text(session, server.url("/cache/reqnostore?cc=max-age%3D60"), headers: ["Cache-Control": "no-store"])
        _ = try await self.text(session, server.url("/cache/reqnostore?cc=max-age%3D60"), headers: ["Cache-Control": "no-store"])
        #expect(server.requestCount(forKey: "cache-reqnostore") == 2)
        #expect(cache.currentMemoryUsage == 0 && cache.currentDiskUsage == 0)
        session.finishTasksAndInvalidate()

        let uncached = self.session(nil)
        _ = try await self.text(uncached, server.url("/cache/none?cc=max-age%3D60"))
        _ = try await self.text(uncached, server.url("/cache/none?cc=max-age%3D60"))
        #expect(server.requestCount(forKey: "cache-none") == 2)
        uncached.finishTasksAndInvalidate()
        try await server.shutdown()
    }

    @Test("A stale entry is revalidated with If-None-Match: a 304 delivers the stored body with refreshed headers, a 200 replaces it")
    func etagRevalidation() async throws {
        defer { try? FileManager.default.removeItem(at: self.directory) }
        let server = try await FaultInjectingHTTPServer.start()
        let session = self.session(self.makeCache())
        defer { session.finishTasksAndInvalidate() }
        let url = server.url("/cache/tag?cc=no-cache&etag=1")
        let (first, _) = try await self.text(session, url)
        let (second, response) = try await self.text(session, url)
        #expect(first == "tag version 1\n" && second == first)
        #expect(response.statusCode == 200, "a revalidated entry is delivered as the original 200")
        #expect(response.value(forHTTPHeaderField: "X-Revalidated") == "1", "headers of the 304 refresh the entry")
        #expect(server.requests.last?.header("If-None-Match") == "\"tag-1\"")
        #expect(server.requests.first?.header("If-None-Match") == nil)

        server.bumpVersion(of: "tag")
        let (third, changed) = try await self.text(session, url)
        #expect(third == "tag version 2\n" && changed.value(forHTTPHeaderField: "ETag") == "\"tag-2\"")
        let (fourth, _) = try await self.text(session, url)
        #expect(fourth == third && server.requests.last?.header("If-None-Match") == "\"tag-2\"")
        #expect(server.requestCount(forKey: "cache-tag") == 4)
        try await server.shutdown()
    }

    @Test("Last-Modified revalidation sends If-Modified-Since; Expires in the past means stale")
    func lastModifiedRevalidation() async throws {
        defer { try? FileManager.default.removeItem(at: self.directory) }
        let server = try await FaultInjectingHTTPServer.start()
        let session = self.session(self.makeCache())
        defer { session.finishTasksAndInvalidate() }
        let url = server.url("/cache/dated?lastModified=1&expires=-10")
        _ = try await self.text(session, url)
        let (second, response) = try await self.text(session, url)
        #expect(second == "dated version 1\n" && response.value(forHTTPHeaderField: "X-Revalidated") == "1")
        #expect(server.requests.last?.header("If-Modified-Since") == response.value(forHTTPHeaderField: "Last-Modified"))
        #expect(server.requestCount(forKey: "cache-dated") == 2)
        try await server.shutdown()
    }

    @Test("Cache policies: returnCacheDataDontLoad, returnCacheDataElseLoad, reloadIgnoringLocalCacheData, reloadRevalidatingCacheData")
    func policies() async throws {
        defer { try? FileManager.default.removeItem(at: self.directory) }
        let server = try await FaultInjectingHTTPServer.start()
        let session = self.session(self.makeCache())
        defer { session.finishTasksAndInvalidate() }
        let url = server.url("/cache/policy?cc=max-age%3D0&etag=1")

        let error = await #expect(throws: URLError.self) { _ = try await self.text(session, url, policy: .returnCacheDataDontLoad) }
        #expect(error?.code == .resourceUnavailable)
        #expect(server.requestCount(forKey: "cache-policy") == 0)

        _ = try await self.text(session, url)  // stored, and stale at once (max-age=0)
        server.bumpVersion(of: "policy")
        #expect(try await self.text(session, url, policy: .returnCacheDataDontLoad).0 == "policy version 1\n")
        #expect(try await self.text(session, url, policy: .returnCacheDataElseLoad).0 == "policy version 1\n")
        #expect(server.requestCount(forKey: "cache-policy") == 1)

        #expect(try await self.text(session, url, policy: .reloadIgnoringLocalCacheData).0 == "policy version 2\n")
        #expect(server.requests.last?.header("If-None-Match") == nil)
        _ = try await self.text(session, url, policy: .reloadRevalidatingCacheData)
        #expect(server.requests.last?.header("If-None-Match") == "\"policy-2\"")
        #expect(server.requestCount(forKey: "cache-policy") == 3)

        // The configuration's policy applies to requests that leave it to the session.
        let offline = self.session(session.configuration.urlCache, policy: .returnCacheDataDontLoad)
        #expect(try await self.text(offline, url).0 == "policy version 2\n")
        offline.finishTasksAndInvalidate()
        #expect(server.requestCount(forKey: "cache-policy") == 3)
        try await server.shutdown()
    }

    @Test("willCacheResponse can refuse, keep in memory only, or replace an entry")
    func willCacheResponse() async throws {
        defer { try? FileManager.default.removeItem(at: self.directory) }
        let server = try await FaultInjectingHTTPServer.start()

        let refusing = CachingDelegate(.refuse)
        let cache = self.makeCache()
        let session = self.session(cache, delegate: refusing)
        let url = server.url("/cache/asked?cc=max-age%3D60")
        _ = await refusing.fetch(url, in: session)
        _ = await refusing.fetch(url, in: session)
        #expect(refusing.proposals.count == 2)
        #expect(refusing.proposals.first.map { String(decoding: $0.data, as: UTF8.self) } == "asked version 1\n")
        #expect(server.requestCount(forKey: "cache-asked") == 2)
        session.finishTasksAndInvalidate()

        let memoryOnly = CachingDelegate(.memoryOnly)
        let memorySession = self.session(cache, delegate: memoryOnly)
        _ = await memoryOnly.fetch(server.url("/cache/memory?cc=max-age%3D60"), in: memorySession)
        let (data, _) = await memoryOnly.fetch(server.url("/cache/memory?cc=max-age%3D60"), in: memorySession)
        #expect(String(decoding: data, as: UTF8.self) == "memory version 1\n")
        #expect(server.requestCount(forKey: "cache-memory") == 1)
        #expect(memoryOnly.proposals.count == 1, "not asked for a response answered from the cache")
        #expect(cache.currentDiskUsage == 0 && cache.currentMemoryUsage > 0)
        memorySession.finishTasksAndInvalidate()

        let replacing = CachingDelegate(.replaceBody("replaced\n"))
        let replacingSession = self.session(cache, delegate: replacing)
        _ = await replacing.fetch(server.url("/cache/swap?cc=max-age%3D60"), in: replacingSession)
        let (swapped, _) = await replacing.fetch(server.url("/cache/swap?cc=max-age%3D60"), in: replacingSession)
        #expect(String(decoding: swapped, as: UTF8.self) == "replaced\n")
        replacingSession.finishTasksAndInvalidate()
        try await server.shutdown()
    }

    @Test("Disk entries outlive the cache object; a damaged entry file is dropped, not served")
    func diskPersistence() async throws {
        defer { try? FileManager.default.removeItem(at: self.directory) }
        let server = try await FaultInjectingHTTPServer.start()
        let url = server.url("/cache/disk?cc=max-age%3D600")
        let first = self.session(self.makeCache())
        _ = try await self.text(first, url)
        first.finishTasksAndInvalidate()
        let files = try FileManager.default.contentsOfDirectory(atPath: self.directory.path)
        #expect(files.count == 1 && files.first?.hasSuffix(".haulcache") == true)

        let reopened = self.makeCache()
        #expect(reopened.currentDiskUsage > 0)
        let second = self.session(reopened)
        #expect(try await self.text(second, url).0 == "disk version 1\n")
        #expect(server.requestCount(forKey: "cache-disk") == 1)
        second.finishTasksAndInvalidate()

        // Damage the file: the next cache object must not serve it.
        let file = self.directory.appendingPathComponent(files[0])
        try Data([0, 0, 0x40, 0, 1, 2, 3]).write(to: file)
        let third = self.session(self.makeCache())
        #expect(try await self.text(third, url).0 == "disk version 1\n")
        #expect(server.requestCount(forKey: "cache-disk") == 2)
        third.finishTasksAndInvalidate()
        try await server.shutdown()
    }

    @Test("Vary: an entry answers only requests with the same values of the varying headers")
    func vary() async throws {
        defer { try? FileManager.default.removeItem(at: self.directory) }
        let server = try await FaultInjectingHTTPServer.start()
        let session = self.session(self.makeCache())
        defer { session.finishTasksAndInvalidate() }
        let url = server.url("/cache/lang?cc=max-age%3D60&vary=Accept-Language")
        #expect(try await self.text(session, url, headers: ["Accept-Language": "en"]).0 == "lang version 1 for en\n")
        #expect(try await self.text(session, url, headers: ["Accept-Language": "en"]).0 == "lang version 1 for en\n")
        #expect(server.requestCount(forKey: "cache-lang") == 1)
        #expect(try await self.text(session, url, headers: ["Accept-Language": "fr"]).0 == "lang version 1 for fr\n")
        #expect(server.requestCount(forKey: "cache-lang") == 2)
        try await server.shutdown()
    }

    @Test("A successful POST to a URL invalidates its entry")
    func unsafeMethodInvalidates() async throws {
        defer { try? FileManager.default.removeItem(at: self.directory) }
        let server = try await FaultInjectingHTTPServer.start()
        let session = self.session(self.makeCache())
        defer { session.finishTasksAndInvalidate() }
        let url = server.url("/cache/post?cc=max-age%3D60")
        _ = try await self.text(session, url)
        var post = URLRequest(url: url)
        post.httpMethod = "POST"
        post.httpBody = Data("x".utf8)
        _ = try await session.data(for: post)
        _ = try await self.text(session, url)
        #expect(server.requestCount(forKey: "cache-post") == 3)
        try await server.shutdown()
    }

    @Test("Capacities: entries over 5 % are not stored; memory is trimmed least recently used first")
    func capacities() async throws {
        let cache = TransferURLCache(memoryCapacity: 2000, diskCapacity: 0)
        #expect(cache.directory == nil && cache.diskCapacity == 0)
        let request = { (name: String) in URLRequest(url: URL(string: "http://127.0.0.1:1/\(name)")!) }
        let response = { (name: String, size: Int) in
            CachedURLResponse(
                response: HTTPURLResponse(url: URL(string: "http://127.0.0.1:1/\(name)")!, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: ["Cache-Control": "max-age=60"])!,
                data: Data(repeating: 7, count: size)
            )
        }
        cache.storeCachedResponse(response("big", 101), for: request("big"))
        #expect(cache.cachedResponse(for: request("big")) == nil, "101 bytes is over 5 % of 2000")
        for name in ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p"] {
            cache.storeCachedResponse(response(name, 100), for: request(name))
            _ = cache.cachedResponse(for: request("a"))  // keep "a" recently used
        }
        #expect(cache.currentMemoryUsage <= 2000)
        #expect(cache.cachedResponse(for: request("a"))?.data.count == 100)
        #expect(cache.cachedResponse(for: request("b")) == nil, "the least recently used entries went first")
        #expect(cache.cachedResponse(for: request("p")) != nil)
        cache.removeAllCachedResponses()
        #expect(cache.currentMemoryUsage == 0 && cache.cachedResponse(for: request("a")) == nil)
    }

    @Test("Disk capacity: the oldest entry files go first once the files exceed it")
    func diskCapacity() throws {
        defer { try? FileManager.default.removeItem(at: self.directory) }
        let cache = TransferURLCache(memoryCapacity: 0, diskCapacity: 20_000, directory: self.directory)
        for index in 0..<30 {
            let url = URL(string: "http://127.0.0.1:1/disk/\(index)")!
            let response = HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: ["Cache-Control": "max-age=60"])!
            cache.storeCachedResponse(CachedURLResponse(response: response, data: Data(repeating: UInt8(index), count: 900)), for: URLRequest(url: url))
            Thread.sleep(forTimeInterval: 0.01)  // distinct modification times
        }
        let usage = cache.currentDiskUsage
        #expect(usage <= 20_000 && usage > 15_000, "\(usage)")
        #expect(cache.cachedResponse(for: URLRequest(url: URL(string: "http://127.0.0.1:1/disk/0")!)) == nil)
        #expect(cache.cachedResponse(for: URLRequest(url: URL(string: "http://127.0.0.1:1/disk/29")!))?.data.count == 900)
        let files = try FileManager.default.contentsOfDirectory(atPath: self.directory.path)
        #expect(files.count < 30 && files.count >= 14, "\(files.count)")
    }
}
