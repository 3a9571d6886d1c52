import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HaulCore
import HaulEngine
import NIOCore
import NIOFoundationCompat
import Synchronization

/// A transfer in a ``TransferSession``, as `URLSessionTask`. Tasks start suspended: call
/// ``resume()``.
///
/// All members are thread-safe.
public class TransferSessionTask: @unchecked Sendable, Hashable, CustomStringConvertible {
    // @unchecked Sendable: a non-final class cannot be checked; every mutable field lives in
    // `inner`, a Mutex, and the rest is immutable.

    /// The task's identifier, unique within its session.
    public let taskIdentifier: Int
    /// The request the task was created with (`nil` for a download created from resume data
    /// that could not be decoded).
    public let originalRequest: URLRequest?
    /// How much of the task is done, for UI binding.
    public let progress: Progress

    /// The default value of ``priority``.
    public static let defaultPriority: Float = 0.5
    /// The lowest priority.
    public static let lowPriority: Float = 0.0
    /// The highest priority.
    public static let highPriority: Float = 1.0

    enum Kind {
        case data
        case download
    }

    struct Inner {
        var lifecycle = TaskLifecycleStateMachine()
        var currentRequest: URLRequest?
        var engineRequest: TransferRequest?
        var response: URLResponse?
        var error: (any Error)?
        var taskDescription: String?
        var priority: Float = TransferSessionTask.defaultPriority
        var countOfBytesReceived: Int64 = 0
        var countOfBytesExpectedToReceive: Int64 = TransferSessionTransferSizeUnknown
        var countOfBytesSent: Int64 = 0
        var countOfBytesExpectedToSend: Int64 = 0
        var run: TransferRun?
        /// Where the transfer stands after a pause, for the next start.
        var resumePoint: ResumePoint?
        /// The error a task created from bad input completes with when resumed.
        var creationError: URLError?
        /// Callbacks waiting for resume data from a cancel in progress.
        var resumeDataCallbacks: [@Sendable (Data?) -> Void] = []
        var wantsResumeData = false
        /// Progress not yet delivered to the delegate.
        var pendingBytesWritten: Int64 = 0
        var isProgressDeliveryScheduled = false
        /// Starts at the transfer's start: a download that finishes within the first interval
        /// gets its progress once, flushed right before its completion.
        var lastProgressDelivery = ContinuousClock.now
        /// Data-task body gate: bytes wait here until the delegate allows the response.
        var dataGate = DataGate.open
        var receivedData = Data()
        var pendingCompletion: (@Sendable () -> Void)?
        /// Set for the tasks of a background session: the task's identifier in `hauld`.
        var remoteTaskID: Int64?
        /// When the task first started, and what its runs measured (for metrics).
        var taskStart: Date?
        var transactions: [TransactionRecord] = []
        /// For a download made by `.becomeDownload`: the data task whose transfer it is.
        var convertedFrom: TransferSessionDataTask?
        /// A download's other URLs of the same file (`haulMirrors`).
        var mirrors: [URL] = []
        var mirrorsVerifiedByChecksum = false
    }

    enum DataGate {
        case open
        case awaitingDisposition(buffered: [Data])
        case refused
        /// `.becomeDownload`: the rest of the body goes to this download task's file.
        case becameDownload(TransferSessionDownloadTask, PartialFile, written: Int64)
    }

    let kind: Kind
    let session: TransferSession
    let inner: Mutex<Inner>

    init(session: TransferSession, identifier: Int, kind: Kind, request: URLRequest?) {
        self.session = session
        self.taskIdentifier = identifier
        self.kind = kind
        self.originalRequest = request
        self.progress = Progress(totalUnitCount: -1)
        var inner = Inner()
        inner.currentRequest = request
        self.inner = Mutex(inner)
    }

    /// The request being sent now (it changes when a redirect is followed).
    public var currentRequest: URLRequest? { self.inner.withLock { $0.currentRequest } }
    /// The final response, once its head arrived.
    public var response: URLResponse? { self.inner.withLock { $0.response } }
    /// The error the task completed with, if any.
    public var error: (any Error)? { self.inner.withLock { $0.error } }
    /// The task's state, as `URLSessionTask.State`.
    public var state: URLSessionTask.State {
        URLSessionTask.State(rawValue: self.inner.withLock { $0.lifecycle.publicState.rawValue })!
    }

