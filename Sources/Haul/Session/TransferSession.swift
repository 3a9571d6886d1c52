import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HaulCore
import HaulDaemonClient
import HaulEngine
import Synchronization

/// A group of transfers sharing one configuration, connection pool and delegate, shaped like
/// `URLSession` so that URLSession code ports by renaming types.
///
/// ```swift
/// let session = TransferSession(configuration: .default, delegate: self, delegateQueue: nil)
/// let task = session.downloadTask(with: URL(string: "https://example.com/big.iso")!)
/// task.resume()
/// ```
///
/// Delegate methods and completion handlers of one session run one at a time on its
/// ``delegateQueue``, in the order the events happened. The session holds its delegate strongly
/// until it is invalidated, and stays alive until then even without references to it: call
/// ``finishTasksAndInvalidate()`` or ``invalidateAndCancel()`` when done, as with URLSession.
public final class TransferSession: Sendable {
    /// A session with the default configuration and no delegate, for completion-handler and
    /// async use. It cannot be invalidated.
    public static let shared = TransferSession(configuration: .default, delegate: nil, delegateQueue: nil, isShared: true)

    /// The queue delegate methods and completion handlers run on.
    public let delegateQueue: OperationQueue
    let delegateBox: DelegateBox
    let configurationSnapshot: TransferSessionConfiguration.Snapshot
    private let configurationCopy: UncheckedSendable<TransferSessionConfiguration>
    let engine: TransferEngine
    /// Asks the delegate about servers' certificates; `nil` without a delegate.
    private let trustAsker: ServerTrustAsker?
    /// The configuration's credential store (for challenges).
    let credentialStorage: TransferCredentialStorage?
    /// Credentials accepted earlier in this session, sent again before a 401 (in memory only).
    let preemptiveAuthorization = Mutex(PreemptiveAuthorization())
    private let isShared: Bool
    /// Where this session writes in-flight downloads.
    let downloadDirectory: URL

    private enum Phase {
        case active
        case finishing
        case invalidated
    }

    private struct State {
        var tasks: [Int: TransferSessionTask] = [:]
        var nextIdentifier = 1
        var phase = Phase.active
        var sessionDescription: String?
    }

    private let state = Mutex(State())

    /// Creates a session.
    ///
    /// - Parameters:
    ///   - configuration: copied; later changes to it do not affect the session.
    ///   - delegate: receives session, task, data and download events; held until invalidation.
    ///   - delegateQueue: where callbacks run; pass a serial queue (`maxConcurrentOperationCount`
    ///     1) for the one-at-a-time guarantee. `nil` creates a serial queue.
    public convenience init(
        configuration: TransferSessionConfiguration,
        delegate: (any TransferSessionDelegate)?,
        delegateQueue: OperationQueue?
    ) {
        self.init(configuration: configuration, delegate: delegate, delegateQueue: delegateQueue, isShared: false)
    }

    /// Creates a session without a delegate.
    public convenience init(configuration: TransferSessionConfiguration) {
        self.init(configuration: configuration, delegate: nil, delegateQueue: nil, isShared: false)
    }

