import Foundation
import HaulCore
import HaulEngine
import HaulStore
import Logging
import Synchronization

/// Something attached to a session that receives its events (a client connection).
public protocol DaemonClient: AnyObject, Sendable {
    /// Sends one event line. Called from the daemon's delivery queue, in order.
    func send(_ event: DaemonEvent)
    /// Whether the connection is still open.
    var isConnected: Bool { get }
}

/// A request the daemon refuses, with a message for the client.
public struct DaemonError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// The owner of background sessions' tasks in ``TransferCore``: records them, hands them to
/// the core's one scheduler, runs them with the core's one engine when chosen, checkpoints them
/// in the store, retries what fails (``TransferOutcomePolicy``), keeps finished downloads and
/// their events until a client takes them, and wakes clients that asked to be launched.
///
/// Durability: a task's request is in the store before `createDownload` answers, its
/// running state before `resume` answers. Progress is checkpointed at the core's cadence
/// (after the file's bytes are synced), so after a crash at any instant at most that much is
/// fetched again.
public final class TransferDaemon: TransferOwner, Sendable {
    public struct Configuration: Sendable {
        /// Retries of network failures and transient statuses.
        public var retryPolicy = RetryPolicy(
            maximumAttempts: 20,
            initialDelay: 1,
            maximumDelay: 60,
            maximumRetryAfter: 3600,
            retriesRefusedConnections: true
        )
        /// A session's launch command runs at most this often.
        public var launchInterval: Duration = .seconds(10)

        public init() {}
    }

    struct Active {
        var transfer: TrackedTransfer
        var run: TransferRun
        var task: StoredTask
        var cancelWaiters: [CheckedContinuation<Data?, Never>] = []
        var produceResumeData = false
        /// Set when the scheduler asked for the slot back; the task goes back to waiting.
        var yielded = false
    }

    struct State {
        var attached: [String: any DaemonClient] = [:]
        var lastDeliveredEvent: [String: Int64] = [:]
        var active: [Int64: Active] = [:]
        var lastLaunch: [String: ContinuousClock.Instant] = [:]
        var isShuttingDown = false
    }

    let store: TransferStore
    let paths: DaemonPaths
    let configuration: Configuration
    let core: TransferCore
    let logger: Logger
    let state = Mutex(State())
    /// Serialises starts, event delivery and checkpoint writes, keeping them in order.
    let deliveryQueue = DispatchQueue(label: "hauld.delivery")

    public init(store: TransferStore, paths: DaemonPaths, core: TransferCore, configuration: Configuration = Configuration(), logger: Logger) {
        self.store = store
        self.paths = paths
        self.core = core
        self.configuration = configuration
        self.logger = logger
        core.register(self, for: .session)
    }

    /// Picks up the tasks a previous daemon left running and hands the waiting ones to the core.
    public func start() throws {
        let revived = try self.store.reviveInterruptedTasks()
        if !revived.isEmpty { self.logger.info("resuming \(revived.count) interrupted or waiting task(s)") }
        self.core.enqueue(revived.map(Self.entry(for:)))
        for session in try self.store.sessionsWithPendingEvents() { self.launchIfNeeded(session: session) }
    }

    /// The scheduler's view of a waiting task.
    static func entry(for task: StoredTask) -> TransferScheduler.Entry {
        TransferScheduler.Entry(
            id: TransferID(.session, task.id!),
            host: TransferRun.hostKey(task.currentURL),
            isDiscretionary: task.isDiscretionary,
            notBefore: task.notBefore?.timeIntervalSinceReferenceDate
        )
    }

    // MARK: - Requests

    /// Attaches `client` to `session`; returns the session's live tasks. Queued events follow.
    ///
    /// A client that quits and a new one that starts at once race: the new attach may arrive
    /// before the old connection's end is seen. So an occupied session is waited for (up to a
    /// second) before the attach is refused.
    public func attach(session: String, launchCommand: [String]?, client: any DaemonClient) async throws -> [DaemonTaskSnapshot] {
        var attached = false
        for _ in 0..<50 {
            attached = self.state.withLock { state in
                if let existing = state.attached[session], existing !== client, existing.isConnected {
                    return false
                }
                state.attached[session] = client
                state.lastDeliveredEvent[session] = 0
                return true
            }
            if attached { break }
            try? await Task.sleep(for: .milliseconds(20))
        }
        guard attached else {
            throw DaemonError("the background session '\(session)' is already in use by another client")
        }
        try self.store.save(StoredSession(identifier: session, launchCommand: launchCommand))
        self.logger.info("client attached to session '\(session)'")
        return try self.snapshots(session: session)
    }

