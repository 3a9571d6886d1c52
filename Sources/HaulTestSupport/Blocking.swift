import Dispatch

/// Runs `body`, which blocks (a child process's pipe or exit, a server's start), and returns its
/// result to the awaiting task without holding one of the threads that run tasks.
///
/// On a serial queue of its own: libdispatch runs it on an overcommit thread, started for it
/// even when every thread of the global pool is busy. The global queue is only as wide as the
/// machine has cores, and a child process's two pipe reads held both of a 2-core machine's for
/// the whole run: every OperationQueue (the delegate queues of other tests' sessions) waited
/// meanwhile, and their timing checks failed.
///
/// `body` and what it holds are released before the caller resumes, not whenever libdispatch
/// frees the block: a test that drops its last reference to a store and then shuts down the
/// store's event loops saw the store go after them (a CI run crashed in the store's deinit,
/// closing a connection on a loop already shut down).
public func blocking<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    let work = BlockingWork(body)
    return await withCheckedContinuation { continuation in
        DispatchQueue(label: "haul.tests.blocking").async { continuation.resume(returning: work.run()) }
    }
}

/// Holds a `blocking` body until it has run once.
private final class BlockingWork<T>: @unchecked Sendable {
    // @unchecked: `body` is set at creation and taken once, on the one queue that runs it.
    private var body: (@Sendable () -> T)?

    init(_ body: @escaping @Sendable () -> T) { self.body = body }

    /// Runs the body and lets it go before returning its result.
    func run() -> T {
        let body = self.body!
        self.body = nil
        return body()
    }
}