    private init(
        configuration: TransferSessionConfiguration,
        delegate: (any TransferSessionDelegate)?,
        delegateQueue: OperationQueue?,
        isShared: Bool
    ) {
        let copy = configuration.copy()
        self.configurationCopy = UncheckedSendable(copy)
        self.configurationSnapshot = copy.snapshot
        self.delegateBox = DelegateBox(delegate)
        if let delegateQueue {
            self.delegateQueue = delegateQueue
        } else {
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = 1
            queue.name = "haul.session.delegate"
            self.delegateQueue = queue
        }
        var engineConfiguration = TransferEngine.Configuration()
        engineConfiguration.idleTimeout = .milliseconds(Int64(copy.timeoutIntervalForRequest * 1000))
        engineConfiguration.connectTimeout = .milliseconds(Int64(min(copy.timeoutIntervalForRequest, 30) * 1000))
        engineConfiguration.maximumConnectionsPerHost = copy.httpMaximumConnectionsPerHost
        engineConfiguration.maximumRedirects = copy.maximumRedirects
        engineConfiguration.maximumConnectionsPerDownload = max(1, copy.haulMaximumConnectionsPerDownload)
        engineConfiguration.minimumSegmentBytes = Int64(max(16 << 10, copy.haulMinimumSegmentBytes))
        engineConfiguration.sufficientConnectionSpeed = copy.haulSufficientConnectionSpeed
        engineConfiguration.proxies = copy.proxySettings
        engineConfiguration.tls.minimumVersion = copy.tlsMinimumSupportedProtocolVersion.nioVersion
        engineConfiguration.tls.maximumVersion = copy.tlsMaximumSupportedProtocolVersion.nioVersion
        engineConfiguration.tls.clientIdentity = copy.tlsClientCertificate?.identity
        engineConfiguration.tls.additionalTrustRoots = copy.tlsAdditionalTrustedCertificates?.certificates ?? []
        let cookieJar = copy.httpCookieStorage.map {
            SessionCookieJar(storage: $0, sendsCookies: copy.httpShouldSetCookies, acceptPolicy: copy.httpCookieAcceptPolicy)
        }
        let interceptors: [any TransferInterceptor] = copy.protocolClasses.isEmpty ? [] : [ProtocolClassInterceptor(classes: copy.protocolClasses)]
        // Server trust goes to the delegate, which needs a probe handshake per https server:
        // only sessions with a delegate pay for it.
        let trustAsker = delegate == nil || !copy.asksDelegateAboutServerTrust ? nil : ServerTrustAsker()
        self.trustAsker = trustAsker
        self.engine = TransferEngine(
            configuration: engineConfiguration,
            cookieJar: cookieJar,
            interceptors: interceptors,
            serverTrustHandler: trustAsker.map { asker -> ServerTrustGate.Handler in
                { question in await asker.ask(question) }
            },
            responseCache: copy.urlCache
        )
        self.credentialStorage = copy.urlCredentialStorage
        self.isShared = isShared
        switch copy.kind {
        case .default:
            self.downloadDirectory = copy.temporaryDirectory
        case .ephemeral:
            self.downloadDirectory = copy.temporaryDirectory.appendingPathComponent(
                "ephemeral-\(UUID().uuidString)",
                isDirectory: true
            )
        case .background:
            self.downloadDirectory = copy.temporaryDirectory
        }
        // Like URLSession, a session lives until it is invalidated, even with no reference
        // left to it: its tasks keep running and its delegate keeps being called.
        Self.liveSessions.withLock { $0[ObjectIdentifier(self)] = self }
        trustAsker?.attach(self)
        if copy.kind == .background {
            self.connectBackgroundSession(copy.snapshot)
        }
    }

    /// Sessions not invalidated yet, kept alive on purpose (see `init`).
    private static let liveSessions = Mutex<[ObjectIdentifier: TransferSession]>([:])

    private let backgroundLinkStorage = Mutex<BackgroundSessionLink?>(nil)

    /// The connection to `hauld` of a background session.
    var backgroundLink: BackgroundSessionLink? { self.backgroundLinkStorage.withLock { $0 } }

    var isBackground: Bool { self.configurationSnapshot.kind == .background }

    private func connectBackgroundSession(_ snapshot: TransferSessionConfiguration.Snapshot) {
        let identifier = snapshot.identifier ?? ""
        var launchCommand: [String]? = nil
        if snapshot.sessionSendsLaunchEvents {
            // By default the executable alone: replaying the arguments that created the work
            // (`tool start URL…`) would create it again on every launch.
            launchCommand = snapshot.launchCommand ?? [URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path]
        }
        let link = BackgroundSessionLink(session: self, identifier: identifier, launchCommand: launchCommand)
        self.backgroundLinkStorage.withLock { $0 = link }
        do {
            guard !identifier.isEmpty else { throw BackgroundDaemonClient.Failure(description: "a background session needs an identifier") }
            // Results arrive only through the delegate; without one they would be lost.
            guard self.delegateBox.value != nil else {
                throw BackgroundDaemonClient.Failure(description: "a background session needs a delegate")
            }
            try link.attach()
        } catch {
            self.backgroundLinkStorage.withLock { $0 = nil }
            self.state.withLock { $0.phase = .invalidated }
            let failure = URLError(
                .cannotConnectToHost,
                userInfo: [NSLocalizedDescriptionKey: "background session '\(identifier)' is unavailable: \(error)"]
            )
            let box = self.delegateBox
            self.delegateQueue.addOperation {
                box.value?.urlSession(self, didBecomeInvalidWithError: failure)
                box.clear()
            }
        }
    }

    /// The task object of the daemon's task `id`, created on first sight.
    func remoteTask(id: Int64, url: URL, isUpload: Bool) -> TransferSessionTask {
        self.state.withLock { state in
            if let existing = state.tasks[Int(id)] { return existing }
            let task: TransferSessionTask
            if isUpload {
                var request = URLRequest(url: url)
                request.httpMethod = "POST"
                task = TransferSessionUploadTask(session: self, identifier: Int(id), request: request, completionHandler: nil)
            } else {
                task = TransferSessionDownloadTask(
                    session: self,
                    identifier: Int(id),
                    request: URLRequest(url: url),
                    partialFilePath: "",
                    handsOverFile: false,
                    completionHandler: nil
                )
            }
            task.inner.withLock { $0.remoteTaskID = id }
            state.tasks[Int(id)] = task
            return task
        }
    }

