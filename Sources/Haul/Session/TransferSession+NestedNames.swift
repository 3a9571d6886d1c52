import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The nested names URLSession code spells through its type: after `URLSession` →
/// `TransferSession`, `TransferSession.AuthChallengeDisposition` in a delegate signature means
/// the same type as `URLSession.AuthChallengeDisposition`, so either spelling compiles.
extension TransferSession {
    public typealias AuthChallengeDisposition = URLSession.AuthChallengeDisposition
    public typealias ResponseDisposition = URLSession.ResponseDisposition
    public typealias DelayedRequestDisposition = URLSession.DelayedRequestDisposition
}

extension TransferSessionTask {
    /// `URLSessionTask.State`: `TransferSessionTask.State.running` as in ported code.
    public typealias State = URLSessionTask.State
}
