import Foundation
import HaulTestSupport
import Testing

@Suite("haul get over TLS: untrusted servers, --cacert, --pinnedpubkey, -k")
struct GetTLSTests {
    static func base64(hex: String) -> String {
        var bytes: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            bytes.append(UInt8(hex[index..<next], radix: 16)!)
            index = next
        }
        return Data(bytes).base64EncodedString()
    }

    @Test("An untrusted certificate is exit 5 with advice; --cacert, --pinnedpubkey and -k follow curl's rules")
    func trustOptions() async throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        let identity = try certificates.selfSigned(name: "get-server")
        let server = try await FaultInjectingHTTPServer.start(tls: try TestCertificates.serverConfiguration(identity))
        let directory = try makeTemporaryDirectory()
        let url = server.url("/file/t.bin?size=300000&seed=6").absoluteString
        let digest = TestContent.sha256Hex(size: 300_000, seed: 6)
        let pin = "sha256//" + Self.base64(hex: try identity.publicKeySHA256())
        let wrongPin = "sha256//" + Data(repeating: 0, count: 32).base64EncodedString()
        func get(_ arguments: [String]) async throws -> HaulProcess.Result {
            try await HaulProcess.run(["get", "-q", "--retries", "0"] + arguments + [url], directory: directory)
        }
        func saved(_ name: String) throws -> String? {
            let path = directory.appendingPathComponent(name).path
            return FileManager.default.fileExists(atPath: path) ? try TestContent.sha256Hex(ofFileAt: path) : nil
        }

        let untrusted = try await get(["-o", "a.bin"])
        #expect(untrusted.status == 5, "\(untrusted.standardError)")
        #expect(untrusted.standardError.contains("not trusted"))
        #expect(try saved("a.bin") == nil)

        let viaCA = try await get(["--cacert", identity.certificatePath, "-o", "b.bin"])
        #expect(viaCA.status == 0, "\(viaCA.standardError)")
        #expect(try saved("b.bin") == digest)

        let pinnedAndTrusted = try await get(["--cacert", identity.certificatePath, "--pinnedpubkey", "\(wrongPin);\(pin)", "-o", "c.bin"])
        #expect(pinnedAndTrusted.status == 0, "\(pinnedAndTrusted.standardError)")
        #expect(try saved("c.bin") == digest)

        let pinMismatch = try await get(["-k", "--pinnedpubkey", wrongPin, "-o", "d.bin"])
        #expect(pinMismatch.status == 5)
        #expect(pinMismatch.standardError.contains("--pinnedpubkey"), "\(pinMismatch.standardError)")
        #expect(try saved("d.bin") == nil)

        let pinnedButUntrusted = try await get(["--pinnedpubkey", pin, "-o", "e.bin"])
        #expect(pinnedButUntrusted.status == 5, "a pin adds to verification, as in curl")
        #expect(pinnedButUntrusted.standardError.contains("not trusted"))

        let insecure = try await get(["-k", "-o", "f.bin"])
        #expect(insecure.status == 0)
        #expect(try saved("f.bin") == digest)
        let insecurePinned = try await get(["-k", "--pinnedpubkey", pin, "-o", "g.bin"])
        #expect(insecurePinned.status == 0)
        #expect(try saved("g.bin") == digest)

        let badPin = try await get(["--pinnedpubkey", "md5//abc"])
        #expect(badPin.status == 2 && badPin.standardError.contains("sha256//"))
        let badCA = try await get(["--cacert", "/nonexistent/ca.pem"])
        #expect(badCA.status == 2 && badCA.standardError.contains("--cacert"))
        try await server.shutdown()
    }

    @Test("With -k through a proxy that wants credentials, the trust probe's tunnel carries them too")
    func probeThroughAuthenticatedProxy() async throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        let identity = try certificates.selfSigned(name: "proxied")
        let server = try await FaultInjectingHTTPServer.start(tls: try TestCertificates.serverConfiguration(identity))
        let proxy = try await LoopbackTunnelProxy.start(originPort: server.port, credentials: "u:p")
        let directory = try makeTemporaryDirectory()
        let result = try await HaulProcess.run(
            ["get", "-k", "--retries", "0", "https://origin.haul.test/file/k.bin?size=5000&seed=3"],
            directory: directory,
            environment: ["https_proxy": "http://u:p@127.0.0.1:\(proxy.port)", "no_proxy": ""]
        )
        #expect(result.status == 0, "\(result.standardError)")
        // The probe, the default-verification check that decides how to pin, the download: all
        // three tunnels accepted (a refused one would read "refused origin.haul.test:443").
        #expect(proxy.connectTargets == Array(repeating: "origin.haul.test:443", count: 3))
        #expect(try TestContent.sha256Hex(ofFileAt: directory.appendingPathComponent("k.bin").path) == TestContent.sha256Hex(size: 5000, seed: 3))
        try await proxy.shutdown()
        try await server.shutdown()
    }
}
