import AsyncHTTPClient
import Foundation
import HaulCore
import NIOCore
import NIOHTTP1
import NIOSSL

/// The AsyncHTTPClient delegate for one request/response exchange of a ``TransferRun``: asks the
/// run's ``DownloadStateMachine`` what to do with the head, then hands each body chunk, without a
/// copy, to a ``FileBodyWriter`` that writes it into the partial file off the event loop (or
/// hands it to the observer).
///
/// AsyncHTTPClient calls a delegate's methods one after another on the task's event loop, so
/// the mutable fields below are only ever touched from that one thread at a time.
final class ExchangeDelegate: HTTPClientResponseDelegate, HTTP1ResponseSink, @unchecked Sendable {
    /// How an exchange ended, as far as the network goes.
    enum Response: Sendable {
        case ended(TransferRun.ExchangeResult)
        /// The body of a download ended; the run judges it once the writer has drained.
        case fileBodyEnded(ResponseInfo)
    }

    /// Ends an exchange early on purpose (the future of a head or body callback fails with it).
    enum Abort: Error {
        case requestAgainWithoutRange
        case failed(URLError)
        /// The server answered with an unsuccessful `status` (kept typed for the retry rules).
        case serverStatus(Int, URLError)
        /// A segmented download's first lane has all its bytes; the others go on.
        case segmentDone
    }

    private enum Mode {
        case awaitingHead
        case redirect(ResponseInfo, ByteBuffer)
        case challenge(ResponseInfo, ByteBuffer)
        case toObserver(ResponseInfo)
        case toFile(ResponseInfo, FileBodyWriter)
        case alreadyComplete(ResponseInfo, total: Int64)
        case notModified(ResponseInfo)
    }

    /// A redirect body larger than this is not kept (it is only used when a redirect is refused).
    private static let maximumRedirectBodyBytes = 1 << 20

    private let run: TransferRun
    private let url: URL
    private let request: TransferRequest
    private var mode = Mode.awaitingHead
    /// The body collected for the session's cache, while it stays small enough.
    private var cacheBody: ByteBuffer?
    private var cacheLimit = 0
    private let requestTime = Date()
    private var responseTime = Date()
    /// What this exchange measured; read by the run once the exchange has ended.
    private(set) var record: TransactionRecord
    /// The writer of a body going to a file; the run waits for it to drain once the exchange
    /// has ended, before it judges the body or closes the file.
    var fileWriter: FileBodyWriter? {
        if case .toFile(_, let writer) = self.mode { writer } else { nil }
    }

    /// The TLS configuration the request was sent with (the extra lanes of a segmented download
    /// use it too).
    var tlsConfiguration: TLSConfiguration?
    /// The other lanes, when the body is fetched over several connections.
    private(set) var segments: SegmentGroup?

    /// Whether the exchange's timing and sizes are recorded (``TransactionRecord``): only for
    /// task metrics, so a download that reports none skips the clock reads and counting.
    private let recordsMetrics: Bool

    /// `HTTP/1.1` and the like; the usual versions without formatting a string.
    private static func versionText(_ version: HTTPVersion) -> String {
        switch (version.major, version.minor) {
        case (1, 1): "HTTP/1.1"
        case (2, 0): "HTTP/2.0"
        case (1, 0): "HTTP/1.0"
        default: "HTTP/\(version.major).\(version.minor)"
        }
    }

    init(run: TransferRun, request: TransferRequest) {
        self.recordsMetrics = run.engine.configuration.recordsMetrics
        self.run = run
        self.url = request.url
        self.request = request
        self.record = TransactionRecord(request: request, fetchStart: self.requestTime)
    }

    func didSendRequestHead(task: HTTPClient.Task<Response>, _ head: HTTPRequestHead) {
        self.record.requestStart = self.record.requestStart ?? Date()
        // "METHOD URI HTTP/1.1\r\n", "Name: value\r\n" per field, "\r\n".
        var bytes = head.method.rawValue.utf8.count + 1 + head.uri.utf8.count + 11
        for (name, value) in head.headers { bytes += name.utf8.count + 2 + value.utf8.count + 2 }
        self.record.requestHeaderBytes = Int64(bytes + 2)
    }

