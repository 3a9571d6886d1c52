import Foundation
import HaulCore
@testable import HaulDaemon
import HaulTestSupport
import Synchronization
import Testing

/// The queue's drains keep off the CPU the transfer loop runs on (``TransferLoopCPU``). Each
/// check runs on a thread of its own: a thread's CPU set outlives what ran on it.
@Suite("TransferLoopCPU: the queue's bookkeeping beside the transfer loop, not on its core")
struct TransferLoopCPUTests {
    @Test("A thread kept off the loop's CPU may run on every other CPU of the process, and follows the loop when it moves")
    func keepsOffAndFollows() throws {
        let process = try #require(TransferLoopCPU.allowedCPUs(of: getpid()))
        let cpus = process.sorted()
        let tracker = TransferLoopCPU()
        let (first, second) = Self.onOwnThread { () -> (Set<Int32>?, Set<Int32>?) in
            tracker.noteLoopRuns(on: cpus[0])
            tracker.keepCallerOffLoopCPU()
            let first = TransferLoopCPU.allowedCPUs()
            tracker.noteLoopRuns(on: cpus.last!)
            tracker.keepCallerOffLoopCPU()
            return (first, TransferLoopCPU.allowedCPUs())
        }
        if cpus.count >= 2 {
            #expect(first == process.subtracting([cpus[0]]))
            #expect(second == process.subtracting([cpus.last!]), "the loop moved: its new CPU is left to it, its old one is free again")
        } else {
            // One CPU: keeping off it would leave the thread none.
            #expect(first == process && second == process)
        }
    }

    @Test("A thread let go runs on every CPU of the process again, and is kept off the loop's CPU again when asked")
    func releasedAndKeptOffAgain() throws {
        let process = try #require(TransferLoopCPU.allowedCPUs(of: getpid()))
        let cpus = process.sorted()
        let tracker = TransferLoopCPU()
        let (untouched, narrowed, released, again) = Self.onOwnThread { () -> (Set<Int32>?, Set<Int32>?, Set<Int32>?, Set<Int32>?) in
            // Never narrowed: nothing to let go.
            tracker.releaseCaller()
            let untouched = TransferLoopCPU.allowedCPUs()
            tracker.noteLoopRuns(on: cpus[0])
            tracker.keepCallerOffLoopCPU()
            let narrowed = TransferLoopCPU.allowedCPUs()
            tracker.releaseCaller()
            let released = TransferLoopCPU.allowedCPUs()
            // The loop has not moved, yet the thread is narrowed again (it was let go between).
            tracker.keepCallerOffLoopCPU()
            return (untouched, narrowed, released, TransferLoopCPU.allowedCPUs())
        }
        #expect(untouched == process)
        #expect(released == process)
        if cpus.count >= 2 {
            #expect(narrowed == process.subtracting([cpus[0]]))
            #expect(again == process.subtracting([cpus[0]]))
        } else {
            #expect(narrowed == process && again == process)
        }
    }

    @Test("Before the loop reports where it runs, a drain's thread keeps every CPU")
    func nothingBeforeTheLoopReports() throws {
        let process = try #require(TransferLoopCPU.allowedCPUs(of: getpid()))
        let tracker = TransferLoopCPU()
        #expect(tracker.cpu == nil)
        let after = Self.onOwnThread { () -> Set<Int32>? in
            tracker.keepCallerOffLoopCPU()
            return TransferLoopCPU.allowedCPUs()
        }
        #expect(after == process)
    }

    @Test("Queue downloads report the loop's CPU, and the queue's drains run off it")
    func drainsRunOffTheLoop() async throws {
        let process = try #require(TransferLoopCPU.allowedCPUs(of: getpid()))
        let server = try await FaultInjectingHTTPServer.start()
        let harness = try QueueHarness()
        var ids: [Int64] = []
        for index in 0..<12 {
            ids.append(try await harness.queue.add(urls: [server.url("/file/l\(index)?size=4000&seed=\(index)")]).id)
        }
        for id in ids { _ = try await harness.wait(for: id, .complete) }
        let loop = try #require(harness.core.transferLoop.cpu, "each end posted from the loop says where it runs")
        #expect(process.contains(loop))
        if process.count >= 2 {
            // The threads the drains ran on: every CPU of the process but the one the loop had
            // when they drained (it may have moved since).
            let narrowed = Self.threadCPUSets().filter { $0 != process }
            #expect(!narrowed.isEmpty, "no thread of the process was kept off the loop's CPU")
            for set in narrowed {
                #expect(set.isSubset(of: process) && set.count == process.count - 1, "\(set.sorted()) of \(process.sorted())")
            }
        }
        await harness.close()
    }

    /// Runs `body` on a new thread and returns what it returned.
    static func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () -> T) -> T {
        let result = Mutex<T?>(nil)
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            let value = body()
            result.withLock { $0 = value }
            done.signal()
        }
        thread.start()
        done.wait()
        return result.withLock { $0! }
    }

    /// The CPU set of every live thread of this process.
    static func threadCPUSets() -> [Set<Int32>] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.compactMap { pid_t($0) }.compactMap { TransferLoopCPU.allowedCPUs(of: $0) }
    }
}
