import Dispatch
import Foundation
import Haul
import HaulCore
import HaulEngine

/// Runs the downloads of one `haul get`: a ``TransferSession`` whose delegate it is, the retry
/// loop of each download, the checkpoint files, Ctrl-C, and the progress output.
final class GetCoordinator: TransferSessionDownloadDelegate, @unchecked Sendable {
    // @unchecked Sendable: mutable state is guarded by `lock`; delegate methods run on the
    // session's serial delegate queue.

    struct Options: Sendable {
        var outputPath: String?
        var directory: String
        var continueExisting: Bool
        var fresh: Bool
        var headers: [(String, String)]
        var retryPolicy: RetryPolicy
        var idleTimeout: Double
        var parallelism: Int
        /// `-x`: connections per download (segmented when above 1).
        var connectionsPerDownload: Int = 1
        /// `--mirror`: other URLs of the (single) file.
        var mirrors: [URL] = []
        /// `--checksum`: what the (single) file must hash to.
        var checksum: ChecksumSpec? = nil
        var output: ProgressReporter.Mode
        /// `--cacert`: roots trusted besides the system's.
        var trustedCertificates: TransferTrustedCertificates? = nil
        /// `--pinnedpubkey`: SHA-256 digests (hex) of the public keys a server may present.
        var pinnedKeys: Set<String> = []
        /// `-k`: any certificate is accepted (pins still apply).
        var insecure = false
    }

    /// Why a server's certificate was refused, by "host:port", for the error message.
    private var trustRefusals: [String: String] = [:]

    /// What one task attempt ended with.
    enum AttemptResult: Sendable {
        case saved(path: String, bytes: Int64)
        case httpStatus(Int, retryAfter: Double?)
        case moveFailed(String)
        /// The file does not hash to `--checksum` (it was not kept).
        case checksumMismatch(String)
        /// `serverStatus`: the server's unsuccessful answer, when that is the failure.
        case failed(URLError, serverStatus: Int?)
    }

    private struct Pending {
        var continuation: CheckedContinuation<AttemptResult, Never>
        var job: DownloadJob
        var finished: AttemptResult?
        /// When the crash checkpoint is due (``CheckpointCadence``, as hauld's).
        var cadence = CheckpointCadence(
            bytes: GetCoordinator.crashCheckpointBytes,
            interval: GetCoordinator.crashCheckpointInterval,
            now: GetCoordinator.monotonicNow()
        )
        /// Whether this attempt wrote its crash checkpoint already.
        var checkpointed = false
        /// Mirrors whose drop was already told.
        var toldDropped: Set<URL> = []
    }

    private static let clockOrigin = ContinuousClock.now
    static func monotonicNow() -> Double {
        let elapsed = ContinuousClock.now - Self.clockOrigin
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
    }

    /// A crash (kill -9, power cut of the process) loses at most this many bytes or this much
    /// time of a download: then its checkpoint is written, naming the partial file and the
    /// entity's validators. Smaller, quicker downloads write none (they are cheaper to redo
    /// than to checkpoint).
    static let crashCheckpointBytes: Int64 = 1 << 20
    static let crashCheckpointInterval: Double = 1
    /// A segmented download's map is recorded every second or this many bytes (each time after
    /// syncing the file): what a crash makes it fetch again.
    static let segmentedCheckpointBytes: Int64 = 64 << 20

    let options: Options
    private let lock = NSLock()
    private var pending: [Int: Pending] = [:]
    private var runningTasks: [Int: TransferSessionDownloadTask] = [:]
    private var isInterrupted = false
    private var session: TransferSession!
    let reporter: ProgressReporter

    init(options: Options) {
        self.options = options
        self.reporter = ProgressReporter(mode: options.output)
    }