    /// A description of your choosing.
    public var taskDescription: String? {
        get { self.inner.withLock { $0.taskDescription } }
        set { self.inner.withLock { $0.taskDescription = newValue } }
    }

    /// The task's priority from 0 to 1. Kept for API compatibility; in-process sessions do not
    /// reorder tasks by it.
    public var priority: Float {
        get { self.inner.withLock { $0.priority } }
        set { self.inner.withLock { $0.priority = min(1, max(0, newValue)) } }
    }

    /// Body bytes received so far (for downloads: bytes of the entity on disk).
    public var countOfBytesReceived: Int64 { self.inner.withLock { $0.countOfBytesReceived } }
    /// The expected body length, or ``TransferSessionTransferSizeUnknown``.
    public var countOfBytesExpectedToReceive: Int64 { self.inner.withLock { $0.countOfBytesExpectedToReceive } }
    /// Request body bytes sent.
    public var countOfBytesSent: Int64 { self.inner.withLock { $0.countOfBytesSent } }
    /// The request body length.
    public var countOfBytesExpectedToSend: Int64 { self.inner.withLock { $0.countOfBytesExpectedToSend } }

    /// Starts the task, or continues it after ``suspend()``. A suspended download continues from
    /// the bytes already on disk when the server allows it. No effect on a running, canceling or
    /// completed task.
    public func resume() {
        let action = self.inner.withLock { $0.lifecycle.resumeCalled() }
        self.perform(action)
    }

    /// Pauses the task. A running download stops its connection and keeps its bytes; ``resume()``
    /// continues with a range request. No effect unless the task is running.
    public func suspend() {
        let action = self.inner.withLock { $0.lifecycle.suspendCalled() }
        self.perform(action)
    }

    /// Cancels the task. It completes with `URLError(.cancelled)`. No effect once completed.
    public func cancel() {
        let action = self.inner.withLock { $0.lifecycle.cancelCalled() }
        self.perform(action)
    }

