import Foundation
import Haul
import HaulCore
import HaulTestSupport
import Testing

@Suite("Proxies")
struct ProxyTests {
    @Test("Settings from the environment and from connectionProxyDictionary; exceptions bypass")
    func settings() {
        let environment = ProxySettings.fromEnvironment([
            "http_proxy": "http://proxy.local:3128/", "HTTPS_PROXY": "secure.local:8443", "no_proxy": "localhost,.internal.org, 10.0.0.1",
        ])
        #expect(environment.http == .init(host: "proxy.local", port: 3128))
        #expect(environment.https == .init(host: "secure.local", port: 8443))
        #expect(environment.proxy(for: URL(string: "http://example.org/a")!) == .init(host: "proxy.local", port: 3128))
        #expect(environment.proxy(for: URL(string: "https://example.org/a")!) == .init(host: "secure.local", port: 8443))
        #expect(environment.proxy(for: URL(string: "http://api.internal.org/")!) == nil)
        #expect(environment.proxy(for: URL(string: "http://internal.org/")!) == nil)
        #expect(environment.proxy(for: URL(string: "http://localhost:8080/")!) == nil)
        #expect(environment.proxy(for: URL(string: "http://10.0.0.1/")!) == nil)
        #expect(ProxySettings.fromEnvironment(["HTTP_PROXY": "ignored:1"]).http == nil, "upper-case HTTP_PROXY is not trusted, as in curl")
        #expect(ProxySettings.fromEnvironment(["http_proxy": "p:1", "no_proxy": "*"]).proxy(for: URL(string: "http://a/")!) == nil)
        let credentialed = ProxySettings.fromEnvironment(["https_proxy": "http://ada:p%40ss%3Aword@proxy.local:3128"])
        #expect(credentialed.https == .init(host: "proxy.local", port: 3128, username: "ada", password: "p@ss:word"))

        let dictionary = ProxySettings.fromDictionary(["HTTPEnable": 1, "HTTPProxy": "p", "HTTPPort": 81, "HTTPSEnable": false, "HTTPSProxy": "q"])
        #expect(dictionary.http == .init(host: "p", port: 81) && dictionary.https == nil)
    }

    @Test("Requests to a host only the proxy knows go through a CONNECT tunnel; excepted hosts go direct")
    func httpProxy() async throws {
        let origin = try await FaultInjectingHTTPServer.start()
        let proxy = try await LoopbackTunnelProxy.start(originPort: origin.port)
        let configuration = TransferSessionConfiguration.ephemeral
        configuration.connectionProxyDictionary = ["HTTPEnable": 1, "HTTPProxy": "127.0.0.1", "HTTPPort": proxy.port, "ExceptionsList": ["127.0.0.1"]]
        let session = TransferSession(configuration: configuration)
        // A host name that resolves nowhere: only the proxy can reach it (the client never looks
        // it up, so no name server is asked; every connection stays on 127.0.0.1).
        let (data, response) = try await session.data(from: URL(string: "http://origin.haul.test/file/p?size=1234&seed=2")!)
        #expect((response as? HTTPURLResponse)?.statusCode == 200 && data.count == 1234)
        #expect(proxy.connectTargets == ["origin.haul.test:80"])
        #expect(origin.requests.last?.header("Host") == "origin.haul.test")
        let (location, _) = try await session.download(from: URL(string: "http://origin.haul.test/file/d?size=99")!)
        #expect(try Data(contentsOf: location).count == 99)
        #expect(origin.requests.count == 2)

        let before = proxy.connectTargets.count
        _ = try await session.data(from: origin.url("/file/direct?size=5"))
        #expect(origin.requests.count == 3 && proxy.connectTargets.count == before, "127.0.0.1 is an exception: direct")
        session.finishTasksAndInvalidate()
        try await proxy.shutdown()
        try await origin.shutdown()
    }

    @Test("https requests open a CONNECT tunnel to port 443 through the https proxy")
    func httpsProxy() async throws {
        let origin = try await FaultInjectingHTTPServer.start()
        let proxy = try await LoopbackTunnelProxy.start(originPort: origin.port)
        let configuration = TransferSessionConfiguration.ephemeral
        configuration.connectionProxyDictionary = ["HTTPSEnable": true, "HTTPSProxy": "127.0.0.1", "HTTPSPort": proxy.port]
        configuration.timeoutIntervalForRequest = 5
        let session = TransferSession(configuration: configuration)
        // The tunnel ends at a plain-HTTP server, so the TLS handshake fails: what matters is
        // that the request went to the proxy as CONNECT secure.haul.test:443.
        await #expect(throws: URLError.self) { _ = try await session.data(from: URL(string: "https://secure.haul.test/x")!) }
        #expect(proxy.connectTargets == ["secure.haul.test:443"])
        session.finishTasksAndInvalidate()
        try await proxy.shutdown()
        try await origin.shutdown()
    }
}