    /// Downloads every URL, `parallelism` at a time, and returns the exit status.
    func run(urls: [URL]) async -> ExitStatus {
        let configuration = TransferSessionConfiguration.default
        // Like curl and wget: http_proxy, https_proxy and no_proxy apply; no cookies are kept.
        configuration.usesEnvironmentProxies = true
        configuration.httpCookieStorage = TransferCookieStorage()
        // Without -k or --pinnedpubkey, default verification decides: no probe handshake.
        configuration.asksDelegateAboutServerTrust = self.options.insecure || !self.options.pinnedKeys.isEmpty
        configuration.tlsAdditionalTrustedCertificates = self.options.trustedCertificates
        configuration.urlCache = nil
        configuration.timeoutIntervalForRequest = self.options.idleTimeout
        configuration.httpMaximumConnectionsPerHost = max(6, self.options.parallelism, self.options.connectionsPerDownload)
        configuration.haulMaximumConnectionsPerDownload = self.options.connectionsPerDownload
        self.session = TransferSession(configuration: configuration, delegate: self, delegateQueue: nil)
        let signalSource = self.installInterruptHandler()
        self.reporter.start(totalFiles: urls.count)
        defer {
            signalSource.cancel()
            self.reporter.stop()
            self.session.finishTasksAndInvalidate()
        }

        var statuses: [ExitStatus] = []
        await withTaskGroup(of: ExitStatus.self) { group in
            var iterator = urls.makeIterator()
            var running = 0
            func addNext() -> Bool {
                guard let url = iterator.next() else { return false }
                group.addTask { await self.download(url) }
                return true
            }
            while running < self.options.parallelism, addNext() { running += 1 }
            while let status = await group.next() {
                statuses.append(status)
                if self.interrupted { continue }
                _ = addNext()
            }
        }
        if self.interrupted { return .interrupted }
        return statuses.first { $0 != .success } ?? .success
    }

    private var interrupted: Bool { self.lock.withLock { self.isInterrupted } }

    // MARK: - One download with retries

    /// Base names already used by a job of this run: two URLs ending in the same name must not
    /// share a partial file.
    private var claimedNames: Set<String> = []

    private func claimBaseName(for url: URL) -> String {
        let wanted = FileNaming.suggestedFilename(contentDisposition: nil, url: url)
        return self.lock.withLock {
            let name = FileNaming.firstAvailableName(for: wanted) { self.claimedNames.contains($0) }
            self.claimedNames.insert(name)
            return name
        }
    }

    private func download(_ url: URL) async -> ExitStatus {
        let job = DownloadJob(url: url, options: self.options, baseName: self.claimBaseName(for: url))
        if self.options.fresh { job.discardCheckpoint() }
        var resumeData = job.loadCheckpoint(reporter: self.reporter)
        if resumeData == nil, let existing = job.existingFinalFile {
            if self.options.continueExisting {
                self.reporter.note("\(existing) already exists; nothing to do")
                return .success
            }
            if self.options.outputPath != nil {
                self.reporter.error("\(existing) already exists; remove it or choose another name with -o")
                return .fileError
            }
        }
        guard access(job.directory, W_OK) == 0 else {
            self.reporter.error("cannot write into \(job.directory): \(String(cString: strerror(errno)))")
            return .fileError
        }
        self.reporter.jobStarted(job.displayName)
        var attempt = 1
        // After a checksum mismatch with mirrors, the file is fetched again from the URL alone:
        // which mirror's bytes were wrong cannot be told afterwards.
        var mirrors = self.options.mirrors
        while true {
            if self.interrupted { return .interrupted }
            var request = URLRequest(url: url)
            for (name, value) in self.options.headers { request.setValue(value, forHTTPHeaderField: name) }
            let task: TransferSessionDownloadTask
            if let data = resumeData {
                task = self.session.downloadTask(withResumeData: data)
            } else {
                task = self.session.downloadTask(with: request, partialFileURL: URL(fileURLWithPath: job.partialPath))
            }
            task.haulMirrors = mirrors
            task.haulMirrorsVerifiedByChecksum = self.options.checksum != nil
            let result = await self.perform(task, job: job)
            switch result {
            case .saved(let path, let bytes):
                job.discardCheckpointFile()
                self.reporter.jobFinished(job.displayName, savedAs: path, bytes: bytes)
                return .success
            case .moveFailed(let message):
                self.reporter.error("\(job.displayName): \(message)")
                return .fileError
            case .checksumMismatch(let message):
                job.discardCheckpoint()
                resumeData = nil
                if !mirrors.isEmpty {
                    self.reporter.note("\(job.displayName): \(message); the file had bytes from mirrors, fetching it again from \(url.absoluteString) alone")
                    mirrors = []
                    continue
                }
                self.reporter.error("\(job.displayName): \(message); the file was not kept")
                return .serverError
            case .httpStatus(let status, let retryAfter):
                let message = "\(url.absoluteString): server answered \(status) \(HTTPURLResponse.localizedString(forStatusCode: status))"
                switch self.decide(attempt: attempt, failure: .serverStatus(status), retryAfter: retryAfter, hasResumePoint: resumeData != nil) {
                case .retry(let seconds, _):
                    self.reporter.note("\(message); retrying in \(ByteCountFormatting.duration(seconds: seconds))")
                    try? await Task.sleep(for: .seconds(seconds))
                    attempt += 1
                case .fail, .nextMirror:
                    self.reporter.error(message)
                    return .serverError
                }
            case .failed(let error, let status):
                if self.interrupted {
                    if let data = error.userInfo[TransferSessionDownloadTaskResumeData] as? Data {
                        job.saveCheckpoint(data)
                        self.reporter.note("\(job.displayName): interrupted; run the same command again to continue")
                    }
                    return .interrupted
                }
                if resumeData != nil, error.code == .cannotDecodeRawData || error.code == .fileDoesNotExist {
                    self.reporter.note("\(job.displayName): cannot continue the earlier download (\(error.localizedDescription)); starting over")
                    job.discardCheckpoint()
                    resumeData = nil
                    continue
                }
                resumeData = error.userInfo[TransferSessionDownloadTaskResumeData] as? Data
                if let resumeData { job.saveCheckpoint(resumeData) } else { job.discardCheckpoint() }
                if let refusal = self.trustRefusal(for: url) {
                    self.reporter.error("\(url.absoluteString): \(refusal)")
                    job.discardCheckpoint()
                    return .tlsError
                }
                let failure = TransferFailureKind(error, status: status)
                let message = "\(url.absoluteString): \(error.localizedDescription)"
                switch self.decide(attempt: attempt, failure: failure, retryAfter: nil, hasResumePoint: resumeData != nil) {
                case .retry(let seconds, _):
                    let kept = resumeData == nil ? "" : ", keeping the bytes on disk"
                    self.reporter.note("\(message); retrying in \(ByteCountFormatting.duration(seconds: seconds))\(kept)")
                    try? await Task.sleep(for: .seconds(seconds))
                    attempt += 1
                case .fail, .nextMirror:
                    self.reporter.error(message + (resumeData == nil ? "" : " (partial download kept; run again to continue)"))
                    return Self.exitStatus(for: error, status: status)
                }
            }
        }
    }

