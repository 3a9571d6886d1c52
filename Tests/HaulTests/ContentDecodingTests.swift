import Crypto
import Foundation
import Haul
import HaulTestSupport
import Testing

@Suite("Content decoding of data tasks")
struct ContentDecodingTests {
    @Test("A data task asks for gzip or deflate and gets the decoded body; a download of the same URL keeps it encoded")
    func gzipDataTask() async throws {
        let env = try await TestEnvironment.make()
        let url = env.server.url("/file/text?size=300000&gzip=1&seed=5")
        let (data, response) = try await env.session.data(from: url)
        #expect(env.server.requests.last?.header("Accept-Encoding") == "gzip, deflate")
        let coding = (response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Content-Encoding")
        #expect(coding == "gzip" || coding == "deflate", "the server compressed the body: \(coding ?? "none")")
        #expect(data.count == 300_000)
        #expect(Data(SHA256.hash(data: data)).map { String(format: "%02x", $0) }.joined() == TestContent.sha256Hex(size: 300_000, seed: 5))

        let (location, _) = try await env.session.download(from: url)
        #expect(env.server.requests.last?.header("Accept-Encoding") == "identity", "downloads ask for the file as stored")
        #expect(try Data(contentsOf: location).count == 300_000)
        try await env.finish()
    }

    @Test("An explicit Accept-Encoding is kept")
    func explicitAcceptEncoding() async throws {
        let env = try await TestEnvironment.make()
        var request = URLRequest(url: env.server.url("/file/plain-text?size=1000"))
        request.setValue("identity", forHTTPHeaderField: "Accept-Encoding")
        let (data, _) = try await env.session.data(for: request)
        #expect(data.count == 1000)
        #expect(env.server.requests.last?.header("Accept-Encoding") == "identity")
        try await env.finish()
    }
}
