import Foundation
import Haul
import HaulTestSupport
import Testing

/// A data delegate that holds the delegate queue on its first chunk until released.
final class StallingDataDelegate: TransferSessionDataDelegate, @unchecked Sendable {
    let release = DispatchSemaphore(value: 0)
    private let lock = NSLock()
    private var stalled = false
    private(set) var received = 0
    let latch = CompletionLatch()

    func urlSession(_ session: TransferSession, dataTask: TransferSessionDataTask, didReceive data: Data) {
        let first = self.lock.withLock { () -> Bool in
            self.received += data.count
            defer { self.stalled = true }
            return !self.stalled
        }
        if first { self.release.wait() }
    }

    func urlSession(_ session: TransferSession, task: TransferSessionTask, didCompleteWithError error: (any Error)?) {
        self.latch.complete(error)
    }
}

@Suite("Back-pressure: a slow consumer slows the transfer instead of filling memory")
struct BackPressureTests {
    /// What may leave the server while the client holds still: Haul's 4 MiB delivery window, one
    /// network read, and what the kernel buffers on the way (both ends' auto-tuned socket buffers;
    /// 4 + 4 MiB on some machines, 32 + 4 MiB on others).
    static let allowedInFlight: Int64 = (5 << 20) + KernelSocketBuffers.current().connectionMaximum
    /// Large enough that a transfer ignoring back-pressure would overshoot the allowance by far.
    static let size: Int64 = max(64 << 20, 2 * Self.allowedInFlight)

    @Test("A delegate that stops consuming stops the transfer after the delivery window; all bytes arrive once it goes on")
    func stalledDelegate() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let delegate = StallingDataDelegate()
        // The stalled delegate queue holds its thread: one of its own (a serial dispatch queue
        // runs on an overcommit thread), not one of the global pool's few.
        let delegateQueue = OperationQueue()
        delegateQueue.maxConcurrentOperationCount = 1
        delegateQueue.underlyingQueue = DispatchQueue(label: "haul.tests.stalling-delegate")
        let session = TransferSession(configuration: .ephemeral, delegate: delegate, delegateQueue: delegateQueue)
        defer { session.finishTasksAndInvalidate() }
        session.dataTask(with: server.url("/file/slow?size=\(Self.size)")).resume()
        try await Task.sleep(for: .seconds(1))
        let sentWhileStalled = server.bodyBytesSent(forKey: "slow")
        #expect(sentWhileStalled < Self.allowedInFlight, "\(sentWhileStalled) bytes sent while the delegate was stalled")
        print("back-pressure: \(sentWhileStalled) bytes sent while the delegate was stalled")
        delegate.release.signal()
        #expect(await delegate.latch.wait() == nil)
        #expect(Int64(delegate.received) == Self.size)
        try await server.shutdown()
    }

    @Test("bytes(for:): the transfer waits for the iteration")
    func slowIteration() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let session = TransferSession(configuration: .ephemeral)
        defer { session.finishTasksAndInvalidate() }
        let (bytes, _) = try await session.bytes(from: server.url("/file/iter?size=\(Self.size)"))
        var iterator = bytes.chunks.makeAsyncIterator()
        var total = try await iterator.next()?.count ?? 0
        try await Task.sleep(for: .seconds(1))
        let sentWhileIdle = server.bodyBytesSent(forKey: "iter")
        #expect(sentWhileIdle < Self.allowedInFlight, "\(sentWhileIdle) bytes sent while nobody iterated")
        print("back-pressure: \(sentWhileIdle) bytes sent while nobody iterated")
        while let chunk = try await iterator.next() { total += chunk.count }
        #expect(Int64(total) == Self.size)
        try await server.shutdown()
    }
}