    func didSendRequestPart(task: HTTPClient.Task<Response>, _ part: IOData) {
        self.record.requestBodyBytes += Int64(part.readableBytes)
    }

    func didSendRequest(task: HTTPClient.Task<Response>) {
        self.record.requestEnd = Date()
    }

    func didReceiveHead(task: HTTPClient.Task<Response>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        self.receivedHead(head, on: task.eventLoop)
    }

    func receivedHead(_ head: HTTPResponseHead, on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        if self.recordsMetrics {
            self.record.responseStart = Date()
            // "HTTP/1.1 200 OK\r\n", "Name: value\r\n" per field, "\r\n".
            var headBytes = 9 + 4 + head.status.reasonPhrase.utf8.count + 2
            for (name, value) in head.headers { headBytes += name.utf8.count + 2 + value.utf8.count + 2 }
            self.record.responseHeaderBytes = Int64(headBytes + 2)
            self.record.networkProtocolName = head.version.major == 2 ? "h2" : "http/\(head.version.major).\(head.version.minor)"
        }
        var fields: [HTTPHeaderFields.Field] = []
        fields.reserveCapacity(head.headers.count)
        for (name, value) in head.headers { fields.append(HTTPHeaderFields.Field(name: name, value: value)) }
        let headers = HTTPHeaderFields(fields: fields)
        if let jar = self.run.engine.cookieJar {
            let setCookies = head.headers["Set-Cookie"]
            if !setCookies.isEmpty { jar.store(setCookie: setCookies, from: self.url) }
        }
        let response = ResponseInfo(
            url: self.url,
            statusCode: Int(head.status.code),
            headers: headers,
            httpVersion: Self.versionText(head.version)
        )
        self.record.response = response
        if RedirectPolicy.isRedirect(status: response.statusCode), headers["Location"] != nil {
            self.mode = .redirect(response, ByteBuffer())
            return eventLoop.makeSucceededVoidFuture()
        }
        if response.statusCode == 401, headers["WWW-Authenticate"] != nil, self.run.observer.handlesAuthentication {
            self.mode = .challenge(response, ByteBuffer())
            return eventLoop.makeSucceededVoidFuture()
        }
        guard case .file(let path, _) = self.run.destination else {
            self.responseTime = Date()
            if response.statusCode == 304, self.run.isRevalidating {
                self.mode = .notModified(response)
                return eventLoop.makeSucceededVoidFuture()
            }
            if let cache = self.run.engine.responseCache,
                HTTPCacheRules.isStorable(
                    method: self.request.method,
                    requestHeaders: self.request.headers,
                    statusCode: response.statusCode,
                    responseHeaders: headers
                )
            {
                self.cacheBody = ByteBuffer()
                self.cacheLimit = cache.maximumEntryBytes
            }
            self.run.state.withLock { $0.lastResponse = response }
            self.mode = .toObserver(response)
            self.run.observer.transferRun(
                self.run,
                didReceive: response,
                resumedAtOffset: nil,
                expectedTotal: RangeResumeRules.contentLength(of: headers)
            )
            return eventLoop.makeSucceededVoidFuture()
        }
        let action = self.run.state.withLock { state in
            state.lastResponse = response
            return state.machine.responseHeadReceived(status: response.statusCode, headers: headers)
        }
        switch action {
        case .writeBody(let fileOffset, let truncateFile, let resumedAtOffset, let expectedTotal):
            // Opening and truncating touch the disk: the writer's first job, off the event loop.
            let run = self.run
            let group = run.makeSegmentGroup(response: response, request: self.request, fileOffset: fileOffset, path: path, tlsConfiguration: self.tlsConfiguration)
            self.segments = group
            let eventLoop = eventLoop
            let writer = FileBodyWriter(
                open: { () throws(URLError) -> PartialFile in
                    // A fresh body empties the file as it is opened (one system call less).
                    let file = try run.openFile(path: path, emptied: truncateFile && fileOffset == 0)
                    if truncateFile, fileOffset > 0 { try file.truncate(to: fileOffset) }
                    // Other lanes write only once the file is cut where it had to be.
                    if let group { eventLoop.execute { group.fileIsReady() } }
                    return file
                },
                offset: fileOffset,
                eventLoop: eventLoop,
                pool: run.engine.fileIOPool,
                // A segmented download's first connection is one lane among the others: it
                // gets their share of the memory, not a single download's.
                bufferLimit: group?.laneBufferLimit ?? FileBodyWriter.defaultBufferLimit,
                opensUnnamed: run.createsUnnamedFile && truncateFile && fileOffset == 0,
                // A lane's share is not the body's length: only a whole body goes on the loop.
                expectedBodyBytes: group == nil ? expectedTotal.map { $0 - fileOffset } : nil,
                offloadsSlowCreation: run.engine.configuration.offloadsSlowFileCreation
            ) { count in
                let (total, expected) = run.state.withLock { state in
                    state.machine.bodyPartWritten(byteCount: count)
                    return (state.machine.bytesOnDisk, state.machine.expectedTotal)
                }
                if let group {
                    group.written(0, count: count)
                } else {
                    run.observer.transferRun(run, didWrite: count, totalOnDisk: total, expectedTotal: expected)
                }
            }
            group?.primaryWriterCreated(writer)
            self.mode = .toFile(response, writer)
            self.run.observer.transferRun(self.run, didReceive: response, resumedAtOffset: resumedAtOffset, expectedTotal: expectedTotal)
        case .finishWithExistingBytes(let total):
            self.mode = .alreadyComplete(response, total: total)
            self.run.observer.transferRun(self.run, didReceive: response, resumedAtOffset: total, expectedTotal: total)
        case .requestAgainWithoutRange:
            return eventLoop.makeFailedFuture(Abort.requestAgainWithoutRange)
        case .fail(let reason):
            return eventLoop.makeFailedFuture(
                Abort.failed(URLError(.badServerResponse, userInfo: [NSLocalizedDescriptionKey: reason]))
            )
        case .failKeepingBytes(let status):
            return eventLoop.makeFailedFuture(
                Abort.serverStatus(
                    status,
                    URLError(
                        .badServerResponse,
                        userInfo: [NSLocalizedDescriptionKey: "server answered the resume request with status \(status)"]
                    )
                )
            )
        }
        return eventLoop.makeSucceededVoidFuture()
    }

