import Foundation
import HaulCore
import HaulEngine
import HaulStore

extension TransferDaemon {
    /// A transfer run ended (on `deliveryQueue`): record the result, queue events, retry or
    /// wait, and give the slot back to the core.
    func transferEnded(_ task: StoredTask, outcome: TransferOutcome) {
        dispatchPrecondition(condition: .onQueue(self.deliveryQueue))
        let id = TransferID(.session, task.id!)
        let active = self.state.withLock { $0.active.removeValue(forKey: task.id!) }
        let isShuttingDown = self.state.withLock { $0.isShuttingDown }
        // The slot is free first, so that a retry or a yield enqueued below is a new entry.
        self.core.ended(id)
        switch outcome {
        case .completed(let response, _) where RetryPolicy.isTransient(status: response.statusCode):
            let error = URLError(.badServerResponse, userInfo: [NSLocalizedDescriptionKey: "server answered \(response.statusCode)"])
            self.handleFailure(task, failure: TransferFailure(error, serverStatus: response.statusCode), response: response, point: nil)
        case .completed(let response, _):
            if task.isUpload {
                self.finishUpload(task, response: response, body: active?.transfer.responseBody ?? Data())
            } else {
                self.finishDownload(task, response: response)
            }
        case .failed(let failure, let response, let point):
            self.handleFailure(task, failure: failure, response: response, point: point)
        case .stopped(.cancel, _, let point):
            let data = self.completeCancelled(task, point: point, produceResumeData: active?.produceResumeData ?? false)
            for waiter in active?.cancelWaiters ?? [] { waiter.resume(returning: data) }
        case .stopped(_, _, let point):
            let yielded = active?.yielded ?? false
            let url = active?.transfer.currentURL ?? task.currentURL
            do {
                PartialFile.syncData(atPath: task.partialFilePath)
                try self.store.checkpoint(taskID: task.id!, point: point, currentURL: url)
                guard var current = try self.store.task(id: task.id!) else { return }
                if current.state == .running, !isShuttingDown {
                    current.state = yielded ? .waiting : .suspended
                    try self.store.update(current)
                    if yielded { self.core.enqueue(Self.entry(for: current)) }
                }
            } catch {
                self.logger.error("cannot record the pause of task \(task.id!): \(error)")
            }
        }
    }

