import Foundation
import HaulCore
import HaulEngine
import HaulStore
import Synchronization

extension DownloadQueue {
    // MARK: - TransferOwner

    /// The core chose these downloads: each is claimed (in a fleet, another daemon may have
    /// it) and started unless it stopped waiting meanwhile, through the inbox.
    func startTransfers(_ entries: [TransferScheduler.Entry]) {
        self.post(entries.map { .start($0) })
    }

    func yieldTransfer(_ number: Int64, onlyIfWaiting: Bool) {
        self.work.async {
            // A run stopping already for another reason ends with it (and gives its slot back).
            if self.requeue(number, onlyIfWaiting: onlyIfWaiting) == .holdsSlot { self.core.yieldRefused(TransferID(.queue, number)) }
        }
    }

    func stopForShutdown() {
        let runs = self.state.withLock { state -> [QueueRun] in
            state.isShuttingDown = true
            for id in state.running.keys where state.running[id]?.intent == nil { state.running[id]?.intent = .shutdown }
            return state.running.values.map(\.run)
        }
        for run in runs { run.stop(.pause) }
    }

    /// The ends of runs whose slots were given back before they were recorded are saved on
    /// `work` by a later drain: done once what is queued there now is done, and the ends
    /// still waiting are recorded.
    func settle() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            self.work.async {
                self.recordEnds(all: true)
                continuation.resume()
            }
        }
    }

    func transferResponded(_ transfer: TrackedTransfer, resumedAtOffset: Int64?, expectedTotal: Int64?) {
        self.broadcast(transfer)
    }

    func transferCheckpointDue(_ transfer: TrackedTransfer) {
        let id = transfer.id.number
        self.work.async {
            guard let running = self.state.withLock({ $0.running[id] }), running.transfer === transfer, running.intent == nil else { return }
            let lease = running.lease
            do {
                // A segmented download's map is read first, then the bytes it names go to the
                // disk: the map recorded never claims bytes that are only in the page cache.
                let map = transfer.segmentMap()
                // A checkpoint points at the partial file by its name: an unnamed one gets it.
                guard running.run.file?.nameFile() == true else {
                    self.logger.error("checkpoint of download \(id) skipped: its partial file cannot be named")
                    return
                }
                // Bytes are recorded as safe only once they are on the disk, not in the page cache.
                if let partial = running.stored.partialPath { PartialFile.syncData(atPath: partial) }
                let checkpoint = transfer.takeCheckpoint(map: map)
                try self.updateDownload(id: id, lease: lease) { download in
                    download.record(checkpoint.point, currentURL: checkpoint.currentURL)
                    download.totalBytes = checkpoint.totalBytes ?? download.totalBytes
                    if download.requestedName == nil, let suggested = checkpoint.suggestedName { download.fileName = suggested }
                }
            } catch let lost as QueueLeaseLost {
                self.fence(id, reason: "\(lost)")
            } catch {
                self.logger.error("checkpoint of download \(id) failed: \(error)")
            }
        }
    }

    func transfer(_ transfer: TrackedTransfer, droppedMirror url: URL, reason: String) {
        self.logger.notice("download \(transfer.id.number): mirror \(url.absoluteString) dropped: \(reason)")
    }

    func transferProgressed(_ transfer: TrackedTransfer) {
        self.broadcast(transfer)
    }

    /// Tells subscribers where a running download stands (from its live numbers and the row as
    /// last saved: no store read). Nothing to do, not even a hop to `work`, when nobody listens
    /// for progress (a small file's response and first bytes each woke the queue's thread), or
    /// when a small body is all on disk, at the report or by the time the queue's thread takes
    /// it: its end, which follows, says as much (`haul wait` on 1,000 files of 16 KiB heard 5.5
    /// events a file: waiting, waiting again as its run waited for a slot, active, its answer,
    /// its one write, complete).
    private func broadcast(_ transfer: TrackedTransfer) {
        guard self.hasProgressSubscribers.load(ordering: .relaxed), !transfer.smallBodyIsComplete else { return }
        let id = transfer.id.number
        self.work.async {
            let stored = self.state.withLock { state -> StoredDownload? in
                guard !state.progressSubscriberIDs.isEmpty, let running = state.running[id], running.transfer === transfer else { return nil }
                return running.stored
            }
            guard let stored else { return }
            // The numbers as they are now, which the report would carry.
            let info = self.info(for: stored)
            guard !Self.saysNothingNew(info) else { return }
            self.publish(.changed(info))
        }
    }

    /// Whether `info`, a running download's live state, shows a small body all on disk: its end
    /// follows at once and says as much, so subscribers are not told this first
    /// (``TrackedTransfer/smallBodyBytes``).
    static func saysNothingNew(_ info: QueuedDownloadInfo) -> Bool {
        info.totalBytes.map { $0 <= TrackedTransfer.smallBodyBytes && info.bytesDone >= $0 } ?? false
    }

    enum StartResult {
        case started
        /// Nothing runs in the slot of download `slot` (the one asked for, or the one claimed in
        /// its place).
        case notStarted(slot: Int64)
        /// Not now (the fleet uses every connection to its host): ready again as this entry.
        case retry(TransferScheduler.Entry)
    }

    /// How many of the next downloads of its host a fleet's claim offers as alternatives
    /// (``QueueClaim/alternatives``).
    static let claimAlternatives = 8

    /// Claims a waiting download and starts its run (on `work`). The claim reads the row (it
    /// must be waiting); what it needs beforehand comes from the scheduler's entry (the host)
    /// and the index (the connections asked for), not from a read of its own.
    ///
    /// A fleet's claim offers the next downloads of the host this daemon would start
    /// (``TransferCore/takeReady(host:owner:limit:)``): when another daemon holds `entry`'s, the
    /// first of those still free is claimed and started in its slot instead, and the rest are
    /// ready again.
    func startRun(_ entry: TransferScheduler.Entry) -> StartResult {
        var entry = entry
        let askedID = entry.id.number
        let me = self.configuration.daemonName
        guard let indexed = self.state.withLock({ $0.index.entry(id: askedID)?.info }) else { return .notStarted(slot: askedID) }
        let settings = self.settings
        // A list's files, read before it is claimed (a read that fails leaves it waiting).
        var listFiles: [StoredListFile]?
        if indexed.fileCount != nil {
            do {
                guard let lists = self.store as? TransferStore else { throw DaemonError("list downloads need hauld's own store") }
                listFiles = try self.state.withLock { $0.addedListFiles.removeValue(forKey: askedID) } ?? lists.files(of: askedID)
            } catch {
                self.logger.error("cannot read the files of list download \(askedID): \(error)")
                return .notStarted(slot: askedID)
            }
        }
        var wanted = indexed.maximumConnections ?? settings.connectionsPerDownload ?? QueueSettings.defaultConnectionsPerDownload
        if self.store.isShared {
            // A fleet's claim holds its connections to the host against the whole fleet's
            // budget until the download ends: one that asked for them all kept every other
            // download of the host waiting (1,000 small files: one a second). Each asks for its
            // share among the downloads of the host waiting here; alone, for them all. (Counted
            // before the alternatives are taken out of the queue: they wait too.)
            let waiting = self.core.readyCount(host: entry.host)
            wanted = min(wanted, max(1, settings.maximumConnectionsPerHost / (waiting + 1)))
        }
        let asked = entry
        let alternatives = self.store.isShared ? self.core.takeReady(host: entry.host, owner: .queue, limit: Self.claimAlternatives) : []
        defer {
            if !alternatives.isEmpty {
                // `entry` is the alternative claimed instead, if one was. Those not started go
                // back, unless they wait no more (what other daemons changed, read meanwhile,
                // says so: ``catchUpAfterRefusal()``).
                let started = entry.id != asked.id ? entry : nil
                let back = self.state.withLock { state in
                    alternatives.filter { $0.id != started?.id && state.index.entry(id: $0.id.number)?.info.state == .waiting }
                }
                self.core.startedInstead(of: asked.id, started, returning: back)
            }
        }
        let claim = QueueClaim(
            downloadID: askedID,
            daemon: me,
            leaseSeconds: self.configuration.leaseSeconds,
            host: entry.host,
            connections: wanted,
            maximumPerHost: self.store.isShared ? settings.maximumConnectionsPerHost : 0,
            // Those that would ask for the same connections (the claim grants them for the one
            // it takes).
            alternatives: alternatives.isEmpty ? [] : self.state.withLock { state in
                alternatives.filter { state.index.entry(id: $0.id.number)?.info.maximumConnections == indexed.maximumConnections }
            }.map(\.id.number)
        )
        // What the claim found on disk: the bytes it continues from, or why it starts anew; and
        // where its last run promised the finished file (placed, perhaps, before that daemon
        // stopped: the promise leaves the row, and is looked at below).
        let takeover = Mutex<(previous: String?, droppedBytes: Int64, promise: (path: String, total: Int64)?)>((nil, 0, nil))
        let sentAt = TransferCore.monotonicNow()
        let outcome: QueueClaimOutcome
        do {
            outcome = try self.claimDownload(claim) { download in
                let name = download.fileName ?? FileNaming.suggestedFilename(contentDisposition: nil, url: download.url)
                let partial = download.partialPath ?? FileNaming.path(of: "\(name).\(download.id ?? askedID).haul-part", in: download.directory)
                var resumable = download.resumePoint
                // Positioned writes leave the file at least as long as the last byte of the map;
                // a file that is shorter (or missing: another machine's disk) cannot continue.
                if let point = resumable, (PartialFile.size(at: partial) ?? 0) < (point.segments?.ranges.last?.upperBound ?? point.offset) { resumable = nil }
                let dropped = resumable == nil ? download.bytesDone + (download.segments?.byteCount ?? 0) : 0
                let promise = download.finalPath.flatMap { path in download.totalBytes.map { (path, $0) } }
                takeover.withLock { $0 = (download.lastRunner, dropped, promise) }
                download.finalPath = nil
                download.lastRunner = me
                download.state = .active
                download.partialPath = partial
                download.startedAt = download.startedAt ?? Date()
                download.notBefore = nil
                // Running again: an earlier attempt's error ("…; retrying") is no longer news.
                download.errorMessage = nil
                download.errorCode = nil
                if resumable == nil {
                    download.bytesDone = 0
                    download.segments = nil
                }
            }
        } catch {
            self.logger.error("cannot claim download \(askedID): \(error)")
            return .notStarted(slot: askedID)
        }
        let download: StoredDownload
        let lease: QueueLease
        let connections: Int
        switch outcome {
        case .claimed(let row, let granted, let count):
            download = row
            lease = granted
            connections = count
            if let alternative = alternatives.first(where: { $0.id.number == row.id }) {
                // Another daemon had taken the one asked for; this one starts in its slot.
                entry = alternative
                self.logger.debug("download \(askedID) is another daemon's; download \(alternative.id.number) starts in its place")
            }
        case .notWaiting(let found):
            // Paused, removed or finished meanwhile (or gone: the index forgets it).
            let row = found ?? (try? self.store.download(id: askedID))
            self.state.withLock { state in
                if let row { state.saved(row) } else { state.index.remove(id: askedID) }
            }
            self.catchUpAfterRefusal()
            return .notStarted(slot: askedID)
        case .heldElsewhere(let holder, let found):
            self.logger.debug("download \(askedID) is held by \(holder ?? "another daemon")")
            if let row = found ?? (try? self.store.download(id: askedID)) { self.state.withLock { $0.saved(row) } }
            self.catchUpAfterRefusal()
            return .notStarted(slot: askedID)
        case .hostBusy:
            // The fleet uses the host's whole budget: no more of its downloads ask here until
            // one of this daemon's gives a connection back, another daemon's does, or a second
            // passes (``TransferCore/capHost(_:excluding:)``); this one waits first in line.
            self.core.capHost(entry.host, excluding: entry.id)
            return .retry(entry)
        }
        let id = download.id!
        let (previous, dropped, promise) = takeover.withLock { $0 }
        if let promise, let settled = self.settleClaimedPromise(download, placedBy: previous, lease: lease, promise: promise) {
            self.publish(.changed(settled.info))
            return .notStarted(slot: id)
        }
        if let previous, previous != me {
            if let point = download.resumePoint {
                self.logger.notice("download \(id) taken over from \(previous): continuing at \(point.done.byteCount) bytes from the partial file \(download.partialPath ?? "")")
            } else {
                self.logger.notice("download \(id) taken over from \(previous): \(dropped > 0 ? "its partial file is not on this machine's storage, " : "")starting from zero")
            }
        } else if dropped > 0 {
            self.logger.notice("download \(id): the partial file does not hold the \(dropped) bytes on record; starting from zero")
        }
        let point = download.resumePoint
        let partial = download.partialPath!
        let transfer = TrackedTransfer(
            id: TransferID(.queue, id),
            owner: self,
            url: download.url,
            startingPoint: point,
            totalBytes: download.totalBytes,
            speedLimit: download.speedLimit,
            cadence: self.core.configuration.cadence
        )
        let run: QueueRun
        let lane: RunGate.Lane?
        let admission: (any RunAdmission)?
        // Whether its run waits for a slot: listed as waiting until it has one.
        var standby: Bool
        if listFiles == nil, let hostRun = self.hostRun(for: download, entry: entry, point: point) {
            run = .member(self.member(of: hostRun, download: download, entry: entry, transfer: transfer, partial: partial, connections: connections), hostRun)
            lane = nil
            admission = nil
            standby = true
        } else if let listFiles, let lists = self.store as? TransferStore {
            // Its files spread over every engine; it holds one slot of the core, as a download.
            lane = nil
            admission = self.core.admission(for: entry.id) { self.post([.admitted(id)]) }
            let setup = ListRun.Setup(
                download: id,
                directory: download.directory,
                headers: Self.headers(download.requestHeaders),
                engines: self.core.engines,
                bandwidthLimiters: [self.core.globalLimiter, transfer.speedLimiter],
                filesAtOnce: max(1, settings.maximumConnectionsPerHost),
                store: lists
            )
            run = .list(ListRun(setup: setup, files: listFiles, transfer: transfer, admission: admission, logger: self.logger))
            standby = admission != nil
        } else {
            (run, lane, admission) = self.fileRun(of: download, entry: entry, transfer: transfer, partial: partial, point: point, connections: connections)
            standby = admission != nil
        }
        let info = download.info
        self.state.withLock {
            $0.running[id] = Running(
                transfer: transfer, run: run, host: entry.host, lane: lane, stored: download, lease: lease,
                leaseValidUntil: sentAt + self.configuration.leaseSeconds,
                isAdmitted: !standby
            )
            // Listed from now on with its live numbers: its entry needs no record.
            $0.saved(download, as: info)
        }
        self.logger.debug("download \(id) starts at offset \(point?.offset ?? 0) from \(download.url.absoluteString) (lease \(lease))")
        // A run that waits for a slot (started ahead) is listed as waiting, as subscribers heard
        // when it was added: they hear of it when it takes a slot (``admitted(_:)``) or ends.
        if !standby { self.publish(.changed(Self.overlay(info, live: transfer, standby: false))) }
        self.launchWhenSaved(id, run)
        return .started
    }

    /// The run of one file for `download`, just claimed: on the engine the core picks for its
    /// host and size (with the lane it is counted in), and its admission at the core's gate.
    private func fileRun(
        of download: StoredDownload,
        entry: TransferScheduler.Entry,
        transfer: TrackedTransfer,
        partial: String,
        point: ResumePoint?,
        connections: Int
    ) -> (QueueRun, RunGate.Lane?, (any RunAdmission)?) {
        let id = download.id!
        // Every other URL is a mirror the segments come from too (unless the file failed its
        // checksum with mirror bytes before).
        let distrusted = self.state.withLock { $0.mirrorsDistrusted.contains(id) }
        let mirrors = distrusted ? [] : download.urls.filter { $0 != download.url }
        // A fleet's daemon keeps one loop: it has no gate whose lanes keep each loop's
        // connections to a host (``RunGate/Lane``).
        let (engine, lane) = self.store.isShared ? (self.core.engine, nil) : self.core.engine(for: download.url, host: entry.host, knownBytes: download.totalBytes)
        // With the core's look-ahead, its run takes its slot at the core's gate (at once, or
        // when one frees): listed as waiting until it has it.
        let admission = self.core.admission(for: entry.id, lane: lane) { self.post([.admitted(id)]) }
        let run = self.transferRun(of: download, on: engine, transfer: transfer, partial: partial, point: point, connections: connections, mirrors: mirrors, admission: admission)
        return (.file(run), lane, admission)
    }

    /// The run of `download`'s file on `engine`: for a run of its own, or a host run's member
    /// (no mirrors, no point, no admission).
    private func transferRun(
        of download: StoredDownload,
        on engine: TransferEngine,
        transfer: TrackedTransfer,
        partial: String,
        point: ResumePoint?,
        connections: Int,
        mirrors: [URL],
        admission: (any RunAdmission)?
    ) -> TransferRun {
        TransferRun(
            engine: engine,
            request: TransferRequest(url: download.url, method: "GET", headers: Self.headers(download.requestHeaders)),
            destination: .file(path: partial, resume: point),
            resourceTimeout: nil,
            bandwidthLimiters: [self.core.globalLimiter, transfer.speedLimiter],
            maximumConnections: connections,
            mirrors: mirrors,
            mirrorPolicy: download.checksum != nil ? .verifiedByChecksum : .sameValidators,
            // A fresh download's file has no name until a checkpoint needs one or the run
            // stops with bytes to keep; a small one is linked straight into place when done
            // (no directory lock to create it, no rename, its body written on the loop).
            opensUnnamedFile: true,
            admission: admission,
            observer: transfer
        )
    }

    /// The host run that carries `download`, just claimed, when it is plain: hauld's own store,
    /// one URL, no checksum, no speed limit of its own, nothing on disk to continue from, a small
    /// body (as far as its host's bodies tell), and the core starting downloads ahead of a free
    /// slot. `nil`: it runs on its own (``fileRun(of:entry:transfer:partial:point:connections:)``).
    private func hostRun(for download: StoredDownload, entry: TransferScheduler.Entry, point: ResumePoint?) -> HostRun? {
        guard self.configuration.usesHostRuns, self.soleWriter != nil, !self.store.isShared, point == nil,
            download.checksum == nil, download.speedLimit == 0, download.urls.count == 1, !download.isList,
            self.core.startsAhead, !self.core.isLarge(host: entry.host, knownBytes: download.totalBytes)
        else { return nil }
        if let run = self.state.withLock({ $0.hostRuns[entry.host] }) { return run }
        // On the first engine's loop, as every small body is (``LoopSpread``). Spread over both
        // loops of the 2-core project machine as a list's files are, a host run was no faster
        // (1,000 × 16 KiB: 222.4 against 219.3 ms with none, 202.2 on one loop) and took more
        // CPU (312 against 278 µs a file): the queue's thread and nginx need the second core.
        let made = HostRun(
            host: entry.host,
            engine: self.core.engine,
            gate: self.core.gate,
            admitted: { [weak self] ids in self?.core.noteAdmitted(ids.map { TransferID(.queue, $0) }) },
            report: { [weak self] reports in
                var events: [WorkEvent] = []
                events.reserveCapacity(reports.count)
                for report in reports {
                    switch report {
                    case .admitted(let ids): events += ids.map { .admitted($0) }
                    case .ended(let id, let outcome): events.append(.ended(id, outcome))
                    }
                }
                self?.post(events)
            }
        )
        return self.state.withLock { state in
            if let run = state.hostRuns[entry.host] { return run }
            // A daemon fed URLs of many hosts (aria2's RPC) keeps the runs of those it uses, not
            // of every host it ever saw: past the bound, the idle ones go (a member made for one
            // and not handed over yet still holds it: it runs there, beside the host's next run).
            if state.hostRuns.count >= Self.hostRunsKept {
                state.hostRuns = state.hostRuns.filter { !$0.value.isIdle }
            }
            state.hostRuns[entry.host] = made
            return made
        }
    }

    /// Host runs kept at most before the idle ones are dropped (``hostRun(for:entry:point:)``).
    static let hostRunsKept = 256

    /// The member of `hostRun` that runs `download`, just claimed: its run on the host run's
    /// loop, with no admission of its own (the host run takes its slot).
    private func member(of hostRun: HostRun, download: StoredDownload, entry: TransferScheduler.Entry, transfer: TrackedTransfer, partial: String, connections: Int) -> HostRun.Member {
        let run = self.transferRun(of: download, on: hostRun.engine, transfer: transfer, partial: partial, point: nil, connections: connections, mirrors: [], admission: nil)
        return HostRun.Member(id: download.id!, run: run, entry: entry)
    }

    /// A fleet's claim was refused (the download and its alternatives were taken or finished by
    /// other daemons): what they changed is applied now (``applyStoreChanges()``), before the
    /// slot this frees is given to the next download, so that the next claim is not made from
    /// the same stale view. Otherwise the changes waited for their turn on `work` behind the
    /// drain, which went on claiming: with 100,000 queued, a daemon that fell behind the others
    /// asked for 1,400 finished downloads one after another for 6 s and started none.
    private func catchUpAfterRefusal() {
        guard self.store.isShared else { return }
        self.applyStoreChanges()
    }

    /// The download's extra request headers (`Name: value` lines).
    static func headers(_ lines: [String]) -> HTTPHeaderFields {
        var headers = HTTPHeaderFields()
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers.add(name: String(line[..<colon]), value: line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
        return headers
    }

    // MARK: - Outcomes (on `work`)

    /// A run ended: verify and place, retry, fall back to a mirror, or record the error; then
    /// give the slot back to the core (and the download too, when it waits again).
    func transferEnded(_ id: Int64, outcome: TransferOutcome) {
        dispatchPrecondition(condition: .onQueue(self.work))
        guard let running = self.state.withLock({ $0.running[id] }) else { return }
        if let lane = running.lane { self.core.runEnded(host: running.host, lane: lane) }
        let transfer = running.transfer
        let lease = running.lease
        if case .fenced = running.intent {
            // Not ours any more (or soon not): nothing is written; the store says what it is.
            self.state.withLock { _ = $0.running.removeValue(forKey: id) }
            self.ended(id)
            return
        }
        // Every way on decides on the row as this queue has it (`running.stored`: a claim held in
        // memory is in it) and saves the claim with its own write.
        switch outcome {
        case .completed(_, let total) where running.stored.isList:
            if let intent = running.intent, case .remove = intent {
                // Removed as its last file ended: removed, its placed files kept.
                self.stopped(id, intent: intent, transfer: transfer, lease: lease, partialPath: nil, point: nil)
            } else {
                // Every file is placed and saved already: the list is done.
                self.listFinished(id, lease: lease, total: total, last: running.stored)
                return
            }
        case .completed(let response, let total) where (200..<300).contains(response.statusCode):
            self.core.noteBody(host: running.host, bytes: total)
            let url = response.url
            let disposition = response.headers["Content-Disposition"]
            guard running.stored.checksum == nil else {
                // The checksum is read from the file by its name; reading the whole file is
                // done off the serial queue, the slot stays taken.
                guard running.run.file?.nameFile() == true else {
                    let verdict = Verdict(message: "cannot name the partial file \(running.stored.partialPath ?? "") to verify its checksum")
                    self.finish(id, transfer: transfer, lease: lease, total: total, url: url, disposition: disposition, verdict: verdict)
                    return
                }
                // The row as this queue has it: what a drain's batch wrote is not committed yet.
                let row = running.stored
                DispatchQueue.global().async {
                    let verdict = Self.verify(row, total: total)
                    self.work.async { self.finish(id, transfer: transfer, lease: lease, total: total, url: url, disposition: disposition, verdict: verdict) }
                }
                return
            }
            // Without one, verifying is a look at the file's size: right here, without two
            // thread hops per file, on the row as last saved (every write of it keeps the
            // running copy; in a fleet, so do other daemons' changes).
            let row = running.stored
            let unnamed = running.run.file?.takeUnnamedFile()
            let verdict = Self.verify(row, total: total, unnamed: unnamed)
            self.finish(id, transfer: transfer, lease: lease, total: total, url: url, disposition: disposition, verdict: verdict, unnamed: unnamed)
            return
        case .completed(let response, _):
            let error = URLError(.badServerResponse, userInfo: [NSLocalizedDescriptionKey: "the server answered \(response.statusCode)"])
            self.failed(id, row: running.stored, transfer: transfer, lease: lease, failure: TransferFailure(error, serverStatus: response.statusCode), retryAfter: response.headers["Retry-After"], point: nil)
        case .failed(let failure, let response, let point):
            // A list's run that placed files made progress: its attempts count again from one.
            let progressed = if case .list(let list) = running.run { list.madeProgress } else { false }
            self.failed(id, row: running.stored, transfer: transfer, lease: lease, failure: failure, retryAfter: response?.headers["Retry-After"], point: point, afterProgress: progressed)
        case .stopped(_, _, let point):
            self.stopped(id, intent: running.intent ?? .pause, transfer: transfer, lease: lease, partialPath: running.stored.partialPath, point: point)
        }
        self.ended(id)
    }

    /// The slot of `id` is free; a download waiting again goes back to the scheduler. `row`:
    /// the download as just saved through this queue (so in the index already), when the
    /// caller has it; otherwise it is read.
    private func ended(_ id: Int64, row: StoredDownload? = nil) {
        self.freeSlot(id)
        let download: StoredDownload
        if let row {
            download = row
        } else {
            let read = try? self.store.download(id: id)
            self.state.withLock { state in
                // A claim still held when the run is over was not saved (its write failed): the
                // store's row is what the download is.
                state.heldClaims[id] = nil
                if let read { state.saved(read) }
            }
            guard let read else { return }
            download = read
        }
        if download.state == .waiting, download.runner == nil { self.makeReady(Self.entry(for: download)) }
    }

    /// A segmented download's map names bytes anywhere in the file: they go to the disk before
    /// the map is recorded.
    private func syncIfMapped(_ partialPath: String?, _ point: ResumePoint?) {
        guard point?.mapped == true, let partialPath else { return }
        PartialFile.syncData(atPath: partialPath)
    }

    private func stopped(_ id: Int64, intent: StopIntent, transfer: TrackedTransfer, lease: QueueLease, partialPath: String?, point: ResumePoint?) {
        self.state.withLock { _ = $0.running.removeValue(forKey: id) }
        do {
            switch intent {
            case .remove(let deleteRow):
                try self.discard(id, partialPath: partialPath, deleteRow: deleteRow)
                _ = try? self.updateDownload(id: id, lease: lease, release: true) { _ in }
            case .pause, .requeue, .shutdown:
                self.syncIfMapped(partialPath, point)
                let url = transfer.currentURL
                // A daemon of a fleet that stops hands its downloads to the others at once.
                let handOver = self.store.isShared
                // A list's bytes are those of its files on disk (the next run fetches the rest).
                let listBytes = transfer.bytesDone
                let updated = try self.updateDownload(id: id, lease: lease, release: true) { download in
                    download.record(point, currentURL: url)
                    if download.isList { download.bytesDone = listBytes }
                    switch intent {
                    case .requeue where download.state == .active: download.state = .waiting
                    case .shutdown where handOver && download.state == .active: download.state = .waiting
                    default: break
                    }
                }
                if let updated { self.publish(.changed(updated.info)) }
            case .fenced:
                break
            }
        } catch {
            self.logger.error("cannot record the stop of download \(id): \(error)")
        }
    }

    /// Run `id` failed: retried later, from the next mirror, or recorded as an error, decided
    /// on `row`, the download as this queue has it.
    private func failed(
        _ id: Int64,
        row download: StoredDownload,
        transfer: TrackedTransfer,
        lease: QueueLease,
        failure: TransferFailure,
        retryAfter: String?,
        point: ResumePoint?,
        afterProgress: Bool = false
    ) {
        self.state.withLock { _ = $0.running.removeValue(forKey: id) }
        let message = failure.error.localizedDescription
        do {
            let decision = TransferOutcomePolicy(retryPolicy: self.configuration.retryPolicy).decide(
                TransferOutcomePolicy.Failure(
                    attempt: afterProgress ? 1 : download.failedAttempts + 1,
                    kind: failure.kind,
                    retryAfter: retryAfter.flatMap { RetryPolicy.retryAfterSeconds($0) },
                    hasResumePoint: point != nil,
                    mirrorsLeft: download.urls.count - 1 - download.urlIndex
                ),
                randomUnit: Double.random(in: 0..<1)
            )
            let url = transfer.currentURL
            // A list's bytes are those of its files on disk (the next run fetches the rest).
            let listBytes = transfer.bytesDone
            self.syncIfMapped(download.partialPath, point)
            let updated = try self.updateDownload(id: id, lease: lease, release: true) { download in
                download.record(point, currentURL: url)
                if download.isList { download.bytesDone = listBytes }
                guard download.state == .active else { return }  // paused or cancelled meanwhile
                switch decision {
                case .retry(let delay, _):
                    download.failedAttempts = afterProgress ? 1 : download.failedAttempts + 1
                    download.state = .waiting
                    download.notBefore = Date().addingTimeInterval(delay)
                    download.errorMessage = "\(message); retrying"
                case .nextMirror:
                    // Next mirror, keeping the bytes: If-Range decides whether they fit.
                    download.urlIndex += 1
                    download.failedAttempts = 0
                    download.state = .waiting
                    download.errorMessage = "\(message); trying mirror \(download.urlIndex)"
                case .fail(let keepBytes):
                    download.state = .error
                    download.errorMessage = message
                    download.errorCode = Aria2ErrorCode.code(
                        urlErrorCode: failure.error.code.rawValue, serverStatus: failure.serverStatus, message: message
                    )
                    download.finishedAt = Date()
                    // An error page (404, 500 …) is not part of the file: nothing resumable to keep.
                    if !keepBytes, failure.serverStatus != nil, let partial = download.partialPath {
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
    /// Why a finished file is not the download's (`nil`: it is).
    struct Verdict {
        var message: String
        /// The bytes are all there but do not hash to the given checksum.
        var isChecksumMismatch = false
    }

    /// Whether the finished partial file of `download` (as read from the store; the file at
    /// `path` when given) is the server's entity of `total` bytes, and matches its checksum if
    /// it has one.
    private static func verify(_ download: StoredDownload?, total: Int64, unnamed: PartialFile? = nil, at path: String? = nil) -> Verdict? {
        guard let download, let partial = path ?? download.partialPath else {
            return Verdict(message: "the download's record is gone")
        }
        // A file linked in from nothing (unnamed) is measured by its descriptor, else by its name.
        let size = if let unnamed { unnamed.size } else { PartialFile.size(at: partial) }
        guard let size else { return Verdict(message: "the partial file \(partial) is gone") }
        guard size == total else { return Verdict(message: "the file has \(size) bytes but the server's entity has \(total)") }
        guard let checksum = download.checksum else { return nil }
        do {
            let spec = try ChecksumSpec(parsing: checksum)
            let actual = try FileChecksum.hexDigest(ofFileAt: partial, algorithm: spec.algorithm)
            guard actual == spec.hexDigest else {
                return Verdict(message: "checksum mismatch: expected \(spec.algorithm.rawValue)=\(spec.hexDigest), got \(actual)", isChecksumMismatch: true)
            }
            return nil
        } catch {
            return Verdict(message: "cannot verify the checksum: \(error)")
        }
    }

    /// Places a finished file at `promised` when given and still free (`exact` refuses to
    /// replace), else where `choosing` places it (the name or the first free `name (n)`). A
    /// list's files are placed through it too (``ListRun``).
    static func place(at promised: String?, _ exact: (String) throws -> Void, choosing: () throws -> String) throws -> String {
        if let promised {
            do {
                try exact(promised)
                return promised
            } catch let failure as NoOverwriteMove.Failure where failure.isExists {
                // Taken since the promise (by another program): placed as without one.
            }
        }
        return try choosing()
    }

    /// Before `ends` are recorded (their files placed, their rows saved complete in one
    /// batch): each that will place a finished file promises where, in one commit before any is
    /// placed (``SoleWriterQueueStore/promisePlacements(_:)``: the path and length, nothing else
    /// of the row). A `kill -9` between a file's placement and the commit of its end leaves the
    /// promise, and the next start finds the file there (``settlePromisedPlacement(_:)``)
    /// instead of fetching it again under a second name (20,000 small files, 12-15 kills a run:
    /// 3 runs of 7 left 2-4 second copies before; none in 10 runs since). A fleet's daemon, and
    /// a download checked against a checksum (verified later, off this queue), promise each
    /// file alone as it is placed (``promiseBeforePlacing(_:lease:directory:name:total:last:)``).
    func recordPlacements(_ ends: [WorkEvent]) {
        guard let soleWriter = self.soleWriter else { return }
        var candidates: [(id: Int64, directory: String, name: String, total: Int64)] = []
        self.state.withLock { state in
            for case .ended(let id, .completed(let response, let total)) in ends where (200..<300).contains(response.statusCode) {
                guard let running = state.running[id], running.intent == nil else { continue }
                let row = running.stored
                guard row.checksum == nil, row.finalPath == nil, !row.isList else { continue }
                candidates.append((id, row.directory, row.placedName(contentDisposition: response.headers["Content-Disposition"], url: response.url), total))
            }
        }
        guard !candidates.isEmpty else { return }
        // Two downloads of the batch with one name are promised two paths.
        var reserved: Set<String> = []
        var promises: [PlacementPromise] = []
        for candidate in candidates {
            guard let path = NoOverwriteMove.freePath(directory: candidate.directory, name: candidate.name, reserved: reserved) else { continue }
            reserved.insert(path)
            promises.append(PlacementPromise(id: candidate.id, path: path, totalBytes: candidate.total))
        }
        do {
            try soleWriter.promisePlacements(promises)
        } catch {
            // The files are placed as they were before promises: a kill -9 in the next moments
            // can leave a second copy.
            self.logger.warning("cannot save where \(promises.count) finished files go before placing them: \(error)")
            return
        }
        self.noteSaved(promises)
    }

    /// `promises` are saved: the queue's copies say where, for the placement (`finish`); a
    /// claim held in memory knows the row as stored now (its write saves the columns that
    /// differ from it: a failure's clears the promise). The rest of each row is saved with its
    /// end.
    private func noteSaved(_ promises: [PlacementPromise]) {
        self.state.withLock { state in
            for promise in promises {
                let running = state.running.index(forKey: promise.id)
                guard let held = state.heldClaims[promise.id] else {
                    if let running { state.running.values[running].stored.promise(promise) }
                    continue
                }
                // The running copy is the claim while it is held: one copy of the row's columns
                // for both (a copy was ~1.5 K instructions; three were made a file).
                let runsTheClaim = running.map { state.running.values[$0].stored.sharesColumns(with: held.claimed) } ?? false
                var claimed = held.claimed
                var stored = held.stored
                claimed.promise(promise)
                stored.promise(promise)
                if let running {
                    if runsTheClaim { state.running.values[running].stored = claimed } else { state.running.values[running].stored.promise(promise) }
                }
                state.heldClaims[promise.id] = HeldClaim(claimed: claimed, stored: stored)
            }
        }
    }

    /// Promises where the finished file of download `id` goes, in one write under its lease,
    /// before the file is placed: for a download not promised in its batch of ends
    /// (``recordPlacements(_:)``). A fleet's store: the write that confirms the lease, which
    /// placing needed anyway (one round trip). The daemon's own store: a download checked against
    /// its checksum off this queue, placed alone, outside any batch (its file is large as a
    /// rule; the commit is not felt). A kill between the placement and the save of the end
    /// leaves the promise: whoever claims the download next, or the next start, finds the file
    /// there instead of fetching it again under a second name
    /// (``settleClaimedPromise(_:placedBy:lease:promise:)``, ``settlePromisedPlacement(_:)``).
    /// Throws ``QueueLeaseLost`` as the confirmation did; `nil` (confirmed, not promised) when no
    /// free name is found, inside a batch of the daemon's own store (its commit would come
    /// after the placement), or when its own store cannot save it (placed as without one).
    /// `last`: the row as last saved; the answer's `row`, the row as the promise saved it.
    private func promiseBeforePlacing(_ id: Int64, lease: QueueLease, directory: String, name: String, total: Int64, last: StoredDownload) throws -> (path: String, row: StoredDownload?)? {
        guard self.soleWriter == nil || self.state.withLock({ $0.effects == nil }),
            let path = NoOverwriteMove.freePath(directory: directory, name: name)
        else {
            try self.store.confirmLease(id: id, lease: lease)
            return nil
        }
        do {
            let saved = try self.updateDownload(id: id, lease: lease, last: last) { download in
                download.finalPath = path
                download.totalBytes = total
            }
            return (path, saved)
        } catch where self.soleWriter != nil {
            self.logger.warning("cannot save where download \(id)'s file goes before placing it: \(error)")
            return nil
        }
    }

    /// Download `id`, just claimed, had a promise of its file's place from its last run (a
    /// daemon of the fleet stopped between placing the file and saving the end; the claim
    /// dropped the promise from the row): complete when a file with the entity's length (and
    /// checksum, when it has one) is there, recorded under the new lease, which goes with it;
    /// `nil` when it is not there (it runs). A file checked against a checksum is read on this
    /// queue, as at start (``settlePromisedPlacement(_:)``).
    func settleClaimedPromise(_ download: StoredDownload, placedBy previous: String?, lease: QueueLease, promise: (path: String, total: Int64)) -> StoredDownload? {
        guard let id = download.id, Self.verify(download, total: promise.total, at: promise.path) == nil else { return nil }
        do {
            let settled = try self.updateDownload(id: id, lease: lease, release: true) { row in
                row.complete(at: promise.path, total: promise.total)
            }
            self.logger.info("download \(id) complete: \(promise.path) (placed by \(previous ?? "another daemon") before it stopped, recorded now)")
            return settled
        } catch {
            self.logger.error("cannot record download \(id) complete at \(promise.path), found placed: \(error)")
            return nil
        }
    }

    /// Download `row`, waiting again after hauld stopped, had promised its file's place
    /// (``recordPlacements(_:)``): complete when a file with the entity's length (and checksum,
    /// when it has one) is there (it was placed and its end not saved), else the promise is
    /// dropped and it is fetched again.
    func settlePromisedPlacement(_ row: StoredDownload) throws -> StoredDownload {
        guard let id = row.id, let path = row.finalPath, row.state == .waiting else { return row }
        // The file there is the download's when it is what the placement verified: the entity's
        // length, and its checksum when it has one.
        let placed = row.totalBytes.map { Self.verify(row, total: $0, at: path) == nil } ?? false
        let settled = try self.store.updateDownload(id: id) { download in
            guard download.state == .waiting, download.finalPath == path else { return }
            guard placed, let total = download.totalBytes else {
                download.finalPath = nil
                return
            }
            download.complete(at: path, total: total)
        }
        if placed { self.logger.info("download \(id) complete: \(path) (placed before hauld stopped, recorded now)") }
        return settled ?? row
    }

    /// List download `id` fetched and placed all of its files (``ListRun``): recorded complete,
    /// its path its directory.
    private func listFinished(_ id: Int64, lease: QueueLease, total: Int64, last: StoredDownload) {
        self.state.withLock { _ = $0.running.removeValue(forKey: id) }
        var completed: StoredDownload?
        defer { self.ended(id, row: completed) }
        do {
            let updated = try self.updateDownload(id: id, lease: lease, release: true, last: last) { download in
                download.complete(at: download.directory, total: total)
                download.fileName = nil
            }
            completed = updated
            self.logger.info("download \(id) complete: \(last.fileCount ?? 0) files in \(last.directory) (\(total) bytes)")
            if let updated { self.publish(.changed(updated.info)) }
        } catch {
            self.logger.error("cannot record the end of list download \(id): \(error)")
        }
    }

    /// Records how download `id` ended after its body was verified, on the row as this queue
    /// has it (its running copy; read from the store only when it no longer runs).
    private func finish(
        _ id: Int64,
        transfer: TrackedTransfer,
        lease: QueueLease,
        total: Int64,
        url: URL,
        disposition: String?,
        verdict: Verdict?,
        unnamed: PartialFile? = nil
    ) {
        let running = self.state.withLock { $0.running.removeValue(forKey: id) }
        var completed: StoredDownload?
        defer {
            // The unnamed file is linked into place by now, or its bytes are not wanted.
            unnamed?.close()
            self.ended(id, row: completed)
        }
        do {
            if case .fenced = running?.intent { return }
            guard let download = try running?.stored ?? self.store.download(id: id), let partial = download.partialPath else { return }
            if case .remove = running?.intent {
                unlink(partial)
                self.stopped(id, intent: running!.intent!, transfer: transfer, lease: lease, partialPath: partial, point: nil)
                return
            }
            if let verdict, verdict.isChecksumMismatch, download.urls.count > 1,
                self.state.withLock({ $0.mirrorsDistrusted.insert(id).inserted })
            {
                // Which mirror's bytes were wrong cannot be told afterwards: fetch the whole
                // file again from one URL.
                unlink(partial)
                let message = "\(verdict.message); the file had bytes from mirrors, fetching it again from \(download.url.absoluteString) alone"
                let updated = try self.updateDownload(id: id, lease: lease, release: true) { download in
                    download.state = .waiting
                    download.finalPath = nil
                    download.errorMessage = message
                    download.bytesDone = 0
                    download.segments = nil
                    download.entityTag = nil
                    download.lastModified = nil
                }
                self.logger.warning("download \(id): \(message)")
                if let updated { self.publish(.changed(updated.info)) }
                return
            }
            if let verdict = verdict?.message {
                // A bad file is never presented as finished; resuming starts over.
                let updated = try self.updateDownload(id: id, lease: lease, release: true) { download in
                    download.state = .error
                    download.finalPath = nil
                    download.errorMessage = verdict
                    download.errorCode = Aria2ErrorCode.code(urlErrorCode: nil, serverStatus: nil, message: verdict)
                    download.bytesDone = 0
                    download.entityTag = nil
                    download.lastModified = nil
                    download.finishedAt = Date()
                }
                self.logger.warning("download \(id): \(verdict)")
                if let updated { self.publish(.changed(updated.info)) }
                return
            }
            // Named only when not promised a path (or that path is taken since).
            let name = { download.placedName(contentDisposition: disposition, url: url) }
            // The file is placed only while the download is still this daemon's, where the
            // placement was promised (``recordPlacements(_:)``), while that is free.
            let promised: String?
            // The row as last saved, for the writes below (a shared store writes over it
            // without reading it again).
            var last = download
            if download.state == .active, download.finalPath == nil, self.soleWriter == nil || download.checksum != nil {
                let promise = try self.promiseBeforePlacing(id, lease: lease, directory: download.directory, name: name(), total: total, last: download)
                promised = promise?.path
                if let row = promise?.row { last = row }
            } else {
                try self.store.confirmLease(id: id, lease: lease)
                promised = download.state == .active ? download.finalPath : nil
            }
            let finalPath: String
            do {
                if let unnamed {
                    do {
                        finalPath = try Self.place(at: promised, { try unnamed.link(to: $0) }) {
                            try NoOverwriteMove.linkChoosingFreeName(unnamed, directory: download.directory, name: name())
                        }
                    } catch {
                        // The bytes stay on disk under the partial name, as a named file's would.
                        _ = try? unnamed.link(to: partial)
                        throw error
                    }
                } else {
                    finalPath = try Self.place(at: promised, { try NoOverwriteMove.move(partial, to: $0) }) {
                        try NoOverwriteMove.moveChoosingFreeName(partial, directory: download.directory, name: name())
                    }
                }
            } catch {
                let message = "cannot move the finished file into \(download.directory): \(error)"
                let updated = try self.updateDownload(id: id, lease: lease, release: true, last: last) { download in
                    download.state = .error
                    download.finalPath = nil
                    download.errorMessage = message
                    download.errorCode = Aria2ErrorCode.fileIO
                    download.bytesDone = total
                }
                if let updated { self.publish(.changed(updated.info)) }
                return
            }
            let updated = try self.updateDownload(id: id, lease: lease, release: true, last: last) { download in
                download.complete(at: finalPath, total: total)
                download.currentURL = url
            }
            completed = updated
            self.logger.info("download \(id) complete: \(finalPath) (\(total) bytes)")
            if let updated { self.publish(.changed(updated.info)) }
        } catch {
            self.logger.error("cannot record the end of download \(id): \(error)")
        }
    }
}

extension StoredDownload {
    /// The name its finished file is placed under: the one asked for, else the server's
    /// (`Content-Disposition`) or the URL's.
    func placedName(contentDisposition: String?, url: URL) -> String {
        self.requestedName ?? FileNaming.suggestedFilename(contentDisposition: contentDisposition, url: url)
    }

    /// What the row says once its place is promised (``SoleWriterQueueStore/promisePlacements(_:)``).
    mutating func promise(_ promise: PlacementPromise) {
        self.finalPath = promise.path
        self.totalBytes = promise.totalBytes
    }

    /// What the row says once its file, `total` bytes, is placed at `path`.
    mutating func complete(at path: String, total: Int64) {
        self.state = .complete
        self.bytesDone = total
        self.segments = nil
        self.totalBytes = total
        self.finalPath = path
        // The name after the last slash (splitting the whole path cost more than the rest).
        self.fileName = path.utf8.lastIndex(of: UInt8(ascii: "/")).map { String(path[path.utf8.index(after: $0)...]) } ?? path
        self.partialPath = nil
        self.errorMessage = nil
        self.errorCode = nil
        self.finishedAt = Date()
    }
}