    public static func == (lhs: TransferSessionTask, rhs: TransferSessionTask) -> Bool { lhs === rhs }

    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }

    public var description: String {
        "<\(type(of: self)) \(self.taskIdentifier) \(self.originalRequest?.url?.absoluteString ?? "-")>"
    }

    // MARK: - Running lifecycle actions

    func perform(_ action: TaskLifecycleStateMachine.Action) {
        if let remoteID = self.inner.withLock({ $0.remoteTaskID }) {
            self.performRemote(action, taskID: remoteID)
            return
        }
        switch action {
        case .none:
            break
        case .startTransfer:
            self.startTransfer()
        case .pauseTransfer:
            self.inner.withLock { $0.run }?.stop(.pause)
        case .cancelTransfer:
            self.inner.withLock { $0.run }?.stop(.cancel)
        case .completeAsCancelled:
            self.completeAsCancelled()
        case .deliverResult:
            preconditionFailure("deliverResult is handled with the outcome that caused it")
        }
    }

    private func startTransfer() {
        let (request, creationError, resumePoint) = self.inner.withLock { ($0.engineRequest, $0.creationError, $0.resumePoint) }
        guard let request, creationError == nil else {
            _ = self.inner.withLock { $0.lifecycle.transferFinished() }
            self.finish(error: creationError ?? URLError(.badURL))
            return
        }
        let destination: TransferRun.Destination
        switch self.kind {
        case .data: destination = .observer
        case .download: destination = .file(path: self.partialFilePath, resume: resumePoint)
        }
        let configuration = self.session.configurationSnapshot
        let (mirrors, verified) = self.inner.withLock { ($0.mirrors, $0.mirrorsVerifiedByChecksum) }
        let run = TransferRun(
            engine: self.session.engine,
            request: request,
            destination: destination,
            resourceTimeout: .seconds(configuration.timeoutIntervalForResource),
            mirrors: self.kind == .download ? mirrors : [],
            mirrorPolicy: verified ? .verifiedByChecksum : .sameValidators,
            observer: self
        )
        self.inner.withLock { inner in
            inner.run = run
            inner.lastProgressDelivery = ContinuousClock.now
            if inner.taskStart == nil { inner.taskStart = Date() }
        }
        run.start { [self] outcome in
            self.handle(outcome)
        }
    }

    /// Whether data/download delegate methods are called (not for tasks created with a
    /// completion handler, as in URLSession). Redirect decisions still go to the delegate.
    var hasDelegateCallbacks: Bool { true }

    /// A final response head arrived (on an event loop).
    func responseReceived(_ response: URLResponse, resumedAtOffset: Int64?, expectedTotal: Int64?) {}

    /// Data-task body bytes arrived (on an event loop).
    func bodyReceived(_ data: Data) {}

    /// Queues one delivery of the pending download progress.
    func scheduleProgressDelivery() {}

    /// Queues a delivery of progress that is still pending, so that it reaches the delegate
    /// before the completion queued next.
    func flushPendingProgress() {
        if self.inner.withLock({ $0.pendingBytesWritten > 0 }) { self.scheduleProgressDelivery() }
    }

    /// The window that paces data-task bodies to their consumer; `nil` for unpaced kinds.
    var bodyWindow: DeliveryWindow? { nil }

    /// A response is about to be stored in the session's cache: the entry to store, or `nil`.
    /// Data tasks with delegate callbacks ask `willCacheResponse`.
    func willStore(_ response: StoredResponse) async -> StoredResponse? { response }

    /// The partial file of a download task; data tasks never use it.
    var partialFilePath: String { preconditionFailure("only download tasks have a partial file") }

    // MARK: - Outcomes

    private func handle(_ outcome: TransferOutcome) {
        if let run = self.inner.withLock({ $0.run }) {
            let records = run.transactions
            self.inner.withLock { $0.transactions += records }
        }
        switch outcome {
        case .stopped(_, _, let point):
            let action = self.inner.withLock { inner in
                inner.run = nil
                inner.resumePoint = point
                return inner.lifecycle.transferStopped()
            }
            self.perform(action)
        case .completed(let response, let total):
            let action = self.inner.withLock { inner in
                inner.run = nil
                inner.resumePoint = nil
                return inner.lifecycle.transferFinished()
            }
            if action == .deliverResult {
                self.deliverSuccess(response: response, bytesOnDisk: total)
            } else {
                self.perform(action)
            }
        case .failed(let failure, let response, let point):
            let action = self.inner.withLock { inner in
                inner.run = nil
                inner.resumePoint = point
                // The server's unsuccessful answer (a resume request answered 503) is the
                // task's response, as URLSession shows the response a task ended with.
                if failure.serverStatus != nil, let response { inner.response = response.urlResponse }
                return inner.lifecycle.transferFinished()
            }
            if action == .deliverResult {
                self.finish(error: self.errorAddingResumeData(failure.error, point: point))
            } else {
                self.perform(action)
            }
        }
    }

    /// Completes the task as cancelled (possibly with resume data).
    func completeAsCancelled() {
        let (point, wantsResumeData) = self.inner.withLock { ($0.resumePoint, $0.wantsResumeData) }
        let resumeData = wantsResumeData ? self.makeResumeData(point) : nil
        self.deliverResumeData(resumeData)
        if resumeData == nil { self.discardPartialFile() }
        self.finish(error: self.cancelledError(resumeData: resumeData))
    }

    /// `URLError(.cancelled)` naming the task's URL (and carrying resume data when given), as
    /// every kind of task completes when cancelled.
    func cancelledError(resumeData: Data? = nil) -> URLError {
        var userInfo: [String: Any] = [NSLocalizedDescriptionKey: "cancelled"]
        if let url = self.currentRequest?.url ?? self.originalRequest?.url { userInfo[NSURLErrorFailingURLErrorKey] = url }
        if let resumeData { userInfo[TransferSessionDownloadTaskResumeData] = resumeData }
        return URLError(.cancelled, userInfo: userInfo)
    }

    func deliverResumeData(_ data: Data?) {
        let callbacks = self.inner.withLock { inner in
            defer { inner.resumeDataCallbacks = [] }
            return inner.resumeDataCallbacks
        }
        for callback in callbacks { callback(data) }
    }

    func errorAddingResumeData(_ error: URLError, point: ResumePoint?) -> URLError {
        var userInfo = error.userInfo
        if userInfo[NSURLErrorFailingURLErrorKey] == nil, let url = self.currentRequest?.url {
            userInfo[NSURLErrorFailingURLErrorKey] = url
        }
        if let data = self.makeResumeData(point) {
            userInfo[TransferSessionDownloadTaskResumeData] = data
        } else {
            self.discardPartialFile()
        }
        return URLError(error.code, userInfo: userInfo)
    }

    /// Resume data for `point`; `nil` for data tasks and for downloads that cannot resume.
    func makeResumeData(_ point: ResumePoint?) -> Data? { nil }

    func discardPartialFile() {}

    func deliverSuccess(response: ResponseInfo, bytesOnDisk: Int64) {
        self.finish(error: nil)
    }

    /// Records the final error (nil for success) and delivers the completion through the
    /// session (``TransferSession/complete(_:delivering:)``).
    func finish(error: (any Error)?) {
        self.flushPendingProgress()
        self.inner.withLock { $0.error = error }
        self.session.complete(self) { self.deliverCompletion(error: error) }
    }

    /// Delivers the completion callback(s) for `error`. Overridden per kind.
    func deliverCompletion(error: (any Error)?) {
        let session = self.session
        let metrics = self.finalMetrics()
        session.enqueueDelegateCall { delegate in
            self.report(metrics, to: delegate)
            (delegate as? any TransferSessionTaskDelegate)?.urlSession(session, task: self, didCompleteWithError: error)
        }
    }

    /// Asks the delegate for a new body stream (streamed uploads); waits for its answer.
    func askForNewBodyStream() async -> BodyStreamSource.Stream? {
        let stream = await self.session.askDelegate(fallback: InputStream?.none) { delegate, answer in
            guard let taskDelegate = delegate as? any TransferSessionTaskDelegate else { return false }
            taskDelegate.urlSession(self.session, task: self, needNewBodyStream: answer)
            return true
        }
        return stream.map { BodyStreamSource.Stream($0) }
    }

    /// The task's metrics as it completes now; `nil` for background tasks (measured in hauld).
    func finalMetrics() -> TransferSessionTaskMetrics? {
        let (records, start, isRemote) = self.inner.withLock { ($0.transactions, $0.taskStart, $0.remoteTaskID != nil) }
        guard !isRemote else { return nil }
        return TransferSessionTaskMetrics(transactions: records, start: start ?? Date(), end: Date())
    }

    /// Calls `didFinishCollecting` (on the delegate queue, right before the completion).
    func report(_ metrics: TransferSessionTaskMetrics?, to delegate: (any TransferSessionDelegate)?) {
        guard let metrics else { return }
        (delegate as? any TransferSessionTaskDelegate)?.urlSession(self.session, task: self, didFinishCollecting: metrics)
    }
}