    private func finishDownload(_ task: StoredTask, response: ResponseInfo) {
        let name = FileNaming.suggestedFilename(contentDisposition: response.headers["Content-Disposition"], url: response.url)
        let heldDirectory = self.paths.heldDirectory(session: task.sessionIdentifier)
        let held = heldDirectory.appendingPathComponent("\(task.id!)-\(name)").path
        do {
            try FileManager.default.createDirectory(at: heldDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            guard rename(task.partialFilePath, held) == 0 else {
                throw DaemonError("cannot move the finished download into the holding area: \(String(cString: strerror(errno)))")
            }
        } catch {
            self.completeWithError(task, error: URLError(.cannotMoveFile, userInfo: [NSLocalizedDescriptionKey: "\(error)"]), point: nil)
            return
        }
        var finished = PendingEvent(sessionIdentifier: task.sessionIdentifier, taskID: task.id!, kind: .finishedDownloading)
        finished.heldFilePath = held
        finished.statusCode = response.statusCode
        finished.responseHeaders = response.headers
        finished.responseURL = response.url
        var completed = PendingEvent(sessionIdentifier: task.sessionIdentifier, taskID: task.id!, kind: .completed)
        completed.statusCode = response.statusCode
        completed.responseHeaders = response.headers
        completed.responseURL = response.url
        self.logger.info("task \(task.id!) finished: \(held)")
        self.record(task, events: [finished, completed])
    }

    private func finishUpload(_ task: StoredTask, response: ResponseInfo, body: Data) {
        var completed = PendingEvent(sessionIdentifier: task.sessionIdentifier, taskID: task.id!, kind: .completed)
        completed.statusCode = response.statusCode
        completed.responseHeaders = response.headers
        completed.responseURL = response.url
        completed.responseBody = body
        self.logger.info("upload task \(task.id!) finished with status \(response.statusCode)")
        self.record(task, events: [completed])
    }

    private func handleFailure(_ task: StoredTask, failure: TransferFailure, response: ResponseInfo?, point: ResumePoint?) {
        let policy = TransferOutcomePolicy(retryPolicy: self.configuration.retryPolicy)
        let decision = policy.decide(
            TransferOutcomePolicy.Failure(
                attempt: task.failedAttempts + 1,
                kind: failure.kind,
                retryAfter: response?.headers["Retry-After"].flatMap { RetryPolicy.retryAfterSeconds($0) },
                hasResumePoint: point != nil,
                secondsUntilDeadline: task.resourceDeadline.timeIntervalSinceNow
            ),
            randomUnit: Double.random(in: 0..<1)
        )
        guard case .retry(let delay, _) = decision else {
            self.completeWithError(task, error: failure.error, point: point)
            return
        }
        let error = failure.error
        self.logger.info("task \(task.id!): \(error.localizedDescription); retrying in \(Int(delay.rounded(.up))) s")
        do {
            // A map names bytes anywhere in the file: they go to the disk before it is recorded.
            if point?.mapped == true { PartialFile.syncData(atPath: task.partialFilePath) }
            try self.store.checkpoint(taskID: task.id!, point: point, currentURL: task.currentURL)
            guard var current = try self.store.task(id: task.id!) else { return }
            current.failedAttempts += 1
            current.lastError = error.localizedDescription
            current.notBefore = Date().addingTimeInterval(delay)
            guard current.state == .running else { return }  // suspended meanwhile
            current.state = .waiting
            try self.store.update(current)
            self.core.enqueue(Self.entry(for: current))
        } catch {
            self.logger.error("cannot record the retry of task \(task.id!): \(error)")
        }
    }

    private func completeWithError(_ task: StoredTask, error: URLError, point: ResumePoint?) {
        var completed = PendingEvent(sessionIdentifier: task.sessionIdentifier, taskID: task.id!, kind: .completed)
        completed.errorCode = error.code.rawValue
        completed.errorMessage = error.localizedDescription
        if let point, !task.isUpload {
            completed.resumeData = self.resumeData(task, point: point)
        } else if !task.isUpload {
            unlink(task.partialFilePath)
        }
        self.logger.info("task \(task.id!) failed: \(error.localizedDescription)")
        self.record(task, events: [completed])
    }

    /// Completes a cancelled task; returns its resume data when asked for and possible.
    func completeCancelled(_ task: StoredTask, point: ResumePoint?, produceResumeData: Bool) -> Data? {
        let data = produceResumeData && !task.isUpload ? point.map { self.resumeData(task, point: $0) } : nil
        if data == nil, !task.isUpload { unlink(task.partialFilePath) }
        var completed = PendingEvent(sessionIdentifier: task.sessionIdentifier, taskID: task.id!, kind: .completed)
        completed.errorCode = URLError.Code.cancelled.rawValue
        completed.errorMessage = "cancelled"
        completed.resumeData = data
        self.record(task, events: [completed])
        return data
    }

    private func resumeData(_ task: StoredTask, point: ResumePoint) -> Data {
        ResumeData(
            url: task.currentURL,
            originalURL: task.originalURL,
            requestHeaders: task.requestHeaders,
            partialFilePath: task.partialFilePath,
            resumePoint: point
        ).encoded()
    }

    /// Marks the task completed with `events`, then delivers them.
    private func record(_ task: StoredTask, events: [PendingEvent]) {
        self.deliveryQueue.async {
            do {
                _ = try self.store.complete(taskID: task.id!, events: events)
            } catch {
                self.logger.error("cannot record the completion of task \(task.id!): \(error)")
            }
            self.flushLocked(session: task.sessionIdentifier)
        }
    }

    // MARK: - Delivery

    /// Sends a live (not durable) event to the session's client, if attached.
    func sendLive(_ event: DaemonEvent, session: String) {
        guard let client = self.state.withLock({ $0.attached[session] }) else { return }
        self.deliveryQueue.async { client.send(event) }
    }

    /// Sends the durable events the attached client has not been sent yet; with no client
    /// attached, launches the session's client if it asked to be. Runs on `deliveryQueue`.
    func flushLocked(session: String) {
        guard let client = self.state.withLock({ $0.attached[session] }) else {
            self.launchIfNeeded(session: session)
            return
        }
        do {
            var last = self.state.withLock { $0.lastDeliveredEvent[session] ?? 0 }
            for stored in try self.store.pendingEvents(session: session) where stored.id! > last {
                client.send(DaemonEvent(stored))
                last = stored.id!
            }
            self.state.withLock { $0.lastDeliveredEvent[session] = last }
        } catch {
            self.logger.error("cannot read the events of session '\(session)': \(error)")
        }
    }

    /// Runs the session's launch command (the Linux analogue of waking an app), at most once per
    /// ``Configuration/launchInterval``, when events wait and no client is attached.
    func launchIfNeeded(session: String) {
        guard let stored = try? self.store.session(identifier: session), let command = stored.launchCommand,
            let executable = command.first
        else { return }
        let now = ContinuousClock.now
        let allowed = self.state.withLock { state -> Bool in
            guard state.attached[session] == nil else { return false }
            if let last = state.lastLaunch[session], now - last < self.configuration.launchInterval { return false }
            state.lastLaunch[session] = now
            return true
        }
        guard allowed else { return }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = Array(command.dropFirst())
        var environment = ProcessInfo.processInfo.environment
        environment["HAUL_SESSION_IDENTIFIER"] = session
        environment["HAUL_LAUNCH_REASON"] = "background-events"
        process.environment = environment
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        do {
            try process.run()
            self.logger.info("launched \(executable) for session '\(session)'")
        } catch {
            self.logger.error("cannot launch \(executable) for session '\(session)': \(error)")
        }
    }
}

extension DaemonEvent {
    init(_ stored: PendingEvent) {
        switch stored.kind {
        case .finishedDownloading: self.init(kind: .finishedDownloading, taskID: stored.taskID)
        case .completed: self.init(kind: .completed, taskID: stored.taskID)
        }
        self.eventID = stored.id
        self.heldFilePath = stored.heldFilePath
        self.statusCode = stored.statusCode
        self.responseHeaders = stored.responseHeaders
        self.responseURL = stored.responseURL
        self.errorCode = stored.errorCode
        self.errorMessage = stored.errorMessage
        self.resumeData = stored.resumeData
        self.responseBody = stored.responseBody
    }
}