    /// Sends the events queued for `session` and then `eventsDrained`.
    public func sendBacklog(session: String) {
        self.deliveryQueue.async {
            self.flushLocked(session: session)
            if let client = self.state.withLock({ $0.attached[session] }) {
                client.send(DaemonEvent(kind: .eventsDrained))
            }
        }
    }

    /// The connection of `client` ended.
    public func detach(client: any DaemonClient) {
        let sessions = self.state.withLock { state -> [String] in
            let sessions = state.attached.filter { $0.value === client }.map(\.key)
            for session in sessions { state.attached[session] = nil }
            return sessions
        }
        for session in sessions { self.logger.info("client detached from session '\(session)'") }
    }

    public func snapshots(session: String) throws -> [DaemonTaskSnapshot] {
        try self.store.liveTasks(session: session).map { task in
            let live = self.state.withLock { $0.active[task.id!]?.run.bytesOnDisk }
            return DaemonTaskSnapshot(
                taskID: task.id!,
                originalURL: task.originalURL,
                currentURL: task.currentURL,
                state: task.state.rawValue,
                bytesOnDisk: live ?? task.bytesOnDisk,
                entityLength: task.entityLength,
                taskDescription: task.taskDescription,
                isUpload: task.isUpload
            )
        }
    }

    private static func requireHTTP(_ url: URL) throws {
        guard url.isHTTPWithHost else {
            throw DaemonError("background sessions transfer only http and https URLs, not \(url.absoluteString)")
        }
    }

    /// Records a new, suspended download task.
    public func createDownload(
        session: String,
        url: URL,
        headers: HTTPHeaderFields,
        options: DaemonRequest.TaskOptions
    ) throws -> Int64 {
        try Self.requireHTTP(url)
        let partial = self.paths.partialDirectory.appendingPathComponent("\(UUID().uuidString).part").path
        var task = StoredTask(
            sessionIdentifier: session,
            url: url,
            requestHeaders: headers,
            taskDescription: options.taskDescription,
            isDiscretionary: options.isDiscretionary,
            partialFilePath: partial,
            resourceDeadline: Date().addingTimeInterval(max(1, options.resourceTimeout))
        )
        task.connections = options.connections
        return try self.store.insert(task).id!
    }

    /// Records a new, suspended download that continues from resume data: the daemon takes the
    /// partial file over (moving it into its own directory) and resumes with `If-Range`.
    public func createDownload(
        session: String,
        resumeData data: Data,
        options: DaemonRequest.TaskOptions
    ) throws -> Int64 {
        let resumeData: ResumeData
        do {
            resumeData = try ResumeData.decode(data)
        } catch {
            throw DaemonError("cannot resume: \(error)")
        }
        guard let onDisk = PartialFile.size(at: resumeData.partialFilePath) else {
            throw DaemonError("cannot resume: the partial file \(resumeData.partialFilePath) no longer exists")
        }
        let partial = self.paths.partialDirectory.appendingPathComponent("\(UUID().uuidString).part").path
        if rename(resumeData.partialFilePath, partial) != 0 {
            do {
                try FileManager.default.copyItem(atPath: resumeData.partialFilePath, toPath: partial)
                unlink(resumeData.partialFilePath)
            } catch {
                throw DaemonError("cannot take over the partial file: \(error)")
            }
        }
        var headers = resumeData.requestHeaders
        headers.remove(name: "Range")
        headers.remove(name: "If-Range")
        var task = StoredTask(
            sessionIdentifier: session,
            url: resumeData.originalURL,
            requestHeaders: headers,
            taskDescription: options.taskDescription,
            isDiscretionary: options.isDiscretionary,
            partialFilePath: partial,
            resourceDeadline: Date().addingTimeInterval(max(1, options.resourceTimeout))
        )
        task.currentURL = resumeData.url
        task.connections = options.connections
        task.bytesOnDisk = min(onDisk, resumeData.resumePoint.offset)
        // A segmented download's map, when the file still holds every byte it names.
        if let segments = resumeData.resumePoint.segments, let last = segments.ranges.last, onDisk >= last.upperBound {
            task.segments = segments
        }
        task.entityLength = resumeData.resumePoint.entityLength
        task.entityTag = resumeData.resumePoint.validators.entityTag
        task.lastModified = resumeData.resumePoint.validators.lastModified
        return try self.store.insert(task).id!
    }

