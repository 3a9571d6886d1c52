import Foundation
import HaulCore
import HaulEngine
import HaulStore

extension DownloadQueue {
    // MARK: - Scheduling (on `work`)

    /// Starts waiting downloads while the limits allow (``QueueScheduler`` decides which).
    func schedule() {
        dispatchPrecondition(condition: .onQueue(self.work))
        let waiting: [StoredDownload]
        do { waiting = try self.store.downloads(in: .waiting) } catch {
            self.logger.error("cannot read the download queue: \(error)")
            return
        }
        let now = Date()
        let (active, settings, isShuttingDown) = self.state.withLock { state in
            (state.running.map { QueueScheduler.Entry(id: $0.key, host: $0.value.host, priority: $0.value.priority) }, state.settings, state.isShuttingDown)
        }
        guard !isShuttingDown else { return }
        let entries = waiting.map {
            QueueScheduler.Entry(id: $0.id!, host: TransferRun.hostKey($0.url), priority: $0.priority, notBefore: $0.notBefore?.timeIntervalSinceReferenceDate)
        }
        let chosen = QueueScheduler.downloadsToStart(waiting: entries, active: active, settings: settings, now: now.timeIntervalSinceReferenceDate)
        for id in chosen {
            if let download = waiting.first(where: { $0.id == id }) { self.startTransfer(download) }
        }
        if let next = QueueScheduler.nextWakeUp(waiting: entries, now: now.timeIntervalSinceReferenceDate) {
            self.scheduleWakeUp(at: Date(timeIntervalSinceReferenceDate: next))
        }
    }

    private func scheduleWakeUp(at date: Date) {
        let schedule = self.state.withLock { state -> Bool in
            if let planned = state.wakeUpAt, planned <= date, planned > Date() { return false }
            state.wakeUpAt = date
            return true
        }
        guard schedule else { return }
        self.work.asyncAfter(deadline: .now() + max(0, date.timeIntervalSinceNow) + 0.01) { [weak self] in
            self?.state.withLock { $0.wakeUpAt = nil }
            self?.schedule()
        }
    }

    /// After a limit went down: the newest, lowest-priority transfers beyond it go back to
    /// waiting (keeping their bytes) so that the limits hold at once, not eventually.
    func enforceLimits() {
        let toRequeue = self.state.withLock { state -> [TransferRun] in
            let ordered = state.running.filter { $0.value.intent == nil }
                .sorted { ($0.value.priority, -$0.key) > ($1.value.priority, -$1.key) }
            var kept = 0
            var perHost: [String: Int] = [:]
            var runs: [TransferRun] = []
            for (id, running) in ordered {
                if kept < state.settings.maximumConcurrentDownloads, perHost[running.host, default: 0] < state.settings.maximumConnectionsPerHost {
                    kept += 1
                    perHost[running.host, default: 0] += 1
                } else {
                    state.running[id]?.intent = .requeue
                    runs.append(running.run)
                }
            }
            return runs
        }
        for run in toRequeue { run.stop(.pause) }
    }

    private func startTransfer(_ stored: StoredDownload) {
        let id = stored.id!
        let name = stored.fileName ?? FileNaming.suggestedFilename(contentDisposition: nil, url: stored.url)
        let partial = stored.partialPath ?? (stored.directory as NSString).appendingPathComponent("\(name).\(id).haul-part")
        var resumable = stored.resumePoint
        if let offset = resumable?.offset, (PartialFileSize.of(partial) ?? 0) < offset { resumable = nil }
        let point = resumable
        let download: StoredDownload
        do {
            guard let updated = try self.store.updateDownload(id: id, { download in
                download.state = .active
                download.partialPath = partial
                download.startedAt = download.startedAt ?? Date()
                download.notBefore = nil
                if point == nil { download.bytesDone = 0 }
            }) else { return }
            download = updated
        } catch {
            self.logger.error("cannot record download \(id) as active: \(error)")
            return
        }
        let transfer = QueueTransfer(queue: self, download: download, startingAt: point?.offset ?? 0)
        // The per-download limit is fixed at add time; an unlimited download skips it.
        let limiters = download.speedLimit > 0 ? [self.globalLimiter, BandwidthLimiter(bytesPerSecond: download.speedLimit)] : [self.globalLimiter]
        let run = TransferRun(
            engine: self.engine,
            request: TransferRequest(url: download.url, method: "GET"),
            destination: .file(path: partial, resume: point),
            resourceTimeout: nil,
            bandwidthLimiters: limiters,
            observer: transfer
        )
        self.state.withLock {
            $0.running[id] = Running(transfer: transfer, run: run, host: TransferRun.hostKey(download.url), priority: download.priority)
        }
        self.logger.debug("download \(id) starts at offset \(point?.offset ?? 0) from \(download.url.absoluteString)")
        self.publish(.changed(self.info(for: download)))
        run.start { outcome in self.work.async { self.transferEnded(id, outcome: outcome) } }
    }

