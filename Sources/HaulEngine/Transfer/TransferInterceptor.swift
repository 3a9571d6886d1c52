import Foundation
import HaulCore
import NIOCore
import Synchronization

/// Answers requests without the network (a session's custom protocol handlers, the way apps
/// stub the network in tests). Asked once per request a run is about to send, redirects
/// included; the first interceptor that returns a loader answers.
package protocol TransferInterceptor: Sendable {
    func loader(for request: TransferRequest) -> (any TransferLoader)?
}

/// One intercepted exchange. ``start(_:)`` is called once; the loader reports through the sink
/// (response first, then data, then finish or fail), from any thread. ``stop()`` may come at
/// any time after start.
package protocol TransferLoader: Sendable {
    func start(_ sink: TransferLoaderSink)
    func stop()
}

/// Where a loader reports; events after the first finish or failure are ignored.
package final class TransferLoaderSink: Sendable {
    package enum Event: Sendable {
        case response(ResponseInfo)
        /// The loader redirects: the run asks the observer, then sends `request` (to another
        /// loader, or to the network).
        case redirect(ResponseInfo, TransferRequest)
        case data(Data)
        case finished
        case failed(URLError)
    }

    let continuation: AsyncStream<Event>.Continuation
    private let ended = Mutex(false)

    init(_ continuation: AsyncStream<Event>.Continuation) {
        self.continuation = continuation
    }

    package func send(_ event: Event) {
        let isLast: Bool
        switch event {
        case .finished, .failed, .redirect: isLast = true
        default: isLast = false
        }
        let alreadyEnded = self.ended.withLock { ended -> Bool in
            defer { if isLast { ended = true } }
            return ended
        }
        guard !alreadyEnded else { return }
        self.continuation.yield(event)
        if isLast { self.continuation.finish() }
    }
}

extension TransferRun {
    /// How an intercepted exchange ended.
    enum InterceptedResult {
        case ended(TransferOutcome)
        /// The loader redirected (before any response) to `request`.
        case redirected(ResponseInfo, TransferRequest)
    }

    /// Runs an intercepted exchange: its response and data go through the same observer calls
    /// (and into the same partial file) as a network response's would.
    func runIntercepted(_ loader: any TransferLoader, request: TransferRequest) async -> InterceptedResult {
        let (events, continuation) = AsyncStream<TransferLoaderSink.Event>.makeStream()
        let sink = TransferLoaderSink(continuation)
        self.state.withLock { $0.interceptedLoader = loader }
        defer { self.state.withLock { $0.interceptedLoader = nil } }
        loader.start(sink)
        var response: ResponseInfo?
        var file: PartialFile?
        var written: Int64 = 0
        for await event in events {
            if let stopped = self.stoppedOutcome() {
                loader.stop()
                return .ended(stopped)
            }
            switch event {
            case .response(let head):
                guard response == nil else { continue }
                response = head
                self.state.withLock { $0.lastResponse = head }
                let expected = RangeResumeRules.contentLength(of: head.headers)
                self.observer.transferRun(self, didReceive: head, resumedAtOffset: nil, expectedTotal: expected)
                if case .file(let path, _) = self.destination {
                    do {
                        file = try self.openFile(path: path)
                        try file?.truncate(to: 0)
                    } catch {
                        loader.stop()
                        return .ended(self.failure(error))
                    }
                }
            case .data(let data):
                guard response != nil else {
                    loader.stop()
                    return .ended(self.failure(URLError(.badServerResponse, userInfo: [NSLocalizedDescriptionKey: "a protocol handler sent data before a response"])))
                }
                if let file {
                    do { try file.write(ByteBuffer(bytes: data), at: written) } catch {
                        loader.stop()
                        return .ended(self.failure(error))
                    }
                    written += Int64(data.count)
                    self.observer.transferRun(self, didWrite: data.count, totalOnDisk: written, expectedTotal: nil)
                } else {
                    written += Int64(data.count)
                    self.observer.transferRun(self, didReceive: ByteBuffer(bytes: data))
                }
            case .finished:
                guard let response else {
                    return .ended(self.failure(URLError(.badServerResponse, userInfo: [NSLocalizedDescriptionKey: "a protocol handler finished without a response"])))
                }
                return .ended(.completed(response: response, bytesOnDisk: file == nil ? 0 : written))
            case .failed(let error):
                return .ended(self.failure(error))
            case .redirect(let head, let next):
                guard response == nil else {
                    return .ended(self.failure(URLError(.badServerResponse, userInfo: [NSLocalizedDescriptionKey: "a protocol handler redirected after its response"])))
                }
                return .redirected(head, next)
            }
        }
        return .ended(self.stoppedOutcome() ?? self.failure(URLError(.cancelled)))
    }
}