    /// Records a new, suspended upload task sending the file at `filePath`.
    public func createUpload(
        session: String,
        url: URL,
        method: String,
        filePath: String,
        headers: HTTPHeaderFields,
        options: DaemonRequest.TaskOptions
    ) throws -> Int64 {
        try Self.requireHTTP(url)
        guard FileManager.default.isReadableFile(atPath: filePath) else {
            throw DaemonError("cannot read the upload file \(filePath)")
        }
        var task = StoredTask(
            sessionIdentifier: session,
            url: url,
            requestHeaders: headers,
            taskDescription: options.taskDescription,
            isDiscretionary: options.isDiscretionary,
            partialFilePath: "",
            resourceDeadline: Date().addingTimeInterval(max(1, options.resourceTimeout))
        )
        task.isUpload = true
        task.method = method.uppercased()
        task.uploadFilePath = filePath
        return try self.store.insert(task).id!
    }

    /// Starts or continues a task. Durable once it returns.
    public func resume(session: String, taskID: Int64) throws {
        var task = try self.ownedTask(session: session, taskID: taskID)
        guard task.state == .suspended else { return }
        task.state = .waiting
        task.notBefore = nil
        try self.store.update(task)
        self.core.enqueue(Self.entry(for: task))
    }

    /// Pauses a task, keeping its bytes.
    public func suspend(session: String, taskID: Int64) throws {
        var task = try self.ownedTask(session: session, taskID: taskID)
        if let run = self.state.withLock({ $0.active[taskID]?.run }) {
            task.state = .suspended
            try self.store.update(task)
            run.stop(.pause)
            return
        }
        guard task.state == .waiting else { return }
        task.state = .suspended
        try self.store.update(task)
        self.core.withdraw(TransferID(.session, taskID))
    }

    /// Cancels a task for good; returns resume data when asked and possible.
    public func cancel(session: String, taskID: Int64, produceResumeData: Bool) async throws -> Data? {
        let task = try self.ownedTask(session: session, taskID: taskID)
        guard task.state != .completed else { return nil }
        let waiting: TransferRun? = self.state.withLock { state in
            guard state.active[taskID] != nil else { return nil }
            state.active[taskID]!.produceResumeData = state.active[taskID]!.produceResumeData || produceResumeData
            return state.active[taskID]!.run
        }
        if let run = waiting {
            return await withCheckedContinuation { continuation in
                self.state.withLock { $0.active[taskID]?.cancelWaiters.append(continuation) }
                run.stop(.cancel)
            }
        }
        self.core.withdraw(TransferID(.session, taskID))
        return self.completeCancelled(task, point: task.resumePoint, produceResumeData: produceResumeData)
    }

    /// Forgets a handled event and deletes its held file.
    public func acknowledge(session: String, eventID: Int64) throws {
        if let event = try self.store.acknowledge(eventID: eventID, session: session), let held = event.heldFilePath {
            unlink(held)
        }
    }

    private func ownedTask(session: String, taskID: Int64) throws -> StoredTask {
        guard let task = try self.store.task(id: taskID), task.sessionIdentifier == session else {
            throw DaemonError("no task \(taskID) in session '\(session)'")
        }
        return task
    }

    // MARK: - TransferOwner

    /// The core chose these tasks: start each unless it stopped waiting meanwhile.
    func startTransfers(_ entries: [TransferScheduler.Entry]) {
        self.deliveryQueue.async {
            for entry in entries { self.startTransfer(entry.id.number) }
        }
    }

    /// Starts task `number` (on `deliveryQueue`), or gives its slot back.
    private func startTransfer(_ number: Int64) {
        let id = TransferID(.session, number)
        guard !self.state.withLock({ $0.isShuttingDown }), var task = try? self.store.task(id: number), task.state == .waiting else {
            self.core.ended(id)
            return
        }
        task.state = .running
        do { try self.store.update(task) } catch {
            self.logger.error("cannot record task \(number) as running: \(error)")
            self.core.ended(id)
            return
        }
        self.startRun(task)
    }

    func yieldTransfer(_ number: Int64, onlyIfWaiting: Bool) {
        self.deliveryQueue.async {
            guard let run = self.state.withLock({ $0.active[number]?.run }) else { return }
            if onlyIfWaiting {
                guard run.stopUnlessAdmitted(.pause) else { return self.core.yieldRefused(TransferID(.session, number)) }
            } else {
                run.stop(.pause)
            }
            // Its end is handled on this queue, after `yielded` is set.
            self.state.withLock { $0.active[number]?.yielded = true }
        }
    }

