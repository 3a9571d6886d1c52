import AsyncHTTPClient
import Foundation
import HaulCore
import NIOCore
import NIOPosix
import NIOHTTP1
import NIOSSL
import Synchronization

/// One transfer from first request to outcome: follows redirects (asking the observer), resumes
/// with `Range`/`If-Range` through ``DownloadStateMachine``, streams the body to a file or to the
/// observer, and can be stopped (pause or cancel) at any moment.
///
/// Create it, call ``start(completion:)`` once; the completion is called exactly once.
package final class TransferRun: Sendable {
    /// Why a run was asked to stop.
    package enum StopReason: Sendable, Hashable {
        /// Keep the bytes on disk for a later resume.
        case pause
        /// The user cancelled.
        case cancel
        /// `timeoutIntervalForResource` ran out.
        case resourceTimeout
    }

    /// Where the body goes.
    package enum Destination: Sendable {
        /// Into the partial file at `path`, continuing from `resume` when given.
        case file(path: String, resume: ResumePoint?)
        /// To the observer's `didReceive body`.
        case observer
    }

    struct State: Sendable {
        var machine: DownloadStateMachine
        var stopReason: StopReason?
        var currentTask: RunningExchange<ExchangeDelegate.Response>?
        var runningTask: Task<Void, Never>?
        var file: PartialFile?
        /// Whether ``file`` has no name yet (``TransferRun/opensUnnamedFile``).
        var fileIsUnnamed = false
        /// The unnamed file of a completed run, open until its owner names it
        /// (``TransferRun/takeUnnamedFile()``).
        var finishedUnnamedFile: PartialFile?
        var lastResponse: ResponseInfo?
        /// The loader answering an intercepted request, stopped with the run.
        var interceptedLoader: (any TransferLoader)?
        /// The cache entry this run's conditional request revalidates.
        var revalidating: StoredResponse?
        /// The response collected for the cache, stored once the observer agrees.
        var cacheCandidate: StoredResponse?
        /// One record per exchange so far (and per answer from the cache).
        var transactions: [TransactionRecord] = []
        /// The extra connections of a segmented download, once the response allowed them.
        var segments: SegmentGroup?
        /// Times a lane's answer named another entity and the run asked again.
        var segmentRestarts = 0
        /// Mirrors that may not contribute, and why (kept across the run's segment groups).
        var droppedMirrors: [URL: String] = [:]
        /// The primary and mirrors of the last segment group (kept when it ends).
        var lastSourceReports: [SegmentSourceReport] = []

        /// The point the run started from (its destination's).
        let initialPoint: ResumePoint?

        /// Where the download could continue from after it stopped: the map of a segmented
        /// download, else what the state machine wrote in order; before any answer came (the
        /// file as the run found it: stopped while it waited for a slot, or refused a
        /// connection), the point it started from, map included (the state machine keeps only
        /// a point it can send a range for, so a map whose first bytes are missing was lost).
        mutating func stopPoint() -> ResumePoint? {
            let untouched = self.lastResponse == nil
            let point = self.machine.transferStopped()
            if let segments { return segments.resumePoint }
            return untouched ? self.initialPoint : point
        }
    }

    package let engine: TransferEngine
    package let initialRequest: TransferRequest
    let destination: Destination
    let resourceTimeout: Duration?
    let observer: any TransferRunObserver
    /// Speed limits this run honours (its own, the queue's); reading pauses for the longest
    /// wait any of them asks for.
    let bandwidthLimiters: [BandwidthLimiter]
    /// Connections this run may use at once per server; `nil`: the engine's setting.
    let maximumConnections: Int?
    /// Other URLs of the same file: a segmented download fetches from them too.
    let mirrors: [URL]
    /// How a mirror proves it serves the primary's entity.
    let mirrorPolicy: MirrorRules.Policy
    /// Whether a fresh download's partial file is created without a name
    /// (``PartialFile/openUnnamed(path:)``): no directory lock to create it, nothing left behind
    /// by a crash before its first checkpoint. It gets its partial name when a checkpoint needs
    /// one (``nameFile()``) or when the run stops with bytes to continue from; a completed one
    /// is handed to the owner to link under its final name (``takeUnnamedFile()``). A small
    /// complete body (at most 64 KiB) is then written on the event loop itself: no thread hop.
    let opensUnnamedFile: Bool
    /// The slot the run takes before its first request, waiting for it if none is free
    /// (hauld's core with a look-ahead); `nil`: it starts at once.
    let admission: (any RunAdmission)?
    /// Whether a fresh body goes into an unnamed file: asked for, and no earlier partial file
    /// to continue (a resumed download keeps writing its named one).
    var createsUnnamedFile: Bool {
        guard self.opensUnnamedFile, case .file(_, nil) = self.destination else { return false }
        return true
    }
    let state: Mutex<State>
    /// The engine's event loop: every exchange, its connection and its delegate live on it.
    package var eventLoop: any EventLoop { self.engine.eventLoop }

    package init(
        engine: TransferEngine,
        request: TransferRequest,
        destination: Destination,
        resourceTimeout: Duration?,
        bandwidthLimiters: [BandwidthLimiter] = [],
        maximumConnections: Int? = nil,
        mirrors: [URL] = [],
        mirrorPolicy: MirrorRules.Policy = .sameValidators,
        opensUnnamedFile: Bool = false,
        admission: (any RunAdmission)? = nil,
        observer: any TransferRunObserver
    ) {
        self.opensUnnamedFile = opensUnnamedFile
        self.admission = admission
        self.bandwidthLimiters = bandwidthLimiters
        self.maximumConnections = maximumConnections
        self.mirrors = mirrors
        self.mirrorPolicy = mirrorPolicy
        self.engine = engine
        self.initialRequest = request
        self.destination = destination
        self.resourceTimeout = resourceTimeout
        self.observer = observer
        let resume: ResumePoint? = if case .file(_, let point) = destination { point } else { nil }
        self.state = Mutex(State(machine: DownloadStateMachine(method: request.method, resume: resume), initialPoint: resume))
    }

    /// Starts the run. `completion` is called exactly once, from a task of the run's own, on the
    /// engine's event loop: it must not block (hand disk work to a thread pool or a queue).
    package func start(completion: @escaping @Sendable (TransferOutcome) -> Void) {
        // The resource timeout is a timer on the event loop, cancelled when the run ends.
        let timeout = self.resourceTimeout.map { duration -> Scheduled<Void> in
            let (seconds, attoseconds) = duration.components
            let nanoseconds = seconds > Int64.max / 1_000_000_000 ? Int64.max : seconds * 1_000_000_000 + attoseconds / 1_000_000_000
            return self.eventLoop.scheduleTask(in: .nanoseconds(nanoseconds)) { [weak self] in
                self?.stop(.resourceTimeout)
            }
        }
        // The run's steps follow its exchanges on the engine's loop (no thread hop per await).
        let task = Task(executorPreference: self.engine.taskExecutor) {
            let (outcome, slot) = await self.run()
            let settled = self.settleFile(after: outcome)
            timeout?.cancel()
            completion(settled)
            // The slot goes back as the run ends, after its completion told its owner (on this
            // loop, to the next run waiting for one): a run admitted in it on another loop is
            // heard of after this one's end, never before.
            slot?.leave()
        }
        self.state.withLock { $0.runningTask = task }
    }

    /// Asks the run to stop. The run ends with `.stopped` (or `.failed(.timedOut)` for a resource
    /// timeout) and keeps the bytes on disk. Has no effect once the run has ended or after the
    /// first call.
    package func stop(_ reason: StopReason) {
        let (task, running, loader) = self.state.withLock { state -> (RunningExchange<ExchangeDelegate.Response>?, Task<Void, Never>?, (any TransferLoader)?) in
            guard state.stopReason == nil else { return (nil, nil, nil) }
            state.stopReason = reason
            return (state.currentTask, state.runningTask, state.interceptedLoader)
        }
        task?.cancel()
        running?.cancel()
        loader?.stop()
        self.state.withLock { $0.segments }?.stop()
    }

    /// Stops the run if it does not hold its slot yet (it waits for one at its ``RunAdmission``,
    /// or has not asked yet): it has sent nothing, and ends `.stopped` with `reason` and the
    /// point it started from. A run holding its slot (it may be fetching), or taking none, is
    /// left alone.
    ///
    /// - Returns: whether the run was stopped.
    package func stopUnlessAdmitted(_ reason: StopReason) -> Bool {
        guard let admission = self.admission else { return false }
        // The reason is set before the run can learn it was taken out of the line: it ends
        // stopped, not failed by the cancellation.
        let withdrawn = admission.withdraw {
            self.state.withLock { state in
                if state.stopReason == nil { state.stopReason = reason }
            }
        }
        // Taken out, its task ends at the gate (at once if it waits there) with nothing sent.
        return withdrawn
    }

    /// What each exchange of the run measured, in order. Complete once the run has ended.
    package var transactions: [TransactionRecord] { self.state.withLock { $0.transactions } }

    /// Bytes of the entity on disk right now.
    package var bytesOnDisk: Int64 { self.state.withLock { $0.segments?.doneBytes ?? $0.machine.bytesOnDisk } }

    /// Connections fetching this download's body now (more than one when segmented).
    package var connectionCount: Int { self.state.withLock { $0.segments?.laneCount ?? ($0.currentTask == nil ? 0 : 1) } }

    /// The primary and each mirror of a segmented download: bytes written from it, its
    /// connections now, why it was dropped. Empty until the download is segmented; the last
    /// group's figures once it ended.
    package var sourceReports: [SegmentSourceReport] {
        self.state.withLock { $0.segments?.sourceReports ?? $0.lastSourceReports }
    }

    /// Where the download could continue from if it stopped now (a segmented download's map of
    /// what is on disk; sync the file before recording it).
    package var currentResumePoint: ResumePoint? {
        self.state.withLock { $0.segments?.resumePoint ?? $0.machine.resumePoint }
    }

    // MARK: - The run loop

    /// The run's outcome, and the slot it holds (given back by the caller once the outcome is
    /// told), if it took one.
    private func run() async -> (TransferOutcome, (any RunAdmission)?) {
        guard let admission = self.admission else { return (await self.runAdmitted(), nil) }
        do {
            try await admission.enter()
        } catch {
            // Stopped while it waited: nothing fetched, nothing to keep.
            return (self.stoppedOutcome() ?? self.failure(URLError(.cancelled)), nil)
        }
        return (await self.runAdmitted(), admission)
    }

    private func runAdmitted() async -> TransferOutcome {
        var request = self.initialRequest
        var visited = [request.url]
        var challenges = 0
        var consultedCache = false
        while true {
            if let stopped = self.stoppedOutcome() { return stopped }
            // Custom protocol handlers are asked for every request, redirected ones included.
            if let loader = self.engine.interceptors.lazy.compactMap({ $0.loader(for: request) }).first {
                let start = Date()
                switch await self.runIntercepted(loader, request: request) {
                case .ended(let outcome):
                    self.recordLocalOutcome(outcome, request: request, start: start)
                    return outcome
                case .redirected(let response, let proposed):
                    self.recordLocalTransaction(request, response: response, bodyBytes: 0, fetchType: .local, start: start)
                    guard visited.count <= self.engine.configuration.maximumRedirects else {
                        return self.failure(Self.urlError(for: RedirectPolicy.Refusal.tooManyRedirects(self.engine.configuration.maximumRedirects), url: request.url))
                    }
                    guard let accepted = await self.observer.transferRun(self, willRedirect: response, to: proposed) else {
                        return self.completeWithRefusedRedirect(response, body: ByteBuffer())
                    }
                    request = accepted
                    visited.append(accepted.url)
                    continue
                }
            }
            if request.origin.hasScheme("file") || request.origin.hasScheme("data") {
                let start = Date()
                let outcome = self.loadLocally(request.url)
                self.recordLocalOutcome(outcome, request: request, start: start)
                return outcome
            }
            if !consultedCache {
                consultedCache = true
                if let answered = self.consultCache(&request) { return answered }
            }
            let host = request.origin.hostKey
            do {
                try await self.engine.limiter.acquire(host: host)
            } catch {
                return self.stoppedOutcome() ?? self.failure(URLError(.cancelled))
            }
            let requestTime = Date()
            let result = await self.exchange(request)
            self.engine.limiter.release(host: host)

            switch result {
            case .completed(let response, let total):
                // Engines without a response cache (haul get, hauld) skip the call: even an
                // empty async call is a task switch (~5,000 instructions a download).
                if self.engine.responseCache != nil {
                    await self.finishCaching(request: request, response: response)
                }
                return .completed(response: response, bytesOnDisk: total)
            case .notModified(let response):
                return self.completeRevalidation(response, requestTime: requestTime)
            case .requestAgainWithoutRange:
                continue
            case .challenge(let response, let body):
                let answer = await self.observer.transferRun(
                    self,
                    authenticationChallenge: response,
                    for: request,
                    previousFailureCount: challenges
                )
                challenges += 1
                switch answer {
                case .authorize(let value):
                    request.headers.replaceOrAdd(name: "Authorization", value: value)
                    continue
                case .proceedWithoutCredential:
                    return self.completeWithRefusedRedirect(response, body: body)
                case .cancel(let error):
                    return self.stoppedOutcome() ?? self.failure(error)
                }
            case .failed(let error, let status):
                return self.stoppedOutcome() ?? self.failure(error, serverStatus: status)
            case .redirect(let response, let body):
                let next: RedirectPolicy.NextRequest
                do {
                    next = try self.engine.redirectPolicy.nextRequest(
                        status: response.statusCode,
                        location: response.headers["Location"],
                        currentURL: request.url,
                        method: request.method,
                        visited: visited
                    )
                } catch {
                    return self.failure(Self.urlError(for: error, url: request.url))
                }
                var proposed = request
                proposed.url = next.url
                proposed.method = next.method
                if next.dropsBody { proposed.body = .none }
                for name in next.headersToRemove { proposed.headers.remove(name: name) }
                self.abandonRevalidation(&proposed)
                guard let accepted = await self.observer.transferRun(self, willRedirect: response, to: proposed) else {
                    return self.completeWithRefusedRedirect(response, body: body)
                }
                request = accepted
                visited.append(accepted.url)
            }
        }
    }

    /// Closes the partial file once the run has ended; an unnamed one is named when the run
    /// stopped with bytes to continue from (else a later attempt would find nothing), kept open
    /// for ``takeUnnamedFile()`` when the run completed, and dropped otherwise.
    private func settleFile(after outcome: TransferOutcome) -> TransferOutcome {
        let (file, isUnnamed) = self.state.withLock { state in
            defer {
                state.file = nil
                state.fileIsUnnamed = false
            }
            return (state.file, state.fileIsUnnamed)
        }
        guard let file else { return outcome }
        guard isUnnamed else {
            file.close()
            return outcome
        }
        switch outcome {
        case .completed:
            self.state.withLock { $0.finishedUnnamedFile = file }
            return outcome
        case .failed(let failure, let response, _?):
            defer { file.close() }
            return Self.giveName(to: file) ? outcome : .failed(failure, response: response, resumePoint: nil)
        case .stopped(let reason, let response, _?):
            defer { file.close() }
            return Self.giveName(to: file) ? outcome : .stopped(reason, response: response, resumePoint: nil)
        case .failed, .stopped:
            file.close()
            return outcome
        }
    }

    /// Links an unnamed partial file under its partial name, replacing a stale file of that
    /// name (an earlier run's leftover with no checkpoint). Whether it has the name now.
    private static func giveName(to file: PartialFile) -> Bool {
        do {
            try file.link(to: file.path)
            return true
        } catch where error.isExists {
            unlink(file.path)
            return (try? file.link(to: file.path)) != nil
        } catch {
            return false
        }
    }

    /// Gives the partial file its name (``PartialFile/path``) if it has none yet, before a
    /// checkpoint names it. Whether the file can be found by its name now (also `true` when it
    /// was created named, or has not been created). Blocks on the file system: call it off the
    /// event loop. Safe from any thread.
    package func nameFile() -> Bool {
        self.state.withLock { state in
            if state.fileIsUnnamed, let file = state.file {
                guard Self.giveName(to: file) else { return false }
                state.fileIsUnnamed = false
            } else if let file = state.finishedUnnamedFile {
                guard Self.giveName(to: file) else { return false }
                file.close()
                state.finishedUnnamedFile = nil
            }
            return true
        }
    }

    /// The completed download's file when it still has no name: the caller links it under its
    /// final name (``PartialFile/link(to:)``) and closes it. `nil` when the file has its partial
    /// name (or there is none): move that instead. Call once the run has completed.
    package func takeUnnamedFile() -> PartialFile? {
        self.state.withLock { state in
            defer { state.finishedUnnamedFile = nil }
            return state.finishedUnnamedFile
        }
    }

    deinit {
        // An unnamed file nobody took is dropped with its descriptor.
        self.state.withLock { $0.finishedUnnamedFile }?.close()
    }

    func stoppedOutcome() -> TransferOutcome? {
        self.state.withLock { state -> TransferOutcome? in
            guard let reason = state.stopReason else { return nil }
            let point = state.stopPoint()
            if reason == .resourceTimeout {
                return .failed(
                    TransferFailure(URLError(.timedOut, userInfo: [NSLocalizedDescriptionKey: "the resource timeout ran out"])),
                    response: state.lastResponse,
                    resumePoint: point
                )
            }
            return .stopped(reason, response: state.lastResponse, resumePoint: point)
        }
    }

    func failure(_ error: URLError, serverStatus: Int? = nil) -> TransferOutcome {
        self.state.withLock { state in
            .failed(TransferFailure(error, serverStatus: serverStatus), response: state.lastResponse, resumePoint: state.stopPoint())
        }
    }

    private func completeWithRefusedRedirect(_ response: ResponseInfo, body: ByteBuffer) -> TransferOutcome {
        self.observer.transferRun(self, didReceive: response, resumedAtOffset: nil, expectedTotal: Int64(body.readableBytes))
        switch self.destination {
        case .observer:
            self.observer.transferRun(self, didReceive: body)
            return .completed(response: response, bytesOnDisk: 0)
        case .file(let path, _):
            do {
                let file = try PartialFile.open(path: path)
                defer { file.close() }
                try file.truncate(to: 0)
                try file.write(body, at: 0)
            } catch {
                return self.failure(error)
            }
            return .completed(response: response, bytesOnDisk: Int64(body.readableBytes))
        }
    }

    // MARK: - One exchange

    enum ExchangeResult: Sendable {
        case completed(ResponseInfo, total: Int64)
        /// A 304 to the run's own revalidation of a cache entry.
        case notModified(ResponseInfo)
        case redirect(ResponseInfo, body: ByteBuffer)
        /// A 401 with `WWW-Authenticate`, its body held back for the observer's decision.
        case challenge(ResponseInfo, body: ByteBuffer)
        case requestAgainWithoutRange
        case failed(URLError, serverStatus: Int? = nil)
    }

    private func exchange(_ request: TransferRequest) async -> ExchangeResult {
        var headers = request.headers
        if case .file = self.destination {
            let extra = self.state.withLock { $0.machine.requestWillBeSent() }
            for (name, value) in extra { headers.replaceOrAdd(name: name, value: value) }
        }
        if !headers.contains("Authorization"), let authorization = self.observer.transferRun(self, preemptiveAuthorizationFor: request) {
            headers.add(name: "Authorization", value: authorization)
        }
        if let jar = self.engine.cookieJar, !headers.contains("Cookie"), let cookies = jar.cookieHeader(for: request.url) {
            headers.add(name: "Cookie", value: cookies)
        }
        var tlsConfiguration: TLSConfiguration?
        if let gate = self.engine.trustGate, request.origin.hasScheme("https"), let host = request.origin.host {
            let proxy = self.engine.configuration.proxies.proxy(for: request.url)
            switch await gate.decision(host: host, port: request.origin.explicitPort ?? 443, proxy: proxy) {
            case .useDefault: break
            case .use(let configuration): tlsConfiguration = configuration
            case .refused(let error): return .failed(error)
            }
        }
        var streamed: BodyStreamSource.Stream?
        if case .stream(let source) = request.body {
            streamed = await source.nextStream()
            guard streamed != nil else {
                return .failed(
                    URLError(
                        .requestBodyStreamExhausted,
                        userInfo: [
                            NSLocalizedDescriptionKey: "no body stream to send (the delegate gave none from needNewBodyStream)",
                            NSURLErrorFailingURLErrorKey: request.url,
                        ]
                    )
                )
            }
        }
        var sentRequest = request
        sentRequest.headers = headers
        let delegate = ExchangeDelegate(run: self, request: sentRequest)
        delegate.tlsConfiguration = tlsConfiguration
        let fieldList = HTTPHeaders(headers.fields.map { ($0.name, $0.value) })
        let task: RunningExchange<ExchangeDelegate.Response>
        var probe: ExchangeLogProbe?
        var connectionLog: ConnectionEventLog?
        var isProxied = false
        let isDownload: Bool = if case .file = self.destination { true } else { false }
        if isDownload,
            let direct = self.engine.startDirectExchange(
                url: request.url, origin: request.origin, method: request.method, headers: fieldList, hasBody: !request.body.isNone,
                sink: delegate, finished: { try delegate.finishedResponse() }
            )
        {
            // A download over plain HTTP: the engine's own connections, no AsyncHTTPClient.
            task = direct
        } else {
            let clientRequest: HTTPClient.Request
            do {
                clientRequest = try HTTPClient.Request(
                    url: request.url,
                    method: HTTPMethod(rawValue: request.method),
                    headers: fieldList,
                    body: try self.body(of: request, stream: streamed),
                    tlsConfiguration: tlsConfiguration
                )
            } catch {
                return .failed(Self.urlError(for: error, url: request.url))
            }
            // `.indifferent`: the client's group is the engine's single loop, so delegate and
            // channel share it anyway, and the pool never opens "overflow" connections beyond the
            // per-host limit as it does for requests that require a particular loop.
            let decodes: Bool = if case .observer = self.destination { true } else { false }
            let (client, log, proxied) = self.engine.client(for: request.url, decodes: decodes)
            connectionLog = log
            isProxied = proxied
            probe = self.engine.configuration.recordsMetrics ? ExchangeLogProbe() : nil
            task = .client(client.execute(request: clientRequest, delegate: delegate, eventLoop: .indifferent, logger: probe?.logger))
        }
        defer {
            if let probe, let connectionLog { self.recordTransaction(delegate.record, probe: probe, connectionLog: connectionLog, isProxied: isProxied) }
        }
        let alreadyStopped = self.state.withLock { state -> Bool in
            state.currentTask = task
            return state.stopReason != nil
        }
        if alreadyStopped { task.cancel() }
        let ended: Result<ExchangeDelegate.Response, any Error>
        do {
            ended = .success(try await task.futureResult.get())
        } catch {
            ended = .failure(error)
        }
        // Every queued byte is in the file (or a write failed) before the run judges the body,
        // records a resume point or closes the file.
        let writeFailure = await delegate.fileWriter?.drain()
        var result: ExchangeResult
        switch ended {
        case .success(.ended(let exchangeResult)):
            result = exchangeResult
        case .success(.fileBodyEnded(let response)):
            result = self.judgeFileBody(response)
        case .failure(let error as ExchangeDelegate.Abort):
            switch error {
            case .requestAgainWithoutRange: result = .requestAgainWithoutRange
            case .failed(let urlError): result = .failed(urlError)
            case .serverStatus(let status, let urlError): result = .failed(urlError, serverStatus: status)
            case .segmentDone: result = .failed(URLError(.cancelled))
            }
        case .failure(let error):
            result = .failed(Self.urlError(for: error, url: request.url))
        }
        // The disk's error ("No space left on device") is the cause, whatever the network did
        // meanwhile.
        if let writeFailure { result = .failed(writeFailure) }
        self.state.withLock { $0.currentTask = nil }
        if let group = delegate.segments { result = await self.finishSegments(group, result: result) }
        return result
    }

    /// The end of a body written to the file: complete, or cut short by the server.
    private func judgeFileBody(_ response: ResponseInfo) -> ExchangeResult {
        switch self.state.withLock({ $0.machine.bodyCompleted() }) {
        case .finish(let total):
            return .completed(response, total: total)
        case .failTruncated(let received, let expected, _):
            return .failed(
                URLError(.networkConnectionLost, userInfo: [NSLocalizedDescriptionKey: "the body ended after \(received) of \(expected) bytes"])
            )
        }
    }

    private func body(of request: TransferRequest, stream: BodyStreamSource.Stream?) throws(URLError) -> HTTPClient.Body? {
        let reader: any UploadBodyReader
        let size: Int64?
        switch request.body {
        case .stream(let source):
            guard let stream else { return nil }
            reader = UploadStreamReader(stream: stream.inputStream)
            size = source.contentLength
        case .none:
            return nil
        case .data(let data):
            reader = UploadDataReader(data: data)
            size = Int64(data.count)
        case .file(let path):
            guard let fileSize = PartialFile.size(at: path), let handle = FileHandle(forReadingAtPath: path) else {
                throw URLError(.fileDoesNotExist, userInfo: [NSLocalizedDescriptionKey: "cannot read the upload file \(path)"])
            }
            reader = UploadFileReader(handle: handle)
            size = fileSize
        }
        let eventLoop = self.eventLoop
        return .stream(contentLength: size) { writer in
            // Sequential 256 KiB chunks, each written when the previous write completed, each
            // reported to the observer (`didSendBodyData`).
            let sent = SentByteCounter()
            // A caller's input stream may block (a pipe, a socket): it is read on NIO's thread
            // pool, never on the session's event loop.
            let blocks = reader is UploadStreamReader
            @Sendable func nextChunk() -> EventLoopFuture<ByteBuffer?> {
                if blocks { return NIOThreadPool.singleton.runIfActive(eventLoop: eventLoop) { try reader.next() } }
                return eventLoop.makeCompletedFuture { try reader.next() }
            }
            @Sendable func writeNext() -> EventLoopFuture<Void> {
                nextChunk().flatMap { chunk in
                    guard let chunk else { return eventLoop.makeSucceededVoidFuture() }
                    let count = Int64(chunk.readableBytes)
                    return writer.write(.byteBuffer(chunk)).flatMap {
                        let total = sent.add(count)
                        self.observer.transferRun(self, didSendBodyBytes: count, totalSent: total, expectedToSend: size ?? -1)
                        return writeNext()
                    }
                }
            }
            return writeNext().always { _ in reader.close() }
        }
    }

    package static func hostKey(_ url: URL) -> String {
        URLOrigin.hostKey(of: url)
    }
}