    /// The one outcome policy hauld uses too (no mirrors, no resource deadline here).
    private func decide(attempt: Int, failure: TransferFailureKind, retryAfter: Double?, hasResumePoint: Bool) -> TransferOutcomePolicy.Decision {
        TransferOutcomePolicy(retryPolicy: self.options.retryPolicy).decide(
            TransferOutcomePolicy.Failure(attempt: attempt, kind: failure, retryAfter: retryAfter, hasResumePoint: hasResumePoint),
            randomUnit: Double.random(in: 0..<1)
        )
    }

    static func exitStatus(for error: URLError, status: Int?) -> ExitStatus {
        if status != nil { return .serverError }
        switch error.code {
        case .serverCertificateUntrusted, .serverCertificateHasBadDate, .serverCertificateHasUnknownRoot,
            .serverCertificateNotYetValid, .secureConnectionFailed, .clientCertificateRejected, .clientCertificateRequired:
            return .tlsError
        case .userAuthenticationRequired, .userCancelledAuthentication:
            return .authenticationFailure
        case .cannotCreateFile, .cannotWriteToFile, .cannotOpenFile, .cannotMoveFile, .cannotRemoveFile, .fileDoesNotExist:
            return .fileError
        case .badServerResponse, .httpTooManyRedirects, .redirectToNonExistentLocation, .cannotParseResponse:
            return .serverError
        case .badURL, .unsupportedURL:
            return .usage
        default:
            return .networkError
        }
    }

    /// Resumes `task` and waits for its end.
    private func perform(_ task: TransferSessionDownloadTask, job: DownloadJob) async -> AttemptResult {
        await withCheckedContinuation { continuation in
            self.lock.withLock {
                self.pending[task.taskIdentifier] = Pending(continuation: continuation, job: job)
                self.runningTasks[task.taskIdentifier] = task
            }
            task.resume()
            // Ctrl-C may have come between the check in the loop and registering the task.
            if self.interrupted { task.cancel(byProducingResumeData: { _ in }) }
        }
    }

    /// Records the running download's resume data, so that a crash of `haul` loses at most
    /// what came before the checkpoint. The next run continues from the partial file's size
    /// (its bytes are a prefix of the entity: they are written in order), after `If-Range`
    /// confirms the entity.
    private func writeCrashCheckpoint(_ task: TransferSessionDownloadTask, job: DownloadJob, bytes: Int64, expected: Int64) {
        guard let response = task.response as? HTTPURLResponse, let url = response.url else { return }
        let point: ResumePoint
        if let mapped = task.currentResumePoint, mapped.mapped == true {
            // A segmented download: the map first, then the bytes it names to disk, then the
            // map to its file — a crash at any moment leaves a map that claims only synced bytes.
            PartialFile.syncData(atPath: job.partialPath)
            point = mapped
        } else {
            let headers = HTTPHeaderFields(response.allHeaderFields.compactMap { key, value in
                (key as? String).map { ($0, "\(value)") }
            })
            guard RangeResumeRules.notResumableReason(method: "GET", status: response.statusCode, headers: headers) == nil || response.statusCode == 206 else {
                return
            }
            let validators = EntityValidators(headers: headers)
            guard validators.ifRangeValue != nil else { return }
            point = ResumePoint(offset: bytes, validators: validators, entityLength: expected > 0 ? expected : nil)
        }
        let data = ResumeData(
            url: url,
            originalURL: job.url,
            requestHeaders: HTTPHeaderFields(self.options.headers.map { ($0.0, $0.1) }),
            partialFilePath: job.partialPath,
            resumePoint: point
        )
        job.saveCheckpoint(data.encoded())
    }

