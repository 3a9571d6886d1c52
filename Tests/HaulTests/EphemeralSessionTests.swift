import Foundation
import Haul
import HaulCore
import HaulTestSupport
import Testing

@Suite("Ephemeral sessions")
struct EphemeralSessionTests {
    /// Every file under `directory`, recursively.
    static func files(under directory: URL) -> [String] {
        guard let enumerator = FileManager.default.enumerator(atPath: directory.path) else { return [] }
        return enumerator.compactMap { $0 as? String }.sorted()
    }

    @Test("An ephemeral session leaves nothing on disk: no download files, cookies, credentials or cache entries")
    func leavesNothing() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("ephemeral-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        let sharedCookies = TransferCookieStorage.shared.fileURL!
        let cookiesBefore = (try? FileManager.default.attributesOfItem(atPath: sharedCookies.path))?[.modificationDate] as? Date
        let sharedCache = try #require(TransferURLCache.shared.directory)
        let cacheBefore = Self.files(under: sharedCache)

        let configuration = TransferSessionConfiguration.ephemeral
        configuration.temporaryDirectory = scratch
        let delegate = ChallengeDelegate([(.useCredential, URLCredential(user: "e", password: "p", persistence: .permanent))])
        let session = TransferSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
        _ = try await session.data(from: server.url("/setcookie?c=eph%3D1%3B%20Max-Age%3D3600"))
        _ = try await session.data(from: server.url("/auth/basic?user=e&pass=p"))
        _ = try await session.data(from: server.url("/cache/eph?cc=max-age%3D600"))
        _ = try await session.data(from: server.url("/cache/eph?cc=max-age%3D600"))
        #expect(server.requestCount(forKey: "cache-eph") == 1, "the second answer came from the session's cache")
        #expect(configuration.urlCache?.directory == nil && (configuration.urlCache?.currentMemoryUsage ?? 0) > 0)
        var request = URLRequest(url: server.url("/echo"))
        request.httpMethod = "POST"
        _ = try await session.upload(for: request, from: Data(repeating: 7, count: 100_000))
        // The server stalls after 200 kB: the download is surely in flight when the session goes.
        let task = session.downloadTask(with: server.url("/file/eph.bin?size=2000000&stallAfter=200000"))
        task.resume()
        #expect(await waitUntil { task.countOfBytesReceived > 100_000 })
        #expect(!Self.files(under: scratch).isEmpty, "the in-flight download is in the session's directory")
        session.invalidateAndCancel()
        #expect(await waitUntil { task.state == .completed })
        // The session removes its directory once its last task has completed.
        #expect(await waitUntil { Self.files(under: scratch).isEmpty }, "nothing left: \(Self.files(under: scratch))")
        let cookiesAfter = (try? FileManager.default.attributesOfItem(atPath: sharedCookies.path))?[.modificationDate] as? Date
        #expect(cookiesAfter == cookiesBefore, "the shared cookie file was not touched")
        // Other suites running meanwhile may use the shared cache: none of its new entries may be
        // this session's.
        let added = Set(Self.files(under: sharedCache)).subtracting(cacheBefore)
        let ours = added.filter { name in
            let contents = (try? Data(contentsOf: sharedCache.appendingPathComponent(name))) ?? Data()
            // The entry's header names its URL (JSON, slashes escaped).
            let text = String(decoding: contents, as: UTF8.self)
            return text.contains("eph?cc=") || text.contains("eph.bin") || text.contains("setcookie")
        }
        #expect(ours.isEmpty, "the shared cache holds this ephemeral session's answers: \(ours)")
        #expect(configuration.httpCookieStorage?.fileURL == nil, "the cookies lived in memory")
        #expect(configuration.httpCookieStorage?.cookies?.map(\.name) == ["eph"])
        try await server.shutdown()
        try? FileManager.default.removeItem(at: scratch)
    }
}
