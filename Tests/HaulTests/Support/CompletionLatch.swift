import Foundation

/// The first completion a delegate reports (`didCompleteWithError`), awaited by a test:
/// `complete(_:)` keeps the first result, `wait()` returns it as soon as there is one.
final class CompletionLatch: @unchecked Sendable {
    // @unchecked: every field is guarded by `lock`.
    private let lock = NSLock()
    private var result: (any Error)??
    private var waiters: [CheckedContinuation<(any Error)?, Never>] = []

    func complete(_ error: (any Error)?) {
        let waiters = self.lock.withLock { () -> [CheckedContinuation<(any Error)?, Never>] in
            guard self.result == nil else { return [] }
            self.result = .some(error)
            defer { self.waiters = [] }
            return self.waiters
        }
        for waiter in waiters { waiter.resume(returning: error) }
    }

    func wait() async -> (any Error)? {
        await withCheckedContinuation { continuation in
            let done = self.lock.withLock { () -> (any Error)?? in
                if let result = self.result { return .some(result) }
                self.waiters.append(continuation)
                return nil
            }
            if let done { continuation.resume(returning: done) }
        }
    }
}