    // MARK: - Ctrl-C

    private func installInterruptHandler() -> any DispatchSourceSignal {
        signal(SIGINT, SIG_IGN)
        signal(SIGTERM, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        source.setEventHandler { [weak self] in self?.interrupt() }
        source.resume()
        let terminate = DispatchSource.makeSignalSource(signal: SIGTERM, queue: .global())
        terminate.setEventHandler { [weak self] in self?.interrupt() }
        terminate.resume()
        self.terminationSource = terminate
        return source
    }

    private var terminationSource: (any DispatchSourceSignal)?

    /// Stops every download, keeping resume data for the next run.
    func interrupt() {
        let tasks = self.lock.withLock { () -> [TransferSessionDownloadTask] in
            self.isInterrupted = true
            return Array(self.runningTasks.values)
        }
        for task in tasks { task.cancel(byProducingResumeData: { _ in }) }
    }

    // MARK: - Delegate

    // MARK: - Server trust (-k, --pinnedpubkey)

    /// Asked once per https host and port, only with -k or --pinnedpubkey: a pinned key must
    /// match the leaf's; then -k accepts the chain, otherwise default verification (system
    /// roots, --cacert, the host name) must pass as well — curl's rules.
    func urlSession(
        _ session: TransferSession,
        didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        guard let trust = challenge.protectionSpace.transferServerTrust else {
            completionHandler(.performDefaultHandling, nil)
            return
        }
        let key = "\(trust.host):\(trust.port)"
        if !self.options.pinnedKeys.isEmpty {
            guard let leafKey = trust.publicKeySHA256Fingerprints.first ?? nil, self.options.pinnedKeys.contains(leafKey) else {
                self.lock.withLock { self.trustRefusals[key] = "the server's public key matches no --pinnedpubkey" }
                completionHandler(.cancelAuthenticationChallenge, nil)
                return
            }
        }
        if self.options.insecure {
            completionHandler(.useCredential, nil)
            return
        }
        trust.evaluate { trusted in
            if !trusted {
                self.lock.withLock { self.trustRefusals[key] = "the server's certificate is not trusted (use --cacert FILE for a private CA, or -k)" }
            }
            completionHandler(trusted ? .useCredential : .cancelAuthenticationChallenge, nil)
        }
    }

    private func trustRefusal(for url: URL) -> String? {
        guard url.scheme?.lowercased() == "https", let host = url.host else { return nil }
        return self.lock.withLock { self.trustRefusals["\(host):\(url.port ?? 443)"] }
    }

    func urlSession(_ session: TransferSession, downloadTask: TransferSessionDownloadTask, didFinishDownloadingTo location: URL) {
        self.reportDroppedMirrors(downloadTask)
        guard let job = self.lock.withLock({ self.pending[downloadTask.taskIdentifier]?.job }) else { return }
        let response = downloadTask.response as? HTTPURLResponse
        let status = response?.statusCode ?? 0
        let result: AttemptResult
        if (200..<300).contains(status), let mismatch = self.checksumMismatch(location.path) {
            unlink(location.path)
            result = .checksumMismatch(mismatch)
        } else if (200..<300).contains(status) {
            let size = downloadTask.countOfBytesReceived
            do {
                let path = try job.moveIntoPlace(location.path, response: response)
                result = .saved(path: path, bytes: size)
            } catch {
                result = .moveFailed("\(error)")
            }
        } else {
            let retryAfter = (response?.value(forHTTPHeaderField: "Retry-After")).flatMap { RetryPolicy.retryAfterSeconds($0) }
            result = .httpStatus(status, retryAfter: retryAfter)
        }
        self.lock.withLock { self.pending[downloadTask.taskIdentifier]?.finished = result }
    }

    /// Why the file at `path` is not the one `--checksum` names (`nil`: it is, or none given).
    private func checksumMismatch(_ path: String) -> String? {
        guard let spec = self.options.checksum else { return nil }
        do {
            let actual = try FileChecksum.hexDigest(ofFileAt: path, algorithm: spec.algorithm)
            return actual == spec.hexDigest ? nil : "checksum mismatch: expected \(spec.algorithm.rawValue)=\(spec.hexDigest), got \(actual)"
        } catch {
            return "cannot verify the checksum: \(error.localizedDescription)"
        }
    }

    /// Tells each mirror's drop once, with its reason.
    private func reportDroppedMirrors(_ task: TransferSessionDownloadTask) {
        guard !self.options.mirrors.isEmpty else { return }
        let dropped = task.haulSources.filter { $0.droppedReason != nil }
        guard !dropped.isEmpty else { return }
        let new = self.lock.withLock { () -> [HaulDownloadSource] in
            guard var entry = self.pending[task.taskIdentifier] else { return [] }
            let new = dropped.filter { !entry.toldDropped.contains($0.url) }
            for source in new { entry.toldDropped.insert(source.url) }
            self.pending[task.taskIdentifier] = entry
            return new
        }
        for source in new {
            self.reporter.note("mirror \(source.url.absoluteString) dropped: \(source.droppedReason!)")
        }
    }

    func urlSession(_ session: TransferSession, task: TransferSessionTask, didCompleteWithError error: (any Error)?) {
        let entry = self.lock.withLock { () -> Pending? in
            self.runningTasks[task.taskIdentifier] = nil
            return self.pending.removeValue(forKey: task.taskIdentifier)
        }
        guard let entry else { return }
        self.reporter.taskEnded(task.taskIdentifier)
        if let error {
            // A task that failed on the server's answer shows that answer as its response.
            let status = (task.response as? HTTPURLResponse)?.statusCode
            let serverStatus = status.flatMap { (200..<300).contains($0) ? nil : $0 }
            entry.continuation.resume(returning: .failed(error as? URLError ?? URLError(.unknown), serverStatus: serverStatus))
        } else {
            entry.continuation.resume(returning: entry.finished ?? .failed(URLError(.unknown), serverStatus: nil))
        }
    }

    func urlSession(
        _ session: TransferSession,
        downloadTask: TransferSessionDownloadTask,
        didWriteData bytesWritten: Int64,
        totalBytesWritten: Int64,
        totalBytesExpectedToWrite: Int64
    ) {
        // A segmented download records its map at every due point (its file's size says
        // nothing); one written in order needs one checkpoint (the file's size says the rest).
        let segmented = downloadTask.haulConnectionCount > 1
        let due = self.lock.withLock { () -> DownloadJob? in
            guard let entry = self.pending[downloadTask.taskIdentifier], !entry.checkpointed || segmented else { return nil }
            if segmented { self.pending[downloadTask.taskIdentifier]!.cadence.bytes = Self.segmentedCheckpointBytes }
            guard self.pending[downloadTask.taskIdentifier]!.cadence.isDue(total: totalBytesWritten, now: Self.monotonicNow()) else {
                return nil
            }
            self.pending[downloadTask.taskIdentifier]?.checkpointed = true
            return entry.job
        }
        if let due { self.writeCrashCheckpoint(downloadTask, job: due, bytes: totalBytesWritten, expected: totalBytesExpectedToWrite) }
        self.reportDroppedMirrors(downloadTask)
        guard let job = self.lock.withLock({ self.pending[downloadTask.taskIdentifier]?.job }) else { return }
        self.reporter.progress(
            task: downloadTask.taskIdentifier,
            name: job.displayName,
            bytesWritten: bytesWritten,
            total: totalBytesWritten,
            expected: totalBytesExpectedToWrite,
            connections: downloadTask.haulConnectionCount
        )
    }

    func urlSession(
        _ session: TransferSession,
        downloadTask: TransferSessionDownloadTask,
        didResumeAtOffset fileOffset: Int64,
        expectedTotalBytes: Int64
    ) {
        // A new entity (offset 0) or a continuation: the next progress call records its checkpoint.
        self.lock.withLock { self.pending[downloadTask.taskIdentifier]?.checkpointed = false }
        guard let job = self.lock.withLock({ self.pending[downloadTask.taskIdentifier]?.job }) else { return }
        if fileOffset > 0 {
            self.reporter.note("\(job.displayName): continuing at \(ByteCountFormatting.bytes(fileOffset))")
        } else {
            self.reporter.note("\(job.displayName): the server sent the whole file again; starting over")
        }
        self.reporter.progress(task: downloadTask.taskIdentifier, name: job.displayName, bytesWritten: 0, total: fileOffset, expected: expectedTotalBytes)
    }
}
