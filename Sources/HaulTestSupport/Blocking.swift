import Dispatch

/// Runs `body`, which blocks (a child process's pipe or exit, a server's start), and returns its
/// result to the awaiting task without holding one of the threads that run tasks.
///
/// On a serial queue of its own: libdispatch runs it on an overcommit thread, started for it
/// even when every thread of the global pool is busy. The global queue is only as wide as the
/// machine has cores, and a child process's two pipe reads held both of a 2-core machine's for
/// the whole run: every OperationQueue (the delegate queues of other tests' sessions) waited
/// meanwhile, and their timing checks failed.
public func blocking<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        DispatchQueue(label: "haul.tests.blocking").async { continuation.resume(returning: body()) }
    }
}