    func didReceiveBodyPart(task: HTTPClient.Task<Response>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        self.receivedBodyPart(buffer, on: task.eventLoop)
    }

    /// The download's own connection: a large body is read in large buffers.
    var readsInLargeBuffers: Bool { true }

    func receivedBodyPart(_ buffer: ByteBuffer, on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        self.record.responseBodyBytes += Int64(buffer.readableBytes)
        switch self.mode {
        case .toFile(_, let writer):
            return self.writeToFile(buffer, writer: writer, eventLoop: eventLoop)
        case .toObserver:
            if var body = self.cacheBody {
                self.cacheBody = nil  // no copy-on-write while appending
                if body.readableBytes + buffer.readableBytes <= self.cacheLimit {
                    var copy = buffer
                    body.writeBuffer(&copy)
                    self.cacheBody = body
                }
            }
            self.run.observer.transferRun(self.run, didReceive: buffer)
            if let wait = self.run.observer.bodyDeliveryWindow?.wait(on: eventLoop) {
                // The consumer is behind: not reading is what slows the sender down.
                return wait
            }
        case .redirect(let response, var body):
            if body.readableBytes + buffer.readableBytes <= Self.maximumRedirectBodyBytes {
                var copy = buffer
                body.writeBuffer(&copy)
                self.mode = .redirect(response, body)
            }
        case .challenge(let response, var body):
            if body.readableBytes + buffer.readableBytes <= Self.maximumRedirectBodyBytes {
                var copy = buffer
                body.writeBuffer(&copy)
                self.mode = .challenge(response, body)
            }
        case .awaitingHead, .alreadyComplete, .notModified:
            break
        }
        return eventLoop.makeSucceededVoidFuture()
    }