    /// Progress from a transfer: store a checkpoint and/or tell subscribers.
    func transferCheckpoint(_ transfer: QueueTransfer, bytes: Int64, broadcast: Bool, store: Bool = true) {
        let point = transfer.resumePoint(bytes: bytes)
        let (url, suggested, total) = transfer.live.withLock { ($0.currentURL, $0.suggestedName, $0.totalBytes) }
        let id = transfer.downloadID
        self.work.async {
            guard self.state.withLock({ $0.running[id]?.transfer === transfer }) else { return }
            do {
                guard store else {
                    if broadcast, let current = try self.store.download(id: id) { self.publish(.changed(self.info(for: current))) }
                    return
                }
                let updated = try self.store.updateDownload(id: id) { download in
                    download.record(point, currentURL: url)
                    download.totalBytes = total
                    if download.requestedName == nil, let suggested { download.fileName = suggested }
                }
                if broadcast, let updated { self.publish(.changed(self.info(for: updated))) }
            } catch {
                self.logger.error("checkpoint of download \(id) failed: \(error)")
            }
        }
    }

    // MARK: - Outcomes (on `work`)

    func transferEnded(_ id: Int64, outcome: TransferOutcome) {
        dispatchPrecondition(condition: .onQueue(self.work))
        guard let running = self.state.withLock({ $0.running[id] }) else { return }
        let transfer = running.transfer
        switch outcome {
        case .completed(let response, let total) where (200..<300).contains(response.statusCode):
            // Verification reads the whole file: off the serial queue, the slot stays taken.
            let url = response.url
            let disposition = response.headers["Content-Disposition"]
            DispatchQueue.global().async {
                let verdict = self.verify(id: id, total: total)
                self.work.async { self.finish(id, transfer: transfer, total: total, url: url, disposition: disposition, verdict: verdict) }
            }
            return
        case .completed(let response, _):
            let reason = "the server answered \(response.statusCode)"
            let status = response.statusCode
            self.failed(id, transfer: transfer, message: reason, kind: .serverStatus(status), retryAfter: response.headers["Retry-After"], point: nil)
        case .failed(let error, let response, let point):
            let status = error.userInfo["statusCode"] as? Int
            let kind = TransferFailureKind(error, status: status)
            self.failed(id, transfer: transfer, message: error.localizedDescription, kind: kind, retryAfter: response?.headers["Retry-After"], point: point)
        case .stopped(_, _, let point):
            self.stopped(id, intent: running.intent ?? .pause, transfer: transfer, point: point)
        }
        self.schedule()
    }

    private func stopped(_ id: Int64, intent: StopIntent, transfer: QueueTransfer, point: ResumePoint?) {
        self.state.withLock { _ = $0.running.removeValue(forKey: id) }
        do {
            switch intent {
            case .remove(let deleteRow):
                let download = try self.store.download(id: id)
                if let partial = download?.partialPath { unlink(partial) }
                if deleteRow {
                    try self.store.deleteDownload(id: id)
                } else {
                    try self.store.updateDownload(id: id) { download in
                        download.state = .removed
                        download.bytesDone = 0
                        download.finishedAt = Date()
                    }
                }
                self.publish(.removed(id: id))
            case .pause, .requeue, .shutdown:
                let url = transfer.live.withLock { $0.currentURL }
                let updated = try self.store.updateDownload(id: id) { download in
                    download.record(point, currentURL: url)
                    if case .requeue = intent, download.state == .active { download.state = .waiting }
                }
                if let updated { self.publish(.changed(updated.info)) }
            }
        } catch {
            self.logger.error("cannot record the stop of download \(id): \(error)")
        }
    }

