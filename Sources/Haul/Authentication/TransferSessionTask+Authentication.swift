import Crypto
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HaulCore
import HaulEngine

extension TransferSessionTask {
    /// Answers a 401: asks the delegate (`didReceive challenge`) for each supported challenge,
    /// Digest before Basic, and turns its decision into an `Authorization` header.
    ///
    /// - `.useCredential`: sent (and kept in the credential storage unless its persistence is
    ///   `.none`); without a credential the 401 is the result.
    /// - `.performDefaultHandling`: the storage's default credential for the protection space,
    ///   else the URL's user and password, tried once; otherwise the 401 is the result.
    /// - `.cancelAuthenticationChallenge`: the task fails with `URLError(.cancelled)`.
    /// - `.rejectProtectionSpace`: the next challenge is tried; none left, the 401 is the result.
    func answerChallenge(_ response: ResponseInfo, request: TransferRequest, previousFailureCount: Int) async -> AuthenticationAnswer {
        let challenges = AuthenticationChallenge.parse(response.headers.values(for: "WWW-Authenticate"))
            .filter { ["digest", "basic"].contains($0.scheme.lowercased()) }
            .sorted { $0.scheme.lowercased() == "digest" && $1.scheme.lowercased() != "digest" }
        let url = request.url
        let storage = self.session.credentialStorage
        // Whatever was sent before the challenge is not good here any more.
        self.session.preemptiveAuthorization.withLock { $0.forget(url: url) }
        for challenge in challenges {
            let isDigest = challenge.scheme.lowercased() == "digest"
            let space = URLProtectionSpace(
                host: url.host ?? "",
                port: url.port ?? (url.scheme?.lowercased() == "https" ? 443 : 80),
                protocol: url.scheme?.lowercased(),
                realm: challenge.realm,
                authenticationMethod: isDigest ? NSURLAuthenticationMethodHTTPDigest : NSURLAuthenticationMethodHTTPBasic
            )
            let proposed = storage?.defaultCredential(for: space) ?? Self.credential(in: url)
            let question = URLAuthenticationChallenge(
                protectionSpace: space,
                proposedCredential: proposed,
                previousFailureCount: previousFailureCount,
                failureResponse: response.httpURLResponse,
                error: nil,
                sender: ChallengeSender()
            )
            let (disposition, given) = await self.askDelegate(question)
            let credential: URLCredential?
            switch disposition {
            case .useCredential:
                credential = given
                if let given { storage?.set(given, for: space) }
            case .performDefaultHandling:
                credential = previousFailureCount == 0 ? proposed : nil
            case .cancelAuthenticationChallenge:
                return .cancel(URLError(.cancelled, userInfo: [NSLocalizedDescriptionKey: "authentication cancelled", NSURLErrorFailingURLErrorKey: url]))
            case .rejectProtectionSpace:
                continue
            @unknown default:
                credential = nil
            }
            guard let credential, let user = credential.user, let password = credential.password else {
                return .proceedWithoutCredential
            }
            // Kept for the next requests to this area, unless the credential is for this once.
            if credential.persistence != .none {
                self.session.preemptiveAuthorization.withLock {
                    $0.remember(url: url, scheme: isDigest ? .digest(challenge) : .basic, user: user, password: password, nonceCount: 1)
                }
            }
            if !isDigest { return .authorize(HTTPAuthorization.basic(user: user, password: password)) }
            let uri = Self.requestURI(url)
            let header = HTTPAuthorization.digest(
                challenge: challenge,
                user: user,
                password: password,
                method: request.method,
                uri: uri,
                clientNonce: Self.clientNonce(),
                count: 1,
                hash: Self.hexDigest
            )
            guard let header else { continue }  // an algorithm we do not speak
            return .authorize(header)
        }
        return .proceedWithoutCredential
    }

    private func askDelegate(_ challenge: URLAuthenticationChallenge) async -> (URLSession.AuthChallengeDisposition, URLCredential?) {
        let question = UncheckedSendable(challenge)
        return await self.session.askDelegate(fallback: (URLSession.AuthChallengeDisposition.performDefaultHandling, URLCredential?.none)) { delegate, answer in
            guard let taskDelegate = delegate as? any TransferSessionTaskDelegate else { return false }
            taskDelegate.urlSession(self.session, task: self, didReceive: question.value) { answer(($0, $1)) }
            return true
        }
    }

    /// The request-target of `url` as Digest signs it: percent-encoded path and query.
    static func requestURI(_ url: URL) -> String {
        let components = URLComponents(url: url, resolvingAgainstBaseURL: false)
        let path = components?.percentEncodedPath.isEmpty == false ? components!.percentEncodedPath : "/"
        return path + (components?.percentEncodedQuery.map { "?" + $0 } ?? "")
    }

    /// Credentials the server accepted before for this area, sent without waiting for a 401.
    func preemptiveAuthorization(for request: TransferRequest) -> String? {
        self.session.preemptiveAuthorization.withLock {
            $0.authorization(
                for: request.url,
                method: request.method,
                uri: { Self.requestURI(request.url) },
                clientNonce: Self.clientNonce,
                hash: Self.hexDigest
            )
        }
    }

    static func credential(in url: URL) -> URLCredential? {
        guard let user = url.user?.removingPercentEncoding ?? url.user, let password = url.password?.removingPercentEncoding ?? url.password else {
            return nil
        }
        return URLCredential(user: user, password: password, persistence: .none)
    }

    /// 128 random bits as hex, from two reads of the system's generator.
    static func clientNonce() -> String {
        var generator = SystemRandomNumberGenerator()
        return String(format: "%016llx%016llx", generator.next() as UInt64, generator.next() as UInt64)
    }

    static func hexDigest(algorithm: String, text: String) -> String? {
        let data = Data(text.utf8)
        switch algorithm.uppercased() {
        case "MD5": return Insecure.MD5.hash(data: data).hexString
        case "SHA-256": return SHA256.hash(data: data).hexString
        default: return nil
        }
    }
}

/// The sender Foundation's challenge object needs; Haul answers through the completion handler.
final class ChallengeSender: NSObject, URLAuthenticationChallengeSender {
    func use(_ credential: URLCredential, for challenge: URLAuthenticationChallenge) {}
    func continueWithoutCredential(for challenge: URLAuthenticationChallenge) {}
    func cancel(_ challenge: URLAuthenticationChallenge) {}
    func performDefaultHandling(for challenge: URLAuthenticationChallenge) {}
    func rejectProtectionSpaceAndContinue(with challenge: URLAuthenticationChallenge) {}
}