    func existingRemoteTask(id: Int64) -> TransferSessionTask? {
        self.state.withLock { $0.tasks[Int(id)] }
    }

    /// An upload task created in `hauld` for a background session.
    private func makeBackgroundUploadTask(request: URLRequest, fileURL: URL) -> TransferSessionUploadTask {
        var request = request
        if request.httpMethod == nil || request.httpMethod == "GET" { request.httpMethod = "POST" }
        request.httpBody = nil
        do {
            guard let link = self.backgroundLink else {
                throw URLError(.cannotConnectToHost, userInfo: [NSLocalizedDescriptionKey: "the background session is not connected to hauld"])
            }
            let engineRequest = try TransferRequest(request, additionalHeaders: self.configurationSnapshot.httpAdditionalHeaders, isDownload: false)
            let options = self.backgroundTaskOptions
            let response = try link.call {
                .createUpload(
                    .init(
                        session: $0,
                        url: engineRequest.url,
                        filePath: fileURL.standardizedFileURL.path,
                        httpMethod: engineRequest.method,
                        headers: engineRequest.headers,
                        options: options
                    )
                )
            }
            guard let id = response.taskID, let task = self.remoteTask(id: id, url: engineRequest.url, isUpload: true) as? TransferSessionUploadTask else {
                throw URLError(.badServerResponse)
            }
            task.inner.withLock { $0.countOfBytesExpectedToSend = PartialFile.size(at: fileURL.path) ?? 0 }
            return task
        } catch {
            let failure = error as? URLError ?? URLError(.cannotConnectToHost, userInfo: [NSLocalizedDescriptionKey: "hauld: \(error)"])
            let task = self.register { identifier in
                TransferSessionUploadTask(session: self, identifier: identifier, request: request, completionHandler: nil)
            }
            task.inner.withLock { $0.creationError = failure }
            return task
        }
    }

    /// How this session's configuration shapes a task created in `hauld`.
    private var backgroundTaskOptions: DaemonRequest.TaskOptions {
        var options = DaemonRequest.TaskOptions(
            isDiscretionary: self.configurationCopy.value.isDiscretionary,
            resourceTimeout: self.configurationSnapshot.timeoutIntervalForResource
        )
        let connections = self.configurationCopy.value.haulMaximumConnectionsPerDownload
        if connections > 1 { options.connections = min(64, connections) }
        return options
    }

    /// A download task created in `hauld` for a background session.
    private func makeBackgroundDownloadTask(request: URLRequest) -> TransferSessionDownloadTask {
        do {
            guard let link = self.backgroundLink else {
                throw URLError(.cannotConnectToHost, userInfo: [NSLocalizedDescriptionKey: "the background session is not connected to hauld"])
            }
            let engineRequest = try TransferRequest(request, additionalHeaders: self.configurationSnapshot.httpAdditionalHeaders, isDownload: true)
            guard engineRequest.method == "GET", case .none = engineRequest.body else {
                throw URLError(.unsupportedURL, userInfo: [NSLocalizedDescriptionKey: "background download tasks send GET requests without a body"])
            }
            let options = self.backgroundTaskOptions
            let response = try link.call {
                .createDownload(.init(session: $0, source: .url(engineRequest.url, headers: engineRequest.headers), options: options))
            }
            guard let id = response.taskID, let task = self.remoteTask(id: id, url: engineRequest.url, isUpload: false) as? TransferSessionDownloadTask else {
                throw URLError(.badServerResponse)
            }
            return task
        } catch {
            let failure = error as? URLError ?? URLError(.cannotConnectToHost, userInfo: [NSLocalizedDescriptionKey: "hauld: \(error)"])
            return self.failedDownloadTask(failure, handsOverFile: false, completionHandler: nil)
        }
    }