    /// Queues a body chunk for the file, within the lane of a segmented download, honouring
    /// the speed limits and the writer's room.
    private func writeToFile(_ buffer: ByteBuffer, writer: FileBodyWriter, eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        var buffer = buffer
        if let group = self.segments {
            // Lane 0 stops where another lane's bytes begin; bytes past that point wait until
            // it is known whether that lane delivers.
            let allowed = group.received(0, count: buffer.readableBytes)
            if group.hasReceivedAll(0) {
                let rest = buffer.getSlice(at: buffer.readerIndex + allowed, length: buffer.readableBytes - allowed)!
                if allowed > 0 { _ = writer.enqueue(buffer.getSlice(at: buffer.readerIndex, length: allowed)!) }
                return group.primaryAtEnd().flatMap { goesOn in
                    guard goesOn else {
                        group.markPrimaryLaneDone()
                        return eventLoop.makeFailedFuture(Abort.segmentDone)
                    }
                    return rest.readableBytes > 0 ? self.writeToFile(rest, writer: writer, eventLoop: eventLoop) : eventLoop.makeSucceededVoidFuture()
                }
            }
        }
        let count = buffer.readableBytes
        // A failed write ends the exchange with the file's error ("No space left on device").
        let room = writer.enqueue(buffer)?.flatMapErrorThrowing { error in
            throw Abort.failed(error as? URLError ?? URLError(.cannotWriteToFile))
        }
        return self.run.readOn(after: count, room: room, on: eventLoop)
    }

    func didReceiveError(task: HTTPClient.Task<Response>, _ error: any Error) {}

    func didFinishRequest(task: HTTPClient.Task<Response>) throws -> Response {
        try self.finishedResponse()
    }

    /// How the exchange ended, once the whole response arrived (AsyncHTTPClient's
    /// `didFinishRequest`).
    func finishedResponse() throws -> Response {
        if self.recordsMetrics { self.record.responseEnd = Date() }
        switch self.mode {
        case .redirect(let response, let body):
            return .ended(.redirect(response, body: body))
        case .challenge(let response, let body):
            return .ended(.challenge(response, body: body))
        case .toObserver(let response):
            if let body = self.cacheBody {
                let candidate = StoredResponse(
                    url: response.url,
                    statusCode: response.statusCode,
                    headers: response.headers,
                    body: Data(body.readableBytesView),
                    requestTime: self.requestTime,
                    responseTime: self.responseTime,
                    varyingRequestHeaders: HTTPCacheRules.varyingRequestHeaders(request: self.request.headers, response: response.headers)
                )
                self.run.state.withLock { $0.cacheCandidate = candidate }
            }
            return .ended(.completed(response, total: 0))
        case .notModified(let response):
            return .ended(.notModified(response))
        case .alreadyComplete(let response, let total):
            return .ended(.completed(response, total: total))
        case .toFile(let response, _):
            // Judged by the run once the writer has drained (bytes count once they are on disk).
            return .fileBodyEnded(response)
        case .awaitingHead:
            throw Abort.failed(URLError(.badServerResponse))
        }
    }
}

extension TransferRun {
    /// The partial file, opened on first use and kept open for the rest of the run.
    func openFile(path: String, emptied: Bool = false) throws(URLError) -> PartialFile {
        if let file = self.state.withLock({ $0.file }) {
            if emptied { try file.truncate(to: 0) }
            return file
        }
        if emptied, self.createsUnnamedFile, let file = PartialFile.openUnnamed(path: path) {
            self.state.withLock {
                $0.file = file
                $0.fileIsUnnamed = true
            }
            return file
        }
        let file = try PartialFile.open(path: path, emptied: emptied)
        self.state.withLock { $0.file = file }
        return file
    }
}
