import NIOCore

/// Runs the jobs of Swift tasks that prefer it on one NIO event loop.
///
/// A ``TransferRun``'s task awaits futures that complete on its engine's event loop (the
/// exchange, the file writer draining, the host limiter); on the global concurrent executor
/// every such await would wake a pool thread and hop back to the loop for the next step — two
/// thread wake-ups per await, several per request. Preferring the loop keeps the whole run on
/// the thread its connection lives on: a continuation resumed on the loop is queued on the
/// loop, with no wake-up at all.
///
/// Work that blocks (disk reads and writes, file moves) must still go to a thread pool: it
/// would hold up every connection of the engine.
package final class EventLoopTaskExecutor: TaskExecutor, @unchecked Sendable {
    // @unchecked Sendable: immutable; the event loop is thread-safe.
    package let eventLoop: any EventLoop

    package init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        self.eventLoop.execute {
            job.runSynchronously(on: self.asUnownedTaskExecutor())
        }
    }
}
