import Crypto
import Foundation
import Haul
import HaulTestSupport
import Testing

/// HTTP/2 against nginx (TLS with ALPN, `http2` on) on 127.0.0.1: the same tasks as over
/// HTTP/1.1, multiplexed on one connection.
@Suite("HTTP/2 against nginx", .serialized, .enabled(if: LoopbackNginx.isAvailable, "nginx is not installed"))
struct HTTP2Tests {
    /// Runs `body` with nginx (a certificate from a test authority) and a session
    /// configuration trusting it; stops nginx and removes the certificates afterwards.
    static func withServer(_ body: (LoopbackNginx, TransferSessionConfiguration) async throws -> Void) async throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        let authority = try certificates.authority(name: "h2-ca")
        let leaf = try certificates.issue(name: "h2-server", by: authority, forClient: false)
        let nginx = try LoopbackNginx.start(certificate: leaf)
        defer { nginx.stop() }
        let configuration = TransferSessionConfiguration.ephemeral
        // Every request goes to the server (the log is what the tests read).
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.tlsAdditionalTrustedCertificates = try TransferTrustedCertificates(pemFile: authority.certificatePath)
        try await body(nginx, configuration)
    }

    static func sha256(_ data: Data) -> String {
        SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
    }

    @Test("Data tasks to one host share one h2 connection; metrics say h2")
    func multiplexing() async throws {
        try await Self.withServer { nginx, configuration in
            for index in 0..<8 { try nginx.addFile("f\(index).bin", size: 100_000 + Int64(index), seed: UInt64(index)) }
            let metrics = MetricsDelegate()
            let session = TransferSession(configuration: configuration, delegate: metrics, delegateQueue: nil)
            // One request first (the connection), then eight at once over it.
            _ = try await session.data(from: nginx.url("/f0.bin"))
            try await withThrowingTaskGroup(of: (Int, Data).self) { group in
                for index in 0..<8 {
                    group.addTask { (index, try await session.data(from: nginx.url("/f\(index).bin")).0) }
                }
                for try await (index, data) in group {
                    #expect(data == Data(TestContent.bytes(0..<(100_000 + Int64(index)), seed: UInt64(index))))
                }
            }
            let log = nginx.accessLog
            #expect(log.count == 9)
            #expect(log.allSatisfy { $0.protocolName == "HTTP/2.0" && $0.status == 200 }, "\(log)")
            #expect(Set(log.map(\.connection)).count == 1, "one connection for all nine: \(log.map(\.connection))")
            #expect(await waitUntil { metrics.collected.withLock { $0.count } == 9 })
            let transactions = metrics.collected.withLock { $0.values.flatMap(\.transactionMetrics) }
            #expect(transactions.count == 9 && transactions.allSatisfy { $0.networkProtocolName == "h2" }, "\(transactions.map { $0.networkProtocolName ?? "-" })")
            #expect(transactions.filter(\.isReusedConnection).count == 8, "all but the first reuse the connection")
            #expect(transactions.filter { $0.connectStartDate != nil }.count == 1, "one connection was opened")
            session.invalidateAndCancel()
        }
    }

    @Test("A download paused with resume data continues over h2 with a Range request")
    func rangeResume() async throws {
        try await Self.withServer { nginx, configuration in
            let size: Int64 = 2_000_000
            try nginx.addFile("big.bin", size: size, seed: 44)
            let session = TransferSession(configuration: configuration)
            let task = session.downloadTask(with: nginx.url("/slow/big.bin"))
            task.resume()
            #expect(await waitUntil(timeout: .seconds(20)) { task.countOfBytesReceived > 300_000 })
            let resumeData = await withCheckedContinuation { continuation in task.cancel { continuation.resume(returning: $0) } }
            let data = try #require(resumeData, "resume data from a paused h2 download")
            let (location, response) = try await session.download(resumeFrom: data)
            #expect((response as? HTTPURLResponse)?.statusCode == 206)
            #expect(try Self.sha256(Data(contentsOf: location)) == Self.sha256(Data(TestContent.bytes(0..<size, seed: 44))))
            try? FileManager.default.removeItem(at: location)
            let log = nginx.accessLog.filter { $0.uri == "/slow/big.bin" }
            #expect(log.count == 2 && log.allSatisfy { $0.protocolName == "HTTP/2.0" }, "\(log)")
            #expect(log.last?.status == 206 && log.last?.range?.hasPrefix("bytes=") == true, "\(log)")
            session.invalidateAndCancel()
        }
    }

    @Test("Uploads over h2: a file PUT arrives whole")
    func upload() async throws {
        try await Self.withServer { nginx, configuration in
            let body = Data(TestContent.bytes(0..<3_000_000, seed: 9))
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("h2-upload-\(UUID().uuidString)")
            try body.write(to: file)
            defer { try? FileManager.default.removeItem(at: file) }
            let session = TransferSession(configuration: configuration)
            var request = URLRequest(url: nginx.url("/up/sent.bin"))
            request.httpMethod = "PUT"
            let (_, response) = try await session.upload(for: request, fromFile: file)
            #expect((response as? HTTPURLResponse)?.statusCode == 201)
            #expect(try Data(contentsOf: nginx.uploads.appendingPathComponent("sent.bin")) == body)
            var small = URLRequest(url: nginx.url("/up/small.bin"))
            small.httpMethod = "PUT"
            _ = try await session.upload(for: small, from: Data("hello h2".utf8))
            #expect(try Data(contentsOf: nginx.uploads.appendingPathComponent("small.bin")) == Data("hello h2".utf8))
            #expect(nginx.accessLog.filter { $0.method == "PUT" }.allSatisfy { $0.protocolName == "HTTP/2.0" })
            session.invalidateAndCancel()
        }
    }

    @Test("A stream the server resets fails only its task; the others on the connection finish")
    func resetStream() async throws {
        try await Self.withServer { nginx, configuration in
            let size: Int64 = 600_000
            try nginx.addFile("steady.bin", size: size, seed: 5)
            let session = TransferSession(configuration: configuration)
            async let steady = session.data(from: nginx.url("/slow/steady.bin"))
            try await Task.sleep(for: .milliseconds(300))
            do {
                _ = try await session.data(from: nginx.url("/reset"))
                Issue.record("a reset stream answered")
            } catch {
                #expect(error is URLError, "\(error)")
            }
            let (data, response) = try await steady
            #expect((response as? HTTPURLResponse)?.statusCode == 200)
            #expect(data == Data(TestContent.bytes(0..<size, seed: 5)))
            // And the connection is still good for more.
            let (again, _) = try await session.data(from: nginx.url("/steady.bin"))
            #expect(again.count == Int(size))
            let log = nginx.accessLog
            #expect(Set(log.map(\.connection)).count == 1, "the reset did not cost the connection: \(log)")
            session.invalidateAndCancel()
        }
    }
}
