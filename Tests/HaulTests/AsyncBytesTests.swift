import Crypto
import Foundation
import Haul
import HaulTestSupport
import Testing

@Suite("bytes(for:)")
struct AsyncBytesTests {
    @Test("The response comes before the body; the bytes stream in and add up to the entity")
    func streaming() async throws {
        let env = try await TestEnvironment.make()
        // The server holds the body after 64 KiB until the head is back: bytes(from:) must
        // return at the head, not after the body (however slow a loaded machine is).
        let size = 600_000
        let (bytes, response) = try await env.session.bytes(from: env.server.url("/file/stream?size=\(size)&seed=21&gate=stream&holdAfter=65536"))
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(bytes.task.countOfBytesReceived <= 65_536, "returned at the head, before the body was in")
        env.server.openGate("stream")
        var hasher = SHA256()
        var count = 0
        for try await chunk in bytes.chunks {
            hasher.update(data: chunk)
            count += chunk.count
        }
        #expect(count == size)
        #expect(hasher.finalize().map { String(format: "%02x", $0) }.joined() == TestContent.sha256Hex(size: Int64(size), seed: 21))
        try await env.finish()
    }

    @Test("Iterating bytes and lines works; ending early cancels the transfer")
    func bytesAndLines() async throws {
        let env = try await TestEnvironment.make()
        let (small, _) = try await env.session.bytes(from: URL(string: "data:,abc")!)
        var collected: [UInt8] = []
        for try await byte in small { collected.append(byte) }
        #expect(collected == Array("abc".utf8))
        let (text, _) = try await env.session.bytes(from: URL(string: "data:,one%0D%0Atwo%0Athree")!)
        var lines: [String] = []
        for try await line in text.lines { lines.append(line) }
        #expect(lines == ["one", "two", "three"])

        let (big, _) = try await env.session.bytes(from: env.server.url("/file/endless?size=50000000&rate=2000000"))
        var seen = 0
        for try await _ in big {
            seen += 1
            if seen == 1000 { break }
        }
        #expect(await waitUntil { big.task.state == .completed })
        #expect((big.task.error as? URLError)?.code == .cancelled)
        #expect(big.task.countOfBytesReceived < 50_000_000)
        try await env.finish()
    }

    @Test("A failure before the response is thrown by bytes(for:) itself")
    func failureBeforeResponse() async throws {
        let env = try await TestEnvironment.make()
        do {
            _ = try await env.session.bytes(from: URL(string: "http://127.0.0.1:1/nothing")!)
            Issue.record("a refused connection returned bytes")
        } catch let error as URLError {
            #expect(error.code == .cannotConnectToHost)
        }
        try await env.finish()
    }
}
