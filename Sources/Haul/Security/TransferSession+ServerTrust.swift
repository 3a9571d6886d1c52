import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HaulEngine
import Synchronization

/// Puts server-trust questions from the engine to a session's delegate. Created before the
/// session (the engine needs it first), pointed at the session once it exists.
final class ServerTrustAsker: Sendable {
    private let session = Mutex<TransferSession?>(nil)

    func attach(_ session: TransferSession) {
        self.session.withLock { $0 = session }
    }

    func detach() {
        self.session.withLock { $0 = nil }
    }

    /// Asks the session-level `didReceive challenge` on the delegate queue; waits for its
    /// completion handler. No session or no delegate: default handling.
    func ask(_ question: ServerTrustQuestion) async -> ServerTrustAnswer {
        guard let session = self.session.withLock({ $0 }) else { return .performDefaultHandling }
        let trust = TransferServerTrust(
            host: question.host,
            port: question.port,
            certificates: question.certificates.map { Data($0) },
            defaultEvaluation: question.evaluateByDefault
        )
        let failingURL = URL(string: "https://\(question.host):\(question.port)/")
        let disposition = await session.askDelegate(fallback: URLSession.AuthChallengeDisposition.performDefaultHandling) { delegate, answer in
            let challenge = URLAuthenticationChallenge(
                protectionSpace: ServerTrustProtectionSpace(trust: trust),
                proposedCredential: nil,
                previousFailureCount: 0,
                failureResponse: nil,
                error: nil,
                sender: ChallengeSender()
            )
            delegate.urlSession(session, didReceive: challenge) { disposition, _ in answer(disposition) }
            return true
        }
        switch disposition {
        case .useCredential:
            return .trustPresentedChain
        case .cancelAuthenticationChallenge:
            var info: [String: Any] = [NSLocalizedDescriptionKey: "the server's certificate was refused by the session's delegate"]
            if let failingURL { info[NSURLErrorFailingURLErrorKey] = failingURL }
            return .refuse(URLError(.cancelled, userInfo: info))
        case .performDefaultHandling, .rejectProtectionSpace:
            return .performDefaultHandling
        @unknown default:
            return .performDefaultHandling
        }
    }
}
