import Foundation

extension TransferSession {
    /// Puts a question to the delegate on its queue and waits for the first answer it gives
    /// through its completion handler (later calls of the handler are ignored). `ask` returns
    /// `false` when there is no delegate of the kind that answers; `fallback` is then the answer.
    ///
    /// The one mechanism behind redirects, challenges, server trust, new body streams and
    /// `willCacheResponse`.
    func askDelegate<Answer>(
        fallback: Answer,
        _ ask: @escaping @Sendable (_ delegate: any TransferSessionDelegate, _ answer: @escaping @Sendable (Answer) -> Void) -> Bool
    ) async -> Answer {
        let fallback = UncheckedSendable(fallback)
        let result: UncheckedSendable<Answer> = await withCheckedContinuation { continuation in
            self.enqueueDelegateCall { delegate in
                let once = OnceFlag()
                let answer: @Sendable (Answer) -> Void = { value in
                    if once.claim() { continuation.resume(returning: UncheckedSendable(value)) }
                }
                guard let delegate, ask(delegate, answer) else {
                    answer(fallback.value)
                    return
                }
            }
        }
        return result.value
    }
}