    private func failed(
        _ id: Int64,
        transfer: QueueTransfer,
        message: String,
        kind: TransferFailureKind,
        retryAfter: String?,
        point: ResumePoint?
    ) {
        self.state.withLock { _ = $0.running.removeValue(forKey: id) }
        do {
            guard let download = try self.store.download(id: id) else { return }
            let decision = self.configuration.retryPolicy.decision(
                afterAttempt: download.failedAttempts + 1,
                failure: kind,
                retryAfter: retryAfter.flatMap { RetryPolicy.retryAfterSeconds($0) },
                randomUnit: Double.random(in: 0..<1)
            )
            let url = transfer.live.withLock { $0.currentURL }
            let updated = try self.store.updateDownload(id: id) { download in
                download.record(point, currentURL: url)
                guard download.state == .active else { return }  // paused or cancelled meanwhile
                switch decision {
                case .retry(let delay):
                    download.failedAttempts += 1
                    download.state = .waiting
                    download.notBefore = Date().addingTimeInterval(delay)
                    download.errorMessage = "\(message); retrying"
                case .giveUp where download.urlIndex + 1 < download.urls.count:
                    // Next mirror, keeping the bytes: If-Range decides whether they fit.
                    download.urlIndex += 1
                    download.failedAttempts = 0
                    download.state = .waiting
                    download.errorMessage = "\(message); trying mirror \(download.urlIndex)"
                case .giveUp:
                    download.state = .error
                    download.errorMessage = message
                    download.finishedAt = Date()
                    // An error page (404, 500 …) is not part of the file: nothing resumable to keep.
                    if case .serverStatus = kind, point == nil, let partial = download.partialPath {
                        unlink(partial)
                        download.partialPath = nil
                    }
                }
            }
            if let updated {
                self.logger.info("download \(id): \(message) → \(updated.state.rawValue)")
                self.publish(.changed(updated.info))
            }
        } catch {
            self.logger.error("cannot record the failure of download \(id): \(error)")
        }
    }

    /// Checks the complete partial file: length and, when given, checksum.
    /// Returns `nil` when it is good, else the reason.
    private func verify(id: Int64, total: Int64) -> String? {
        guard let download = try? self.store.download(id: id), let partial = download.partialPath else {
            return "the download's record is gone"
        }
        guard let size = PartialFileSize.of(partial) else { return "the partial file \(partial) is gone" }
        guard size == total else { return "the file has \(size) bytes but the server's entity has \(total)" }
        guard let checksum = download.checksum else { return nil }
        do {
            let spec = try ChecksumSpec(parsing: checksum)
            let actual = try FileChecksum.hexDigest(ofFileAt: partial, algorithm: spec.algorithm)
            guard actual == spec.hexDigest else {
                return "checksum mismatch: expected \(spec.algorithm.rawValue)=\(spec.hexDigest), got \(actual)"
            }
            return nil
        } catch {
            return "cannot verify the checksum: \(error)"
        }
    }

    private func finish(_ id: Int64, transfer: QueueTransfer, total: Int64, url: URL, disposition: String?, verdict: String?) {
        let running = self.state.withLock { $0.running.removeValue(forKey: id) }
        defer { self.schedule() }
        do {
            guard let download = try self.store.download(id: id), let partial = download.partialPath else { return }
            if case .remove = running?.intent {
                unlink(partial)
                self.stopped(id, intent: running!.intent!, transfer: transfer, point: nil)
                return
            }
            if let verdict {
                // A bad file is never presented as finished; resuming starts over.
                let updated = try self.store.updateDownload(id: id) { download in
                    download.state = .error
                    download.errorMessage = verdict
                    download.bytesDone = 0
                    download.entityTag = nil
                    download.lastModified = nil
                    download.finishedAt = Date()
                }
                self.logger.warning("download \(id): \(verdict)")
                if let updated { self.publish(.changed(updated.info)) }
                return
            }
            let name = download.requestedName ?? FileNaming.suggestedFilename(contentDisposition: disposition, url: url)
            let finalPath: String
            do {
                finalPath = try NoOverwriteMove.moveChoosingFreeName(partial, directory: download.directory, name: name)
            } catch {
                let message = "cannot move the finished file into \(download.directory): \(error)"
                let updated = try self.store.updateDownload(id: id) { download in
                    download.state = .error
                    download.errorMessage = message
                    download.bytesDone = total
                }
                if let updated { self.publish(.changed(updated.info)) }
                return
            }
            let updated = try self.store.updateDownload(id: id) { download in
                download.state = .complete
                download.bytesDone = total
                download.totalBytes = total
                download.finalPath = finalPath
                download.fileName = (finalPath as NSString).lastPathComponent
                download.partialPath = nil
                download.errorMessage = nil
                download.currentURL = url
                download.finishedAt = Date()
            }
            self.logger.info("download \(id) complete: \(finalPath) (\(total) bytes)")
            if let updated { self.publish(.changed(updated.info)) }
        } catch {
            self.logger.error("cannot record the end of download \(id): \(error)")
        }
    }
}