extension TransferRun {
    /// When an exchange of this run may read on after `count` body bytes: once every speed
    /// limit it passes allows (the longest pause wins) and the file writer has `room`. Not
    /// reading is what slows the sender down (TCP back-pressure). No array per chunk: this runs
    /// for every network read of a limited download, on every lane of a segmented one.
    func readOn(after count: Int, room: EventLoopFuture<Void>?, on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        var pause = TimeAmount.zero
        for limiter in self.bandwidthLimiters { pause = max(pause, limiter.take(count)) }
        if pause > .zero {
            let paused = eventLoop.scheduleTask(in: pause) {}.futureResult
            return room.map { paused.and($0).map { _ in } } ?? paused
        }
        return room ?? eventLoop.makeSucceededVoidFuture()
    }
}

/// Counts the body bytes written so far.
final class SentByteCounter: Sendable {
    private let total = Mutex<Int64>(0)

    func add(_ count: Int64) -> Int64 {
        self.total.withLock { total in
            total += count
            return total
        }
    }
}

/// Reads an upload's body in order, one chunk of at most 256 KiB per call, straight into the
/// buffer that is written to the connection (one copy per byte).
protocol UploadBodyReader: Sendable {
    /// The next chunk, `nil` at the end; throws when the source cannot be read (the request
    /// then fails instead of sending a truncated body).
    func next() throws(URLError) -> ByteBuffer?
    func close()
}