extension TransferSessionTask: TransferRunObserver {
    package func transferRun(
        _ run: TransferRun,
        didReceive response: ResponseInfo,
        resumedAtOffset: Int64?,
        expectedTotal: Int64?
    ) {
        let httpResponse = response.urlResponse
        self.inner.withLock { inner in
            inner.response = httpResponse
            inner.countOfBytesReceived = resumedAtOffset ?? 0
            inner.countOfBytesExpectedToReceive = expectedTotal ?? TransferSessionTransferSizeUnknown
        }
        self.responseReceived(httpResponse, resumedAtOffset: resumedAtOffset, expectedTotal: expectedTotal)
    }

    package func transferRun(_ run: TransferRun, didWrite byteCount: Int, totalOnDisk: Int64, expectedTotal: Int64?) {
        // Progress is coalesced: at most one delivery is queued, and deliveries are at least
        // `progressInterval` apart, so a fast transfer costs the delegate queue ~25 wake-ups a
        // second instead of one per network read.
        let delay = self.inner.withLock { inner -> Duration? in
            inner.countOfBytesReceived = totalOnDisk
            inner.pendingBytesWritten += Int64(byteCount)
            guard !inner.isProgressDeliveryScheduled else { return nil }
            inner.isProgressDeliveryScheduled = true
            return inner.lastProgressDelivery + Self.progressInterval - ContinuousClock.now
        }
        guard let delay else { return }
        if delay <= .zero {
            self.scheduleProgressDelivery()
        } else {
            let (seconds, attoseconds) = delay.components
            run.eventLoop.scheduleTask(in: .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)) {
                self.scheduleProgressDelivery()
            }
        }
    }

    /// The shortest time between two progress deliveries of one task.
    static let progressInterval = Duration.milliseconds(40)

    package func transferRun(_ run: TransferRun, didSendBodyBytes byteCount: Int64, totalSent: Int64, expectedToSend: Int64) {
        self.inner.withLock { inner in
            inner.countOfBytesSent = totalSent
            inner.countOfBytesExpectedToSend = expectedToSend
        }
        let session = self.session
        session.enqueueDelegateCall { delegate in
            (delegate as? any TransferSessionTaskDelegate)?.urlSession(
                session,
                task: self,
                didSendBodyData: byteCount,
                totalBytesSent: totalSent,
                totalBytesExpectedToSend: expectedToSend
            )
        }
    }

    package var handlesAuthentication: Bool { true }

    package var bodyDeliveryWindow: DeliveryWindow? { self.bodyWindow }

    package func transferRun(_ run: TransferRun, preemptiveAuthorizationFor request: TransferRequest) -> String? {
        self.preemptiveAuthorization(for: request)
    }

    package func transferRun(_ run: TransferRun, willStore response: StoredResponse) async -> StoredResponse? {
        await self.willStore(response)
    }

    package func transferRun(
        _ run: TransferRun,
        authenticationChallenge response: ResponseInfo,
        for request: TransferRequest,
        previousFailureCount: Int
    ) async -> AuthenticationAnswer {
        await self.answerChallenge(response, request: request, previousFailureCount: previousFailureCount)
    }

    package func transferRun(_ run: TransferRun, didReceive body: ByteBuffer) {
        self.bodyReceived(Data(buffer: body))
    }

    package func transferRun(_ run: TransferRun, willRedirect response: ResponseInfo, to request: TransferRequest) async
        -> TransferRequest?
    {
        let httpResponse = UncheckedSendable(response.httpURLResponse)
        let proposed = request.urlRequest
        let decided = await self.session.askDelegate(fallback: Optional(proposed)) { delegate, answer in
            guard let taskDelegate = delegate as? any TransferSessionTaskDelegate else { return false }
            taskDelegate.urlSession(self.session, task: self, willPerformHTTPRedirection: httpResponse.value, newRequest: proposed, completionHandler: answer)
            return true
        }
        guard let decided, let url = decided.url else { return nil }
        var next = request
        next.url = url
        next.method = decided.httpMethod ?? request.method
        next.headers = HTTPHeaderFields((decided.allHTTPHeaderFields ?? [:]).sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
        next.body = decided.httpBody.map { .data($0) } ?? (next.method == request.method ? request.body : .none)
        self.inner.withLock { $0.currentRequest = decided }
        return next
    }
}

/// True for the first `claim()` only; guards callbacks that must run once.
final class OnceFlag: Sendable {
    private let claimed = Atomic<Bool>(false)
    func claim() -> Bool {
        !self.claimed.exchange(true, ordering: .relaxed)
    }
}

extension TransferSessionTask {
    /// Haul extension: connections fetching this task's body now (more than one while a
    /// download is segmented; see `haulMaximumConnectionsPerDownload`), 0 when none.
    public var haulConnectionCount: Int {
        self.inner.withLock { $0.run }?.connectionCount ?? 0
    }

    /// Where the task could continue from if it stopped now: for a segmented download, the map
    /// of bytes written so far (sync the partial file before recording it).
    package var currentResumePoint: ResumePoint? {
        self.inner.withLock { $0.run }?.currentResumePoint
    }
}