    /// A run's end gives its slot back to the core first and is recorded after, on
    /// `deliveryQueue` (see ``transferEnded(_:outcome:)``): done once what is queued there now
    /// is done. Without it, a daemon stopped with SIGTERM could exit between the two and leave
    /// the last periodic checkpoint, not where the transfer stopped (64 KiB fetched again).
    func settle() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            self.deliveryQueue.async { continuation.resume() }
        }
    }

    func stopForShutdown() {
        let runs = self.state.withLock { state -> [TransferRun] in
            state.isShuttingDown = true
            return state.active.values.map(\.run)
        }
        for run in runs { run.stop(.pause) }
    }

    func transferResponded(_ transfer: TrackedTransfer, resumedAtOffset: Int64?, expectedTotal: Int64?) {
        guard let resumedAtOffset, let session = self.session(of: transfer) else { return }
        var event = DaemonEvent(kind: .resumed, taskID: transfer.id.number)
        event.offset = resumedAtOffset
        event.expectedTotal = expectedTotal
        self.sendLive(event, session: session)
    }

    func transferCheckpointDue(_ transfer: TrackedTransfer) {
        guard let task = self.state.withLock({ $0.active[transfer.id.number]?.task }) else { return }
        self.deliveryQueue.async {
            // A segmented download's map is read first, then the bytes it names go to the
            // disk: the map recorded never claims bytes that are only in the page cache.
            let map = transfer.segmentMap()
            // Bytes are recorded as safe only once they are on the disk, not in the page cache.
            PartialFile.syncData(atPath: task.partialFilePath)
            let checkpoint = transfer.takeCheckpoint(map: map)
            do { try self.store.checkpoint(taskID: task.id!, point: checkpoint.point, currentURL: checkpoint.currentURL) } catch {
                self.logger.error("checkpoint of task \(task.id!) failed: \(error)")
            }
        }
    }

    func transferProgressed(_ transfer: TrackedTransfer) {
        guard let session = self.session(of: transfer) else { return }
        var event = DaemonEvent(kind: .progress, taskID: transfer.id.number)
        event.bytesOnDisk = transfer.bytesDone
        event.expectedTotal = transfer.totalBytes
        self.sendLive(event, session: session)
    }

    private func session(of transfer: TrackedTransfer) -> String? {
        self.state.withLock { $0.active[transfer.id.number]?.task.sessionIdentifier }
    }

    /// Starts the run of a task just marked running (on `deliveryQueue`).
    private func startRun(_ task: StoredTask) {
        let id = TransferID(.session, task.id!)
        var point = task.isUpload ? nil : task.resumePoint
        if let resumable = point, (PartialFile.size(at: task.partialFilePath) ?? 0) < (resumable.segments?.ranges.last?.upperBound ?? resumable.offset) {
            point = nil  // the partial file lost bytes: start over
        }
        let transfer = TrackedTransfer(
            id: id,
            owner: self,
            url: task.currentURL,
            startingPoint: point,
            totalBytes: task.entityLength,
            collectsResponseBody: task.isUpload,
            cadence: self.core.configuration.cadence
        )
        let request: TransferRequest
        let destination: TransferRun.Destination
        if task.isUpload {
            // Uploads start over on every attempt (a request body cannot be resumed); the
            // response body is collected for the completion event.
            request = TransferRequest(url: task.currentURL, method: task.method, headers: task.requestHeaders, body: .file(task.uploadFilePath ?? ""))
            destination = .observer
        } else {
            request = TransferRequest(url: task.currentURL, method: "GET", headers: task.requestHeaders)
            destination = .file(path: task.partialFilePath, resume: point)
        }
        let remaining = task.resourceDeadline.timeIntervalSinceNow
        let run = TransferRun(
            engine: self.core.engine,
            request: request,
            destination: destination,
            resourceTimeout: .milliseconds(Int64(max(0, remaining) * 1000)),
            bandwidthLimiters: [self.core.globalLimiter],
            maximumConnections: task.connections,
            // A task started ahead is running to its session (URLSession shows no wait for a
            // connection either); only the core hears when it has a slot.
            admission: self.core.admission(for: TransferID(.session, task.id!)) {},
            observer: transfer
        )
        self.state.withLock { $0.active[task.id!] = Active(transfer: transfer, run: run, task: task) }
        self.logger.debug("task \(task.id!) starts at offset \(point?.offset ?? 0)")
        run.start { outcome in self.deliveryQueue.async { self.transferEnded(task, outcome: outcome) } }
    }
}