    /// A download in `hauld` that continues from resume data (the daemon takes the partial
    /// file over).
    private func makeBackgroundDownloadTask(resumeData: Data) -> TransferSessionDownloadTask {
        do {
            guard let link = self.backgroundLink else {
                throw URLError(.cannotConnectToHost, userInfo: [NSLocalizedDescriptionKey: "the background session is not connected to hauld"])
            }
            let decoded: ResumeData
            do {
                decoded = try ResumeData.decode(resumeData)
            } catch {
                throw URLError(.cannotDecodeRawData, userInfo: [NSLocalizedDescriptionKey: "cannot resume: \(error)"])
            }
            let response: DaemonResponse
            do {
                let options = self.backgroundTaskOptions
                response = try link.call { .createDownload(.init(session: $0, source: .resumeData(resumeData), options: options)) }
            } catch {
                throw URLError(.fileDoesNotExist, userInfo: [NSLocalizedDescriptionKey: "\(error)"])
            }
            guard let id = response.taskID,
                let task = self.remoteTask(id: id, url: decoded.originalURL, isUpload: false) as? TransferSessionDownloadTask
            else { throw URLError(.badServerResponse) }
            task.inner.withLock { inner in
                inner.countOfBytesReceived = decoded.resumePoint.offset
                inner.countOfBytesExpectedToReceive = decoded.resumePoint.entityLength ?? TransferSessionTransferSizeUnknown
            }
            return task
        } catch {
            let failure = error as? URLError ?? URLError(.cannotConnectToHost, userInfo: [NSLocalizedDescriptionKey: "hauld: \(error)"])
            return self.failedDownloadTask(failure, handsOverFile: false, completionHandler: nil)
        }
    }

    func unsupportedInBackground(_ what: String) -> URLError {
        URLError(.unsupportedURL, userInfo: [NSLocalizedDescriptionKey: "\(what) are not available in background sessions"])
    }

    /// A copy of the configuration the session was created with.
    public var configuration: TransferSessionConfiguration { self.configurationCopy.value.copy() }

    /// The session's delegate, until it is invalidated.
    public var delegate: (any TransferSessionDelegate)? { self.delegateBox.value }

    /// A description of your choosing.
    public var sessionDescription: String? {
        get { self.state.withLock { $0.sessionDescription } }
        set { self.state.withLock { $0.sessionDescription = newValue } }
    }

    // MARK: - Download tasks

    /// A download of `url`. The task starts suspended.
    public func downloadTask(with url: URL) -> TransferSessionDownloadTask {
        self.downloadTask(with: URLRequest(url: url))
    }

    /// A download of `request`. The task starts suspended.
    public func downloadTask(with request: URLRequest) -> TransferSessionDownloadTask {
        if self.isBackground { return self.makeBackgroundDownloadTask(request: request) }
        return self.makeDownloadTask(request: request, handsOverFile: false, completionHandler: nil)
    }

    /// A download that writes its in-flight bytes to `partialFileURL` instead of the
    /// configuration's temporary directory (a Haul extension, for download managers that keep
    /// partial files beside their destination). An existing file there is overwritten; resume
    /// data produced later points to it. The file is handed over through
    /// `didFinishDownloadingTo` as usual.
    public func downloadTask(with request: URLRequest, partialFileURL: URL) -> TransferSessionDownloadTask {
        let task = self.register { identifier in
            TransferSessionDownloadTask(
                session: self,
                identifier: identifier,
                request: request,
                partialFilePath: partialFileURL.standardizedFileURL.path,
                handsOverFile: false,
                completionHandler: nil
            )
        }
        self.prepare(task, request: request, isDownload: true)
        return task
    }

    /// A download whose result goes to `completionHandler` instead of the delegate. The handler
    /// gets the file's URL (move it before returning), the response, or the error.
    public func downloadTask(
        with url: URL,
        completionHandler: @escaping @Sendable (URL?, URLResponse?, (any Error)?) -> Void
    ) -> TransferSessionDownloadTask {
        self.downloadTask(with: URLRequest(url: url), completionHandler: completionHandler)
    }

    /// A download whose result goes to `completionHandler` instead of the delegate.
    public func downloadTask(
        with request: URLRequest,
        completionHandler: @escaping @Sendable (URL?, URLResponse?, (any Error)?) -> Void
    ) -> TransferSessionDownloadTask {
        self.makeDownloadTask(request: request, handsOverFile: false, completionHandler: completionHandler)
    }

    /// A download that continues from resume data produced by
    /// ``TransferSessionDownloadTask/cancel(byProducingResumeData:)`` or found in a failed
    /// download's error. Corrupt or foreign data, or a partial file that no longer exists, makes
    /// the task fail with a `URLError` once resumed.
    public func downloadTask(withResumeData resumeData: Data) -> TransferSessionDownloadTask {
        self.makeDownloadTask(resumeData: resumeData, handsOverFile: false, completionHandler: nil)
    }

    /// Like ``downloadTask(withResumeData:)``, with the result going to `completionHandler`.
    public func downloadTask(
        withResumeData resumeData: Data,
        completionHandler: @escaping @Sendable (URL?, URLResponse?, (any Error)?) -> Void
    ) -> TransferSessionDownloadTask {
        self.makeDownloadTask(resumeData: resumeData, handsOverFile: false, completionHandler: completionHandler)
    }

    // MARK: - Data and upload tasks

