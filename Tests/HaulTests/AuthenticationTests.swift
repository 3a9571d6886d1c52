import Foundation
import Haul
import HaulCore
import HaulTestSupport
import Synchronization
import Testing

/// Answers challenges with a scripted decision and records what it was asked.
final class ChallengeDelegate: TransferSessionTaskDelegate, Sendable {
    struct Asked: Sendable, Equatable {
        var method: String
        var realm: String?
        var previousFailureCount: Int
        var proposedUser: String?
    }

    private let answers: Mutex<[(URLSession.AuthChallengeDisposition, URLCredential?)]>
    let asked = Mutex<[Asked]>([])

    init(_ answers: [(URLSession.AuthChallengeDisposition, URLCredential?)]) {
        self.answers = Mutex(answers.map { ($0.0, $0.1) })
    }

    func urlSession(
        _ session: TransferSession,
        task: TransferSessionTask,
        didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (TransferSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        self.asked.withLock {
            $0.append(Asked(
                method: challenge.protectionSpace.authenticationMethod,
                realm: challenge.protectionSpace.realm,
                previousFailureCount: challenge.previousFailureCount,
                proposedUser: challenge.proposedCredential?.user
            ))
        }
        let answer = self.answers.withLock { $0.isEmpty ? (.performDefaultHandling, nil) : $0.removeFirst() }
        completionHandler(answer.0, answer.1)
    }
}

@Suite("Authentication challenges")
struct AuthenticationTests {
    static func credential(_ user: String, _ password: String, _ persistence: URLCredential.Persistence = .forSession) -> URLCredential {
        URLCredential(user: user, password: password, persistence: persistence)
    }

    func run(_ url: URL, delegate: ChallengeDelegate, configure: (TransferSessionConfiguration) -> Void = { _ in }) async throws -> (Int, String) {
        let configuration = TransferSessionConfiguration.ephemeral
        configure(configuration)
        let session = TransferSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let (data, response) = try await session.data(from: url)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
    }

    @Test("Basic: the delegate's credential is sent and accepted")
    func basic() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let delegate = ChallengeDelegate([(.useCredential, Self.credential("ada", "lovelace"))])
        let (status, body) = try await self.run(server.url("/auth/basic?user=ada&pass=lovelace&realm=lab"), delegate: delegate)
        #expect(status == 200 && body == "hello ada\n")
        #expect(delegate.asked.withLock { $0 } == [.init(method: NSURLAuthenticationMethodHTTPBasic, realm: "lab", previousFailureCount: 0, proposedUser: nil)])
        #expect(server.requests.last?.header("Authorization") == HTTPAuthorization.basic(user: "ada", password: "lovelace"))
        try await server.shutdown()
    }