/// The size of one upload chunk (and of one `didSendBodyData` step).
let uploadChunkSize = 256 * 1024

/// An in-memory body, cut into chunks so its progress can be reported.
final class UploadDataReader: UploadBodyReader, @unchecked Sendable {
    // @unchecked: `next()` calls are strictly sequential (each after the previous write completed).
    private let data: Data
    private var offset = 0

    init(data: Data) {
        self.data = data
    }

    func next() throws(URLError) -> ByteBuffer? {
        guard self.offset < self.data.count else { return nil }
        let end = min(self.data.count, self.offset + uploadChunkSize)
        defer { self.offset = end }
        return ByteBuffer(bytes: self.data[(self.data.startIndex + self.offset)..<(self.data.startIndex + end)])
    }

    func close() {}
}

/// Reads a streamed upload's `InputStream` in order, one chunk of at most 256 KiB per call;
/// opens it on the first call and closes it at the end.
final class UploadStreamReader: UploadBodyReader, @unchecked Sendable {
    // @unchecked: `next()` calls are strictly sequential (each after the previous write completed).
    private let stream: InputStream
    private var opened = false

    init(stream: InputStream) {
        self.stream = stream
    }

    func next() throws(URLError) -> ByteBuffer? {
        if !self.opened {
            self.opened = true
            self.stream.open()
        }
        var buffer = ByteBufferAllocator().buffer(capacity: uploadChunkSize)
        var result = 0
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: uploadChunkSize) { bytes in
            result = self.stream.read(bytes.bindMemory(to: UInt8.self).baseAddress!, maxLength: uploadChunkSize)
            return max(0, result)
        }
        if result < 0 {
            throw URLError(
                .cannotOpenFile,
                userInfo: [NSLocalizedDescriptionKey: "the upload's body stream failed: \(self.stream.streamError.map { "\($0)" } ?? "read error")"]
            )
        }
        return result > 0 ? buffer : nil
    }

    func close() {
        self.stream.close()
    }
}

/// Reads an upload's file in order, one chunk per call. Used by one request body at a time,
/// whose writes are sequenced by their futures.
final class UploadFileReader: UploadBodyReader, @unchecked Sendable {
    // @unchecked: `next()` calls are strictly sequential (each after the previous write completed).
    private let handle: FileHandle

    init(handle: FileHandle) {
        self.handle = handle
    }

    func next() throws(URLError) -> ByteBuffer? {
        let descriptor = self.handle.fileDescriptor
        var buffer = ByteBufferAllocator().buffer(capacity: uploadChunkSize)
        var result = 0
        var failure: Int32 = 0
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: uploadChunkSize) { bytes in
            repeat {
                result = read(descriptor, bytes.baseAddress!, uploadChunkSize)
                failure = result < 0 ? errno : 0
            } while failure == EINTR
            return max(0, result)
        }
        if result < 0 {
            throw URLError.fileSystem(.cannotOpenFile, "cannot read the upload file", errno: failure)
        }
        return result > 0 ? buffer : nil
    }

    func close() {
        try? self.handle.close()
    }
}