    /// A data task for `url`. The task starts suspended.
    public func dataTask(with url: URL) -> TransferSessionDataTask {
        self.dataTask(with: URLRequest(url: url))
    }

    /// A data task for `request` (any method; `httpBody` is sent). The task starts suspended.
    public func dataTask(with request: URLRequest) -> TransferSessionDataTask {
        self.makeDataTask(request: request, completionHandler: nil)
    }

    /// A data task whose whole body goes to `completionHandler`.
    public func dataTask(
        with url: URL,
        completionHandler: @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void
    ) -> TransferSessionDataTask {
        self.dataTask(with: URLRequest(url: url), completionHandler: completionHandler)
    }

    /// A data task whose whole body goes to `completionHandler`.
    public func dataTask(
        with request: URLRequest,
        completionHandler: @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void
    ) -> TransferSessionDataTask {
        self.makeDataTask(request: request, completionHandler: completionHandler)
    }

    /// An upload of `bodyData` with `request` (POST unless the request says otherwise).
    public func uploadTask(with request: URLRequest, from bodyData: Data) -> TransferSessionUploadTask {
        self.makeUploadTask(request: request, body: bodyData, completionHandler: nil)
    }

    /// An upload of `bodyData` whose response body goes to `completionHandler`.
    public func uploadTask(
        with request: URLRequest,
        from bodyData: Data,
        completionHandler: @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void
    ) -> TransferSessionUploadTask {
        self.makeUploadTask(request: request, body: bodyData, completionHandler: completionHandler)
    }

    /// An upload of the file at `fileURL` with `request` (POST unless the request says
    /// otherwise), streamed from disk with a `Content-Length` of the file's size. In a
    /// background session the upload runs in hauld and its response body arrives through
    /// `didReceive data` before `didCompleteWithError`.
    public func uploadTask(with request: URLRequest, fromFile fileURL: URL) -> TransferSessionUploadTask {
        if self.isBackground { return self.makeBackgroundUploadTask(request: request, fileURL: fileURL) }
        return self.makeUploadTask(request: request, fileURL: fileURL, completionHandler: nil)
    }

    /// An upload of the file at `fileURL` whose response body goes to `completionHandler`.
    public func uploadTask(
        with request: URLRequest,
        fromFile fileURL: URL,
        completionHandler: @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void
    ) -> TransferSessionUploadTask {
        self.makeUploadTask(request: request, fileURL: fileURL, completionHandler: completionHandler)
    }

    /// An upload whose body is read from a stream: `request.httpBodyStream` for the first
    /// sending when set, else (and for every later sending — a 307/308 redirect, an
    /// authentication retry) the delegate's `urlSession(_:task:needNewBodyStream:)`. The body
    /// is sent with the request's `Content-Length` when it has one, else chunked. Streams are
    /// read on a thread pool, so a blocking stream (a pipe) stalls nothing else. Not available
    /// in background sessions, as on Apple's platforms.
    public func uploadTask(withStreamedRequest request: URLRequest) -> TransferSessionUploadTask {
        var request = request
        if request.httpMethod == nil || request.httpMethod == "GET" { request.httpMethod = "POST" }
        let initialStream = request.httpBodyStream.map { UncheckedSendable($0) }
        request.httpBodyStream = nil
        request.httpBody = nil
        let task = self.register { identifier in
            TransferSessionUploadTask(session: self, identifier: identifier, request: request, completionHandler: nil)
        }
        self.prepare(task, request: request, isDownload: false)
        let length = request.value(forHTTPHeaderField: "Content-Length").flatMap { Int64($0) }
        let source = BodyStreamSource(contentLength: length) { [weak task] attempt in
            if attempt == 0, let initialStream { return BodyStreamSource.Stream(initialStream.value) }
            return await task?.askForNewBodyStream()
        }
        task.inner.withLock { inner in
            inner.engineRequest?.body = .stream(source)
            inner.countOfBytesExpectedToSend = length ?? TransferSessionTransferSizeUnknown
        }
        if self.isBackground { task.inner.withLock { $0.creationError = self.unsupportedInBackground("streamed uploads") } }
        return task
    }

    func makeUploadTask(
        request: URLRequest,
        fileURL: URL,
        completionHandler: TransferSessionDataTask.CompletionHandler?
    ) -> TransferSessionUploadTask {
        var request = request
        if request.httpMethod == nil || request.httpMethod == "GET" { request.httpMethod = "POST" }
        request.httpBody = nil
        let task = self.register { identifier in
            TransferSessionUploadTask(session: self, identifier: identifier, request: request, completionHandler: completionHandler)
        }
        self.prepare(task, request: request, isDownload: false)
        let size = PartialFile.size(at: fileURL.path)
        task.inner.withLock { inner in
            inner.engineRequest?.body = .file(fileURL.path)
            inner.countOfBytesExpectedToSend = size ?? 0
            if size == nil, inner.creationError == nil {
                inner.creationError = URLError(
                    .fileDoesNotExist,
                    userInfo: [NSLocalizedDescriptionKey: "cannot upload \(fileURL.path): no such file"]
                )
            }
        }
        if self.isBackground { task.inner.withLock { $0.creationError = self.unsupportedInBackground("upload completion handlers") } }
        return task
    }

