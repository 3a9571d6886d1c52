import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HaulEngine
import Synchronization

extension TransferSession {
    /// The body of a response as it arrives, as `URLSession.AsyncBytes`: iterate bytes, or
    /// ``chunks`` for whole network reads, or ``lines``. Ending the iteration early (or
    /// cancelling the iterating task) cancels the transfer.
    public struct AsyncBytes: AsyncSequence, Sendable {
        public typealias Element = UInt8

        /// The data task that delivers the body.
        public let task: TransferSessionDataTask
        /// The body as the network delivers it: one `Data` per read.
        public let chunks: AsyncThrowingStream<Data, any Error>

        public struct AsyncIterator: AsyncIteratorProtocol {
            var base: AsyncThrowingStream<Data, any Error>.AsyncIterator
            var current = Data()
            var index = 0
            /// Cancels the transfer when the iteration is abandoned (the iterator goes away).
            let abandon: CancelOnRelease

            public mutating func next() async throws -> UInt8? {
                while self.index >= self.current.count {
                    guard let next = try await self.base.next() else { return nil }
                    self.current = next
                    self.index = 0
                }
                defer { self.index += 1 }
                return self.current[self.current.startIndex + self.index]
            }
        }

        public func makeAsyncIterator() -> AsyncIterator {
            AsyncIterator(base: self.chunks.makeAsyncIterator(), abandon: CancelOnRelease(self.task))
        }

        /// The body as UTF-8 lines, without their `\n` or `\r\n`; a last line without a newline
        /// is included.
        public var lines: AsyncThrowingStream<String, any Error> {
            let chunks = self.chunks
            return AsyncThrowingStream { continuation in
                let reader = Task {
                    var pending = Data()
                    do {
                        for try await chunk in chunks {
                            pending.append(chunk)
                            while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                                var line = pending[pending.startIndex..<newline]
                                if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
                                continuation.yield(String(decoding: line, as: UTF8.self))
                                pending = Data(pending[pending.index(after: newline)...])
                            }
                        }
                        if !pending.isEmpty { continuation.yield(String(decoding: pending, as: UTF8.self)) }
                        continuation.finish()
                    } catch {
                        continuation.finish(throwing: error)
                    }
                }
                continuation.onTermination = { _ in reader.cancel() }
            }
        }
    }

    /// Starts loading `request` and returns as soon as the response head arrives, with the body
    /// to iterate as it streams in (`URLSession.bytes(for:)`).
    ///
    /// - Throws: the task's `URLError` when it fails before a response arrives.
    public func bytes(for request: URLRequest) async throws -> (AsyncBytes, URLResponse) {
        let (chunks, continuation) = AsyncThrowingStream<Data, any Error>.makeStream()
        let head = HeadWaiter()
        let sink = DataTaskSink(
            response: { response in head.deliver(.success(UncheckedSendable(response))) },
            data: { data in continuation.yield(data) },
            completion: { error in
                if let error {
                    head.deliver(.failure(error))
                    continuation.finish(throwing: error)
                } else {
                    continuation.finish()
                }
            }
        )
        let task = self.makeDataTask(request: request, completionHandler: nil, sink: sink)
        continuation.onTermination = { termination in
            if case .cancelled = termination { task.cancel() }
        }
        let response = try await withTaskCancellationHandler {
            try await head.wait { task.resume() }
        } onCancel: {
            task.cancel()
        }
        // Pulled one chunk at a time: what the consumer takes leaves the task's delivery
        // window, so a slow iteration slows the transfer instead of filling memory.
        let source = ChunkPuller(iterator: chunks.makeAsyncIterator(), window: task.deliveryWindow)
        let paced = AsyncThrowingStream<Data, any Error>(unfolding: { try await source.next() })
        return (AsyncBytes(task: task, chunks: paced), response.value)
    }

    /// Loads `url`; see ``bytes(for:)``.
    public func bytes(from url: URL) async throws -> (AsyncBytes, URLResponse) {
        try await self.bytes(for: URLRequest(url: url))
    }
}

/// Takes the next chunk of a body stream and marks it consumed in the delivery window.
private final class ChunkPuller: @unchecked Sendable {
    // @unchecked: `next()` is called by one consumer at a time (an unfolding stream's puller).
    private var iterator: AsyncThrowingStream<Data, any Error>.AsyncIterator
    private let window: DeliveryWindow

    init(iterator: AsyncThrowingStream<Data, any Error>.AsyncIterator, window: DeliveryWindow) {
        self.iterator = iterator
        self.window = window
    }

    func next() async throws -> Data? {
        let chunk = try await self.iterator.next()
        if let chunk { self.window.consumed(chunk.count) }
        return chunk
    }
}

/// Cancels a task when released (a no-op once the task has completed).
public final class CancelOnRelease: Sendable {
    private let task: TransferSessionTask

    init(_ task: TransferSessionTask) {
        self.task = task
    }

    deinit {
        self.task.cancel()
    }
}

/// Hands the first outcome (response or failure) to the one waiter, whichever comes first.
private final class HeadWaiter: Sendable {
    private struct State {
        var outcome: Result<UncheckedSendable<URLResponse>, any Error>?
        var waiter: CheckedContinuation<UncheckedSendable<URLResponse>, any Error>?
    }

    private let state = Mutex(State())

    func deliver(_ outcome: Result<UncheckedSendable<URLResponse>, any Error>) {
        let waiter = self.state.withLock { state -> CheckedContinuation<UncheckedSendable<URLResponse>, any Error>? in
            guard state.outcome == nil else { return nil }
            state.outcome = outcome
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(with: outcome)
    }

    func wait(starting start: () -> Void) async throws -> UncheckedSendable<URLResponse> {
        try await withCheckedThrowingContinuation { continuation in
            let ready = self.state.withLock { state -> Result<UncheckedSendable<URLResponse>, any Error>? in
                if let outcome = state.outcome { return outcome }
                state.waiter = continuation
                return nil
            }
            if let ready { continuation.resume(with: ready) } else { start() }
        }
    }
}
