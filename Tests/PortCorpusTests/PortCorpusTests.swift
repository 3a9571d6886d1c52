import Foundation
import Haul
import HaulTestSupport
import Testing

/// The ported URLSession code (Ported/, made by `scripts/port-corpus` with sed alone) compiles as
/// part of the test build; these run some of it against the loopback server.
@Suite("URLSession code ported by renaming")
struct PortCorpusTests {
    @Test("Ported async code fetches, streams and uploads as it did with URLSession")
    func asyncForms() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let bytes = try await firstBytes(at: server.url("/file/port.bin?size=4096&seed=6"))
        #expect(bytes == TestContent.bytes(0..<16, seed: 6))
        #expect(try await upload(Data(repeating: 7, count: 1000), to: server.url("/echo")) == 200)
        let lines = try await countLines(at: server.url("/headers"))
        #expect(lines >= 2, "one line per request header")
        try await server.shutdown()
    }
}
