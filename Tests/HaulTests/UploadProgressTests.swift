import Foundation
import Haul
import HaulTestSupport
import Testing

@Suite("Upload progress")
struct UploadProgressTests {
    @Test("didSendBodyData reports every chunk of a Data upload, in order, before the response")
    func dataUploadProgress() async throws {
        let env = try await TestEnvironment.make()
        let body = Data(TestContent.bytes(0..<1_000_000, seed: 12))
        var request = URLRequest(url: env.server.url("/echo"))
        request.httpMethod = "PUT"
        let task = env.session.uploadTask(with: request, from: body)
        #expect(task.countOfBytesExpectedToSend == 1_000_000)
        task.resume()
        #expect(await env.delegate.completion(of: task) == nil)
        let events = env.delegate.events
        let sent = events.compactMap { if case .sent(let total, let expected) = $0 { (total, expected) } else { nil } }
        #expect(sent.map(\.0) == [262_144, 524_288, 786_432, 1_000_000], "one report per 256 KiB chunk")
        #expect(sent.allSatisfy { $0.1 == 1_000_000 })
        let lastSent = try #require(events.lastIndex { if case .sent = $0 { true } else { false } })
        let response = try #require(events.firstIndex { if case .response = $0 { true } else { false } })
        #expect(lastSent < response, "the body is sent before the response arrives")
        #expect(task.countOfBytesSent == 1_000_000)
        #expect(env.delegate.receivedData == body, "the server received every byte")
        try await env.finish()
    }

    @Test("An upload from a file reports progress up to the file's size")
    func fileUploadProgress() async throws {
        let env = try await TestEnvironment.make()
        let file = env.directory.appendingPathComponent("upload.bin")
        try Data(TestContent.bytes(0..<600_000, seed: 13)).write(to: file)
        var request = URLRequest(url: env.server.url("/echo"))
        request.httpMethod = "POST"
        let task = env.session.uploadTask(with: request, fromFile: file)
        task.resume()
        #expect(await env.delegate.completion(of: task) == nil)
        let sent = env.delegate.events.compactMap { if case .sent(let total, _) = $0 { total } else { nil } }
        #expect(sent.last == 600_000 && sent == sent.sorted())
        #expect(task.countOfBytesSent == 600_000 && task.countOfBytesExpectedToSend == 600_000)
        #expect(env.delegate.receivedData.count == 600_000)
        try await env.finish()
    }
}