    // MARK: - Tasks and invalidation

    /// Every task of the session that has not completed, passed to `completionHandler` on the
    /// delegate queue.
    public func getAllTasks(completionHandler: @escaping @Sendable ([TransferSessionTask]) -> Void) {
        let tasks = self.currentTasks
        self.delegateQueue.addOperation { completionHandler(tasks) }
    }

    /// Every task of the session that has not completed.
    public var allTasks: [TransferSessionTask] {
        get async { self.currentTasks }
    }

    /// The session's unfinished tasks by kind, as `getTasksWithCompletionHandler`.
    public func getTasksWithCompletionHandler(
        _ completionHandler: @escaping @Sendable (
            [TransferSessionDataTask], [TransferSessionUploadTask], [TransferSessionDownloadTask]
        ) -> Void
    ) {
        let tasks = self.currentTasks
        self.delegateQueue.addOperation {
            completionHandler(
                tasks.compactMap { $0 as? TransferSessionDataTask }.filter { !($0 is TransferSessionUploadTask) },
                tasks.compactMap { $0 as? TransferSessionUploadTask },
                tasks.compactMap { $0 as? TransferSessionDownloadTask }
            )
        }
    }

    private var currentTasks: [TransferSessionTask] {
        self.state.withLock { $0.tasks.values.sorted { $0.taskIdentifier < $1.taskIdentifier } }
    }

    /// Lets running tasks finish, refuses new ones, then calls `didBecomeInvalidWithError(nil)`
    /// and releases the delegate. No effect on ``shared``.
    public func finishTasksAndInvalidate() {
        guard !self.isShared else { return }
        if self.isBackground {
            // The tasks live on in hauld; the session only lets go of them, after the delegate
            // calls already queued (and their acknowledgements) have run.
            let link = self.backgroundLink
            link?.stopReconnecting()
            self.delegateQueue.addOperation { link?.close() }
            self.state.withLock { $0.tasks = [:] }
            self.invalidate()
            return
        }
        let invalidateNow = self.state.withLock { state -> Bool in
            guard state.phase == .active else { return false }
            state.phase = .finishing
            return state.tasks.isEmpty
        }
        if invalidateNow { self.invalidate() }
    }

    /// Cancels every task and invalidates the session. No effect on ``shared``.
    public func invalidateAndCancel() {
        guard !self.isShared else { return }
        let (tasks, invalidateNow) = self.state.withLock { state -> ([TransferSessionTask], Bool) in
            guard state.phase != .invalidated else { return ([], false) }
            state.phase = .finishing
            return (Array(state.tasks.values), state.tasks.isEmpty)
        }
        for task in tasks { task.cancel() }
        if self.isBackground {
            self.backgroundLink?.close()
            self.state.withLock { $0.tasks = [:] }
            self.invalidate()
            return
        }
        // Tasks never resumed cannot complete on their own: cancel() completes them now.
        if invalidateNow { self.invalidate() }
    }

    private func invalidate() {
        let already = self.state.withLock { state -> Bool in
            defer { state.phase = .invalidated }
            return state.phase == .invalidated
        }
        if already { return }
        let box = self.delegateBox
        self.delegateQueue.addOperation {
            box.value?.urlSession(self, didBecomeInvalidWithError: nil)
            box.clear()
        }
        Self.liveSessions.withLock { _ = $0.removeValue(forKey: ObjectIdentifier(self)) }
        self.trustAsker?.detach()
        let engine = self.engine
        let ephemeralDirectory = self.configurationSnapshot.kind == .ephemeral ? self.downloadDirectory : nil
        Task {
            await engine.shutdown()
            if let ephemeralDirectory { try? FileManager.default.removeItem(at: ephemeralDirectory) }
        }
    }

    // MARK: - Internal plumbing

    /// Runs `body` on the delegate queue with the current delegate (if any).
    func enqueueDelegateCall(_ body: @escaping @Sendable ((any TransferSessionDelegate)?) -> Void) {
        let box = self.delegateBox
        self.delegateQueue.addOperation { body(box.value) }
    }