    @Test("Digest (MD5 and SHA-256, qop=auth) is preferred over Basic and accepted")
    func digest() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        for algorithm in ["MD5", "SHA-256"] {
            let delegate = ChallengeDelegate([(.useCredential, Self.credential("grace", "hopper"))])
            let (status, body) = try await self.run(server.url("/auth/both?user=grace&pass=hopper&algorithm=\(algorithm)&q=1"), delegate: delegate)
            #expect(status == 200 && body == "hello grace\n", "\(algorithm)")
            #expect(delegate.asked.withLock { $0.map(\.method) } == [NSURLAuthenticationMethodHTTPDigest])
            #expect(server.requests.last?.header("Authorization")?.hasPrefix("Digest username=\"grace\"") == true)
        }
        try await server.shutdown()
    }

    @Test("A refused credential comes back with previousFailureCount 1; cancelling fails the task")
    func refusedThenCancelled() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let delegate = ChallengeDelegate([(.useCredential, Self.credential("ada", "wrong")), (.cancelAuthenticationChallenge, nil)])
        do {
            _ = try await self.run(server.url("/auth/basic?user=ada&pass=right"), delegate: delegate)
            Issue.record("a cancelled challenge did not fail the task")
        } catch let error as URLError {
            #expect(error.code == .cancelled)
        }
        #expect(delegate.asked.withLock { $0.map(\.previousFailureCount) } == [0, 1])
        try await server.shutdown()
    }

    @Test("Without a credential the 401 and its body are the result; rejecting Digest moves on to Basic")
    func noCredentialAndReject() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let none = ChallengeDelegate([(.performDefaultHandling, nil)])
        let (status, body) = try await self.run(server.url("/auth/basic"), delegate: none)
        #expect(status == 401 && body == "who are you?\n")

        let rejecting = ChallengeDelegate([(.rejectProtectionSpace, nil), (.useCredential, Self.credential("user", "secret"))])
        let (second, _) = try await self.run(server.url("/auth/both"), delegate: rejecting)
        #expect(second == 200)
        #expect(rejecting.asked.withLock { $0.map(\.method) } == [NSURLAuthenticationMethodHTTPDigest, NSURLAuthenticationMethodHTTPBasic])
        try await server.shutdown()
    }

    @Test("Default handling uses the URL's user and password, or the storage's default credential; .useCredential is kept")
    func defaultHandling() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        var components = URLComponents(url: server.url("/auth/digest?user=u1&pass=p1"), resolvingAgainstBaseURL: false)!
        components.user = "u1"
        components.password = "p1"
        let fromURL = ChallengeDelegate([])
        #expect(try await self.run(components.url!, delegate: fromURL).0 == 200)
        #expect(fromURL.asked.withLock { $0.first?.proposedUser } == "u1")

        let storage = TransferCredentialStorage()
        let space = URLProtectionSpace(host: "127.0.0.1", port: server.port, protocol: "http", realm: "kept", authenticationMethod: NSURLAuthenticationMethodHTTPBasic)
        storage.setDefaultCredential(Self.credential("u2", "p2"), for: space)
        let fromStorage = ChallengeDelegate([])
        #expect(try await self.run(server.url("/auth/basic?user=u2&pass=p2&realm=kept"), delegate: fromStorage) { $0.urlCredentialStorage = storage }.0 == 200)

        let learning = TransferCredentialStorage()
        let first = ChallengeDelegate([(.useCredential, Self.credential("u3", "p3"))])
        #expect(try await self.run(server.url("/auth/basic?user=u3&pass=p3&realm=learn"), delegate: first) { $0.urlCredentialStorage = learning }.0 == 200)
        let later = ChallengeDelegate([])
        #expect(try await self.run(server.url("/auth/basic?user=u3&pass=p3&realm=learn"), delegate: later) { $0.urlCredentialStorage = learning }.0 == 200,
            "the credential used before is the default next time")
        #expect(later.asked.withLock { $0.first?.proposedUser } == "u3")
        try await server.shutdown()
    }

    @Test("Accepted credentials are sent again before a 401 for the same area; Digest counts its nonce up")
    func preemptive() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let other = try await FaultInjectingHTTPServer.start()
        let delegate = ChallengeDelegate([(.useCredential, Self.credential("ada", "lovelace"))])
        let session = TransferSession(configuration: .ephemeral, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        for round in 1...3 {
            let (data, _) = try await session.data(from: server.url("/auth/digest?user=ada&pass=lovelace&round=\(round)"))
            #expect(String(decoding: data, as: UTF8.self) == "hello ada\n")
        }
        #expect(delegate.asked.withLock { $0.count } == 1, "asked once for the area")
        let authorizations = server.requests.map { $0.header("Authorization") }
        #expect(server.requests.count == 4, "one 401, then three accepted requests")
        #expect(authorizations.first == .some(nil))
        #expect(authorizations.dropFirst().allSatisfy { $0?.hasPrefix("Digest username=\"ada\"") == true })
        #expect(authorizations.compactMap { $0?.firstMatch(of: /nc=([0-9a-f]{8})/).map { String($0.1) } } == ["00000001", "00000002", "00000003"])

        // Outside the area (another path directory, another port): nothing is sent unasked.
        _ = try await session.data(from: server.url("/file/open?size=10"))
        #expect(server.requests.last?.header("Authorization") == nil)
        _ = try await session.data(from: other.url("/auth/digest?user=ada&pass=lovelace"))
        #expect(other.requests.first?.header("Authorization") == nil)
        try await server.shutdown()
        try await other.shutdown()
    }

    @Test("A credential with persistence .none is used once and not sent again unasked")
    func noPersistenceNoReuse() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let once = Self.credential("ada", "lovelace", .none)
        let delegate = ChallengeDelegate([(.useCredential, once), (.useCredential, once)])
        let session = TransferSession(configuration: .ephemeral, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        _ = try await session.data(from: server.url("/auth/basic?user=ada&pass=lovelace&n=1"))
        _ = try await session.data(from: server.url("/auth/basic?user=ada&pass=lovelace&n=2"))
        #expect(delegate.asked.withLock { $0.count } == 2)
        #expect(server.requests.count == 4)
        try await server.shutdown()
    }
}

@Suite("WWW-Authenticate parsing")
struct ChallengeParsingTests {
    @Test("Several challenges in one value, quoted strings with commas and escapes")
    func parsing() {
        let parsed = AuthenticationChallenge.parse([#"Digest realm="a, b", qop="auth,auth-int", nonce="x\"y", Basic realm=plain"#, "Bearer"])
        #expect(parsed.map(\.scheme) == ["Digest", "Basic", "Bearer"])
        #expect(parsed[0].realm == "a, b" && parsed[0].parameters["nonce"] == "x\"y" && parsed[0].parameters["qop"] == "auth,auth-int")
        #expect(parsed[1].realm == "plain")
    }

    @Test("The Digest answer matches RFC 7616's example")
    func rfcExample() {
        // RFC 7616 §3.9.1, SHA-256 variant, with the hash supplied by the test.
        let challenge = AuthenticationChallenge(scheme: "Digest", parameters: [
            "realm": "http-auth@example.org", "qop": "auth, auth-int", "algorithm": "MD5",
            "nonce": "7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v", "opaque": "FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS",
        ])
        let header = HTTPAuthorization.digest(
            challenge: challenge, user: "Mufasa", password: "Circle of Life", method: "GET", uri: "/dir/index.html",
            clientNonce: "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ", count: 1,
            hash: { _, text in TestContent.md5Hex(text) }
        )
        #expect(header?.contains(#"response="8ca523f5e9506fed4657c9700eebdbec""#) == true, "\(header ?? "nil")")
        #expect(header?.contains("nc=00000001") == true && header?.contains("qop=auth") == true)
    }

}