    /// Completes `task`: takes it off the session's list, then runs `deliver` (which enqueues
    /// its completion callbacks), then invalidates a finishing session with no task left. In
    /// that order, a completion callback that asks for the session's tasks no longer finds its
    /// own (the delegate queue may run it before this thread goes on), and
    /// `didBecomeInvalidWithError` comes after the last completion.
    func complete(_ task: TransferSessionTask, delivering deliver: () -> Void) {
        let invalidateNow = self.state.withLock { state -> Bool in
            state.tasks[task.taskIdentifier] = nil
            return state.phase == .finishing && state.tasks.isEmpty
        }
        deliver()
        if invalidateNow { self.invalidate() }
    }

    func register<T: TransferSessionTask>(_ make: (Int) -> T) -> T {
        self.state.withLock { state in
            let task = make(state.nextIdentifier)
            state.nextIdentifier += 1
            if state.phase == .active {
                state.tasks[task.taskIdentifier] = task
            } else {
                task.inner.withLock {
                    $0.creationError = URLError(
                        .cancelled,
                        userInfo: [NSLocalizedDescriptionKey: "the session was invalidated; no new tasks can run in it"]
                    )
                }
            }
            return task
        }
    }

    func newPartialFilePath() -> String {
        try? FileManager.default.createDirectory(
            at: self.downloadDirectory,
            withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700]
        )
        return self.downloadDirectory.appendingPathComponent("haul-\(UUID().uuidString).download").path
    }

    /// A TCP connection to `hostname`:`port`, read and written in pieces (see
    /// ``TransferSessionStreamTask``). Starts suspended. Not available in background sessions.
    public func streamTask(withHostName hostname: String, port: Int) -> TransferSessionStreamTask {
        let task = self.register { identifier in
            TransferSessionStreamTask(session: self, identifier: identifier, host: hostname, port: port)
        }
        if self.isBackground { task.inner.withLock { $0.creationError = self.unsupportedInBackground("stream tasks") } }
        if hostname.isEmpty || !(1...65535).contains(port) {
            let error = URLError(.badURL, userInfo: [NSLocalizedDescriptionKey: "a stream task needs a host name and a port from 1 to 65535, got '\(hostname)':\(port)"])
            task.inner.withLock { $0.creationError = error }
        }
        return task
    }

    /// The download task a data task turns into (`.becomeDownload`): running already, same
    /// request and response, its own file.
    func makeConvertedDownloadTask(from dataTask: TransferSessionDataTask) -> TransferSessionDownloadTask {
        let path = self.newPartialFilePath()
        let download = self.register { identifier in
            TransferSessionDownloadTask(
                session: self,
                identifier: identifier,
                request: dataTask.originalRequest,
                partialFilePath: path,
                handsOverFile: false,
                completionHandler: nil
            )
        }
        let (current, engineRequest, response, expected, start) = dataTask.inner.withLock {
            ($0.currentRequest, $0.engineRequest, $0.response, $0.countOfBytesExpectedToReceive, $0.taskStart)
        }
        download.inner.withLock { inner in
            _ = inner.lifecycle.resumeCalled()
            inner.currentRequest = current
            inner.engineRequest = engineRequest
            inner.response = response
            inner.countOfBytesExpectedToReceive = expected
            inner.taskStart = start
        }
        return download
    }

    func makeDownloadTask(
        request: URLRequest,
        handsOverFile: Bool,
        completionHandler: TransferSessionDownloadTask.CompletionHandler?
    ) -> TransferSessionDownloadTask {
        if self.isBackground {
            return self.failedDownloadTask(
                self.unsupportedInBackground("completion handlers and async downloads"),
                handsOverFile: handsOverFile,
                completionHandler: completionHandler
            )
        }
        let path = self.newPartialFilePath()
        let task = self.register { identifier in
            TransferSessionDownloadTask(
                session: self,
                identifier: identifier,
                request: request,
                partialFilePath: path,
                handsOverFile: handsOverFile,
                completionHandler: completionHandler
            )
        }
        self.prepare(task, request: request, isDownload: true)
        return task
    }

    func makeDownloadTask(
        resumeData data: Data,
        handsOverFile: Bool,
        completionHandler: TransferSessionDownloadTask.CompletionHandler?
    ) -> TransferSessionDownloadTask {
        if self.isBackground {
            guard completionHandler == nil, !handsOverFile else {
                return self.failedDownloadTask(
                    self.unsupportedInBackground("completion handlers and async downloads"),
                    handsOverFile: handsOverFile,
                    completionHandler: completionHandler
                )
            }
            return self.makeBackgroundDownloadTask(resumeData: data)
        }
        let resumeData: ResumeData
        do {
            resumeData = try ResumeData.decode(data)
        } catch {
            return self.failedDownloadTask(
                URLError(.cannotDecodeRawData, userInfo: [NSLocalizedDescriptionKey: "cannot resume: \(error)"]),
                handsOverFile: handsOverFile,
                completionHandler: completionHandler
            )
        }
        guard let onDisk = PartialFile.size(at: resumeData.partialFilePath) else {
            return self.failedDownloadTask(
                URLError(
                    .fileDoesNotExist,
                    userInfo: [
                        NSLocalizedDescriptionKey:
                            "cannot resume: the partial file \(resumeData.partialFilePath) no longer exists",
                        NSURLErrorFailingURLErrorKey: resumeData.url,
                    ]
                ),
                handsOverFile: handsOverFile,
                completionHandler: completionHandler
            )
        }
        var request = URLRequest(url: resumeData.url)
        var headers = resumeData.requestHeaders
        headers.remove(name: "Range")
        headers.remove(name: "If-Range")
        for field in headers.fields { request.addValue(field.value, forHTTPHeaderField: field.name) }
        let task = self.register { identifier in
            TransferSessionDownloadTask(
                session: self,
                identifier: identifier,
                request: request,
                partialFilePath: resumeData.partialFilePath,
                handsOverFile: handsOverFile,
                completionHandler: completionHandler
            )
        }
        // Bytes beyond the recorded offset may be torn; fewer bytes are still a valid prefix.
        var point = resumeData.resumePoint
        point.offset = min(point.offset, onDisk)
        task.inner.withLock { inner in
            inner.engineRequest = TransferRequest(url: resumeData.url, method: "GET", headers: headers)
            inner.resumePoint = point.offset > 0 ? point : nil
            inner.countOfBytesReceived = point.offset
            inner.countOfBytesExpectedToReceive = point.entityLength ?? TransferSessionTransferSizeUnknown
        }
        return task
    }

    func failedDownloadTask(
        _ error: URLError,
        handsOverFile: Bool,
        completionHandler: TransferSessionDownloadTask.CompletionHandler?
    ) -> TransferSessionDownloadTask {
        let task = self.register { identifier in
            TransferSessionDownloadTask(
                session: self,
                identifier: identifier,
                request: nil,
                partialFilePath: self.downloadDirectory.appendingPathComponent("unused-\(UUID().uuidString)").path,
                handsOverFile: handsOverFile,
                completionHandler: completionHandler
            )
        }
        task.inner.withLock { $0.creationError = error }
        return task
    }

    func makeDataTask(request: URLRequest, completionHandler: TransferSessionDataTask.CompletionHandler?, sink: DataTaskSink? = nil)
        -> TransferSessionDataTask
    {
        let task = self.register { identifier in
            TransferSessionDataTask(session: self, identifier: identifier, request: request, completionHandler: completionHandler, sink: sink)
        }
        self.prepare(task, request: request, isDownload: false)
        if self.isBackground { task.inner.withLock { $0.creationError = self.unsupportedInBackground("data tasks") } }
        return task
    }

    func makeUploadTask(
        request: URLRequest,
        body: Data,
        completionHandler: TransferSessionDataTask.CompletionHandler?
    ) -> TransferSessionUploadTask {
        var request = request
        if request.httpMethod == nil || request.httpMethod == "GET" { request.httpMethod = "POST" }
        request.httpBody = body
        let task = self.register { identifier in
            TransferSessionUploadTask(session: self, identifier: identifier, request: request, completionHandler: completionHandler)
        }
        self.prepare(task, request: request, isDownload: false)
        task.inner.withLock { $0.countOfBytesExpectedToSend = Int64(body.count) }
        if self.isBackground { task.inner.withLock { $0.creationError = self.unsupportedInBackground("uploads of in-memory data") } }
        return task
    }

    private func prepare(_ task: TransferSessionTask, request: URLRequest, isDownload: Bool) {
        do {
            // A custom protocol class may claim any scheme (`stub://`, `app://`).
            let claimed = self.configurationCopy.value.protocolClasses.contains { $0.canInit(with: request) }
            var engineRequest = try TransferRequest(
                request,
                additionalHeaders: self.configurationSnapshot.httpAdditionalHeaders,
                isDownload: isDownload,
                allowsAnyScheme: claimed
            )
            // The request's own policy, unless it left the choice to the configuration.
            engineRequest.cachePolicy = request.cachePolicy == .useProtocolCachePolicy
                ? self.configurationSnapshot.requestCachePolicy
                : TransferSessionConfiguration.cachePolicy(request.cachePolicy) ?? .useProtocolCachePolicy
            task.inner.withLock { inner in
                if inner.creationError == nil { inner.engineRequest = engineRequest }
            }
        } catch {
            task.inner.withLock { $0.creationError = error }
        }
    }
}
