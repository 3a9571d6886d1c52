import Crypto
import Dispatch
import Foundation
import HaulCore
import HaulEngine
import NIOCore
import NIOHTTP1
import NIOSSL
import Synchronization

/// Runs the downloads of one `haul get` on a ``TransferEngine``: the retry loop of each
/// download, the checkpoint files, Ctrl-C, and the progress output.
///
/// The downloads' tasks prefer the engine's event loop (``EventLoopTaskExecutor``), so a run's
/// completion continues its download's task on the thread that received the last byte, and the
/// next download starts there too: no thread is woken between two small files. The per-file
/// bookkeeping done there is a few system calls (a stat, the move into place), as curl does in
/// its one thread; body bytes are written by the engine's file threads, checkpoints and
/// checksums on queues of their own.
final class GetCoordinator: @unchecked Sendable {
    // @unchecked Sendable: mutable state is guarded by `lock`.

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
        var trustedCertificates: [NIOSSLCertificate] = []
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
        /// `resumePoint`: where a next attempt can continue from the bytes on disk.
        case failed(URLError, serverStatus: Int?, resumePoint: ResumePoint?, url: URL)
        /// Ctrl-C stopped it; `resumePoint` as for `failed`.
        case stopped(resumePoint: ResumePoint?, url: URL)
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

    /// `User-Agent` of `haul get`'s requests (unless `-H` gives one).
    static let userAgent = "Haul/\(HaulRelease.version)"

    let options: Options
    private let lock = NSLock()
    private var runningRuns: [Int: TransferRun] = [:]
    private var nextAttemptID = 0
    private var isInterrupted = false
    /// Where crash checkpoints are written, in order, off the event loop.
    private let checkpoints = DispatchQueue(label: "haul.get.checkpoints")
    /// The request headers every download sends.
    private let requestHeaders: HTTPHeaderFields
    /// The `-H` headers, as checkpoints record them (a later run sends them again).
    private let checkpointHeaders: HTTPHeaderFields
    let reporter: ProgressReporter

    init(options: Options) {
        self.options = options
        self.reporter = ProgressReporter(mode: options.output)
        var headers = HTTPHeaderFields()
        for (name, value) in options.headers { headers.add(name: name, value: value) }
        self.checkpointHeaders = headers
        if !headers.contains("User-Agent") { headers.add(name: "User-Agent", value: Self.userAgent) }
        // A download saves the representation as the server stores it, like wget.
        if !headers.contains("Accept-Encoding") { headers.add(name: "Accept-Encoding", value: "identity") }
        self.requestHeaders = headers
    }

    /// One of `shards` engines: the per-host connection limit is shared among them, so that
    /// spreading the downloads over cores never opens more connections to a server.
    private func makeEngine(shards: Int) -> TransferEngine {
        var configuration = TransferEngine.Configuration()
        configuration.idleTimeout = .milliseconds(Int64(self.options.idleTimeout * 1000))
        configuration.connectTimeout = .milliseconds(Int64(min(self.options.idleTimeout, 30) * 1000))
        let perHost = max(6, self.options.parallelism, self.options.connectionsPerDownload)
        configuration.maximumConnectionsPerHost = (perHost + shards - 1) / shards
        configuration.maximumConnectionsPerDownload = max(1, self.options.connectionsPerDownload)
        // Like curl and wget: http_proxy, https_proxy and no_proxy apply.
        configuration.proxies = ProxySettings.fromEnvironment(ProcessInfo.processInfo.environment)
        configuration.tls.additionalTrustRoots = self.options.trustedCertificates
        // Nothing shows task metrics: AsyncHTTPClient's logs stay off.
        configuration.recordsMetrics = false
        // Plain-HTTP downloads skip AsyncHTTPClient's request path.
        configuration.usesDirectHTTP1 = true
        // Without -k or --pinnedpubkey, default verification decides: no probe handshake.
        var trustHandler: ServerTrustGate.Handler?
        if self.options.insecure || !self.options.pinnedKeys.isEmpty {
            trustHandler = { [self] (question: ServerTrustQuestion) async -> ServerTrustAnswer in await self.judgeServer(question) }
        }
        return TransferEngine(configuration: configuration, cookieJar: MemoryCookieJar(), serverTrustHandler: trustHandler)
    }

    /// Downloads every URL, `parallelism` at a time, and returns the exit status.
    ///
    /// Several downloads at once are spread over one engine per core (each on an event loop of
    /// its own, with its own connections): one loop would do every download's network and
    /// bookkeeping on one thread.
    ///
    /// `closingConnections` false: the engines are left open, their connections too, for a
    /// process that exits next (`haul get`): its exit closes every socket at once. Closing
    /// each first took ~0.75 ms between the last file's placement and the exit (500 files of
    /// 256 KiB over 16 connections; 0.12 ms without). Nothing is in flight by then: every
    /// download's file is placed or its checkpoint written before its worker ends.
    func run(urls: [URL], closingConnections: Bool = true) async -> ExitStatus {
        Self.keepFreedHeap()
        let parallelism = self.options.parallelism
        if urls.count > 1, self.options.outputPath == nil, !self.options.fresh {
            self.checkpointNames = Self.checkpointNames(in: self.options.directory)
        }
        let shards = max(1, min(parallelism, urls.count, System.coreCount))
        let engines = (0..<shards).map { _ in self.makeEngine(shards: shards) }
        let signalSources = self.installInterruptHandler()
        self.reporter.start(totalFiles: urls.count)
        // `parallelism` workers, each on its engine's executor, take the next URL when their
        // download ends: no task wakes between two downloads (a parent collecting children
        // would be woken on the global pool for every file). Each engine keeps its share of
        // the workers, so the connections open never exceed `-j` in all.
        let queue = URLQueue(urls)
        let workers = min(parallelism, urls.count)
        let statuses = await withTaskGroup(of: [ExitStatus].self, returning: [ExitStatus].self) { group in
            for worker in 0..<workers {
                let engine = engines[worker % engines.count]
                group.addTask(executorPreference: engine.taskExecutor) {
                    var statuses: [ExitStatus] = []
                    while !self.interrupted, let url = queue.next() {
                        statuses.append(await self.download(url, engine: engine))
                    }
                    return statuses
                }
            }
            var all: [ExitStatus] = []
            for await statuses in group { all += statuses }
            return all
        }
        for source in signalSources { source.cancel() }
        self.reporter.stop()
        if closingConnections {
            for engine in engines { await engine.shutdown() }
        } else {
            // Never deallocated unclosed (an HTTPS engine's client insists on a shutdown first).
            Self.leftForExit.withLock { $0 += engines }
        }
        if self.interrupted { return .interrupted }
        return statuses.first { $0 != .success } ?? .success
    }

    /// Engines a run left open for the process's exit to close (``run(urls:closingConnections:)``).
    private static let leftForExit = Mutex<[TransferEngine]>([])

    private var interrupted: Bool { self.lock.withLock { self.isInterrupted } }

    /// Keeps freed heap memory for reuse instead of handing it back to the kernel at once.
    /// Network buffers are freed a batch at a time (up to a download's 1 MiB write budget), and
    /// glibc returned the top of a thread's heap whenever more than 128 KiB were free there:
    /// the next reads faulted the same pages in again, zeroed (a 1 GiB download on one
    /// connection: ~80,000 page faults, a fifth of its CPU time). The peak resident set is
    /// the same either way; what is kept is at most this threshold per heap.
    private static func keepFreedHeap() {
        // A large download's 512 KiB read buffers come from the heap and are reused.
        HeapPolicy.keepFreedHeap(trimThreshold: 16 << 20, mmapThreshold: 4 << 20)
    }

    /// The URLs not started yet, taken in order by the workers of ``run(urls:)``.
    private final class URLQueue: Sendable {
        private let remaining: Mutex<IndexingIterator<[URL]>>

        init(_ urls: [URL]) {
            self.remaining = Mutex(urls.makeIterator())
        }

        func next() -> URL? {
            self.remaining.withLock { $0.next() }
        }
    }

    // MARK: - One download with retries

    /// Base names already used by a job of this run: two URLs ending in the same name must not
    /// share a partial file.
    private var claimedNames: Set<String> = []
    /// For each taken name a URL suggested, the number after the last one ``claimBaseName(for:)``
    /// gave it.
    private var nextNumbers: [String: Int] = [:]
    /// The checkpoint files (`*.haul-resume`) in the download directory when the run began, for
    /// a run of several URLs: one directory listing instead of one failed `open` per URL.
    /// `nil`: not listed (one URL, `-o`, or the listing failed); every job looks for its own.
    /// Written once by ``run(urls:)`` before any download starts, only read afterwards.
    private var checkpointNames: Set<String>?

    /// The names of the checkpoint files in `directory`, or `nil` when it cannot be listed.
    private static func checkpointNames(in directory: String) -> Set<String>? {
        guard let stream = opendir(directory) else { return nil }
        defer { closedir(stream) }
        var names = Set<String>()
        let suffix = Array(".haul-resume".utf8)
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw -> [UInt8] in
                let bytes = raw.bindMemory(to: UInt8.self)
                return Array(bytes.prefix(while: { $0 != 0 }))
            }
            if name.count > suffix.count, name.suffix(suffix.count).elementsEqual(suffix) {
                names.insert(String(decoding: name, as: UTF8.self))
            }
        }
        return names
    }

    /// Directories found writable (asked once per directory, not per file).
    private var writableDirectories: Set<String> = []

    /// A partial name for `url` no other job of this run uses, and the name the URL suggests.
    private func claimBaseName(for url: URL) -> (claimed: String, suggested: String) {
        let wanted = FileNaming.suggestedFilename(contentDisposition: nil, url: url)
        return self.lock.withLock {
            // Most names are new: one hash.
            if self.claimedNames.insert(wanted).inserted { return (wanted, wanted) }
            // Names are only ever added, so the search for a taken name goes on from the number
            // it last gave: 10,000 URLs all named `download` cost 10,000 questions, not 50 million.
            let (name, number) = FileNaming.firstAvailableName(for: wanted, from: self.nextNumbers[wanted] ?? 1) {
                self.claimedNames.contains($0)
            }
            self.claimedNames.insert(name)
            self.nextNumbers[wanted] = number + 1
            return (name, wanted)
        }
    }

    private func isWritable(_ directory: String) -> Bool {
        if self.lock.withLock({ self.writableDirectories.contains(directory) }) { return true }
        guard access(directory, W_OK) == 0 else { return false }
        self.lock.withLock { _ = self.writableDirectories.insert(directory) }
        return true
    }

    private func download(_ url: URL, engine: TransferEngine) async -> ExitStatus {
        let names = self.options.outputPath == nil ? self.claimBaseName(for: url) : nil
        let job = DownloadJob(url: url, options: self.options, baseName: names?.claimed, urlName: names?.suggested)
        if self.options.fresh { job.discardCheckpoint() }
        let mayHaveCheckpoint = self.checkpointNames.map { $0.contains(job.baseName + ".haul-resume") } ?? true
        var resume = self.options.fresh || !mayHaveCheckpoint ? nil : job.loadCheckpoint(reporter: self.reporter)
        /// Whether a checkpoint file may exist (to remove once the file is complete).
        var checkpointExists = resume != nil
        // Only -c and -o care whether the final name is taken (otherwise a taken name gets a
        // number when the file is placed): no stat per file for the others.
        if resume == nil, self.options.continueExisting || self.options.outputPath != nil, let existing = job.existingFinalFile {
            if self.options.continueExisting {
                self.reporter.note("\(existing) already exists; nothing to do")
                return .success
            }
            if self.options.outputPath != nil {
                self.reporter.error("\(existing) already exists; remove it or choose another name with -o")
                return .fileError
            }
        }
        guard self.isWritable(job.directory) else {
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
            let request = TransferRequest(url: resume?.url ?? url, method: "GET", headers: self.requestHeaders)
            let (result, wroteCheckpoint) = await self.perform(job, on: engine, request: request, resume: resume?.resumePoint, mirrors: mirrors)
            if wroteCheckpoint { checkpointExists = true }
            switch result {
            case .saved(let path, let bytes):
                if checkpointExists { job.discardCheckpointFile() }
                self.reporter.jobFinished(job.displayName, savedAs: path, bytes: bytes)
                return .success
            case .moveFailed(let message):
                self.reporter.error("\(job.displayName): \(message)")
                return .fileError
            case .checksumMismatch(let message):
                job.discardCheckpoint()
                checkpointExists = false
                resume = nil
                if !mirrors.isEmpty {
                    self.reporter.note("\(job.displayName): \(message); the file had bytes from mirrors, fetching it again from \(url.absoluteString) alone")
                    mirrors = []
                    continue
                }
                self.reporter.error("\(job.displayName): \(message); the file was not kept")
                return .serverError
            case .httpStatus(let status, let retryAfter):
                if checkpointExists { job.discardCheckpointFile() }
                checkpointExists = false
                resume = nil
                let message = "\(url.absoluteString): server answered \(status) \(HTTPResponseStatus(statusCode: status).reasonPhrase)"
                switch self.decide(attempt: attempt, failure: .serverStatus(status), retryAfter: retryAfter, hasResumePoint: false) {
                case .retry(let seconds, _):
                    self.reporter.note("\(message); retrying in \(ByteCountFormatting.duration(seconds: seconds))")
                    try? await Task.sleep(for: .seconds(seconds))
                    attempt += 1
                case .fail, .nextMirror:
                    self.reporter.error(message)
                    return .serverError
                }
            case .stopped(let point, let current):
                if let point {
                    job.saveCheckpoint(self.resumeData(job, url: current, point: point))
                    self.reporter.note("\(job.displayName): interrupted; run the same command again to continue")
                } else {
                    job.discardCheckpoint()
                }
                return .interrupted
            case .failed(let error, let status, let point, let current):
                if self.interrupted {
                    if let point {
                        job.saveCheckpoint(self.resumeData(job, url: current, point: point))
                        self.reporter.note("\(job.displayName): interrupted; run the same command again to continue")
                    }
                    return .interrupted
                }
                if resume != nil, error.code == .cannotDecodeRawData || error.code == .fileDoesNotExist {
                    self.reporter.note("\(job.displayName): cannot continue the earlier download (\(error.localizedDescription)); starting over")
                    job.discardCheckpoint()
                    checkpointExists = false
                    resume = nil
                    continue
                }
                resume = point.map { self.resumeData(job, url: current, point: $0) }
                if let resume {
                    job.saveCheckpoint(resume)
                    checkpointExists = true
                } else {
                    job.discardCheckpoint()
                    checkpointExists = false
                }
                if let refusal = self.trustRefusal(for: url) {
                    self.reporter.error("\(url.absoluteString): \(refusal)")
                    job.discardCheckpoint()
                    return .tlsError
                }
                let failure = TransferFailureKind(error, status: status)
                let message = "\(url.absoluteString): \(error.localizedDescription)"
                switch self.decide(attempt: attempt, failure: failure, retryAfter: nil, hasResumePoint: resume != nil) {
                case .retry(let seconds, _):
                    let kept = resume == nil ? "" : ", keeping the bytes on disk"
                    self.reporter.note("\(message); retrying in \(ByteCountFormatting.duration(seconds: seconds))\(kept)")
                    try? await Task.sleep(for: .seconds(seconds))
                    attempt += 1
                case .fail, .nextMirror:
                    self.reporter.error(message + (resume == nil ? "" : " (partial download kept; run again to continue)"))
                    return Self.exitStatus(for: error, status: status)
                }
            }
        }
    }

    /// The checkpoint naming `point` of `job`'s partial file, to continue at `url` (the URL the
    /// last response came from, after redirects).
    private func resumeData(_ job: DownloadJob, url: URL, point: ResumePoint) -> ResumeData {
        ResumeData(
            url: url,
            originalURL: job.url,
            requestHeaders: self.checkpointHeaders,
            partialFilePath: job.partialPath,
            resumePoint: point
        )
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

    // MARK: - One attempt

    /// Runs one attempt of `job` and turns its outcome into a result: the finished file
    /// verified and moved into place, or why not. Also tells whether the attempt wrote a crash
    /// checkpoint.
    private func perform(_ job: DownloadJob, on engine: TransferEngine, request: TransferRequest, resume: ResumePoint?, mirrors: [URL]) async -> (AttemptResult, Bool) {
        let id = self.lock.withLock { () -> Int in
            self.nextAttemptID += 1
            return self.nextAttemptID
        }
        let attempt = GetAttempt(
            id: id, job: job, requestHeaders: self.checkpointHeaders, resumesMap: resume?.mapped == true,
            reporter: self.reporter, checkpoints: self.checkpoints
        )
        let run = TransferRun(
            engine: engine,
            request: request,
            destination: .file(path: job.partialPath, resume: resume),
            resourceTimeout: nil,
            mirrors: mirrors,
            mirrorPolicy: self.options.checksum != nil ? .verifiedByChecksum : .sameValidators,
            opensUnnamedFile: true,
            observer: attempt
        )
        let outcome = await withCheckedContinuation { (continuation: CheckedContinuation<TransferOutcome, Never>) in
            let stopNow = self.lock.withLock { () -> Bool in
                self.runningRuns[id] = run
                return self.isInterrupted
            }
            run.start { continuation.resume(returning: $0) }
            // Ctrl-C may have come between the check in the loop and registering the run.
            if stopNow { run.stop(.pause) }
        }
        self.lock.withLock { _ = self.runningRuns.removeValue(forKey: id) }
        self.reporter.taskEnded(id)
        // The checkpoints it queued are on disk before the caller removes or replaces them.
        await attempt.checkpointsWritten()
        let result: AttemptResult
        switch outcome {
        case .completed(let response, let total) where (200..<300).contains(response.statusCode):
            result = await self.place(job, run: run, response: response, bytes: total)
        case .completed(let response, _):
            // The body was an error page: nothing to keep.
            if let file = run.takeUnnamedFile() { file.close() } else { unlink(job.partialPath) }
            let retryAfter = response.headers["Retry-After"].flatMap { RetryPolicy.retryAfterSeconds($0) }
            result = .httpStatus(response.statusCode, retryAfter: retryAfter)
        case .failed(let failure, let response, let point):
            result = .failed(failure.error, serverStatus: failure.serverStatus, resumePoint: point, url: response?.url ?? request.url)
        case .stopped(_, let response, let point):
            result = .stopped(resumePoint: point, url: response?.url ?? request.url)
        }
        return (result, attempt.wroteCheckpoint)
    }

    /// Checks the finished partial file against `--checksum` and moves it to its final name.
    private func place(_ job: DownloadJob, run: TransferRun, response: ResponseInfo, bytes: Int64) async -> AttemptResult {
        if let spec = self.options.checksum {
            // The file is read by its name.
            guard run.nameFile() else { return .moveFailed("cannot name \(job.partialPath) to verify its checksum") }
            // Reading the whole file: not on the event loop.
            let mismatch = await withCheckedContinuation { continuation in
                DispatchQueue.global().async { continuation.resume(returning: Self.checksumMismatch(job.partialPath, spec: spec)) }
            }
            if let mismatch {
                unlink(job.partialPath)
                return .checksumMismatch(mismatch)
            }
        }
        do {
            let path: String
            if let file = run.takeUnnamedFile() {
                defer { file.close() }
                do {
                    path = try job.linkIntoPlace(file, response: response)
                } catch {
                    // The bytes stay on disk under the partial name, as a named file's would.
                    _ = try? file.link(to: job.partialPath)
                    throw error
                }
            } else {
                path = try job.moveIntoPlace(job.partialPath, response: response)
            }
            return .saved(path: path, bytes: bytes)
        } catch {
            return .moveFailed("\(error)")
        }
    }

    /// Why the file at `path` is not the one `spec` names (`nil`: it is).
    private static func checksumMismatch(_ path: String, spec: ChecksumSpec) -> String? {
        do {
            let actual = try FileChecksum.hexDigest(ofFileAt: path, algorithm: spec.algorithm)
            return actual == spec.hexDigest ? nil : "checksum mismatch: expected \(spec.algorithm.rawValue)=\(spec.hexDigest), got \(actual)"
        } catch {
            return "cannot verify the checksum: \(error.localizedDescription)"
        }
    }

    // MARK: - Ctrl-C

    private func installInterruptHandler() -> [any DispatchSourceSignal] {
        signal(SIGINT, SIG_IGN)
        signal(SIGTERM, SIG_IGN)
        return [SIGINT, SIGTERM].map { number in
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [weak self] in self?.interrupt() }
            source.resume()
            return source
        }
    }

    /// Stops every download, keeping what is on disk for the next run.
    func interrupt() {
        let runs = self.lock.withLock { () -> [TransferRun] in
            self.isInterrupted = true
            return Array(self.runningRuns.values)
        }
        for run in runs { run.stop(.pause) }
    }

    // MARK: - Server trust (-k, --pinnedpubkey)

    /// Asked once per https host and port, only with -k or --pinnedpubkey: a pinned key must
    /// match the leaf's; then -k accepts the chain, otherwise default verification (system
    /// roots, --cacert, the host name) must pass as well — curl's rules.
    private func judgeServer(_ question: ServerTrustQuestion) async -> ServerTrustAnswer {
        let key = "\(question.host):\(question.port)"
        if !self.options.pinnedKeys.isEmpty {
            guard let leaf = question.certificates.first, let leafKey = Self.publicKeySHA256(der: leaf), self.options.pinnedKeys.contains(leafKey) else {
                let reason = "the server's public key matches no --pinnedpubkey"
                self.lock.withLock { self.trustRefusals[key] = reason }
                return .refuse(URLError(.serverCertificateUntrusted, userInfo: [NSLocalizedDescriptionKey: reason]))
            }
        }
        if self.options.insecure { return .trustPresentedChain }
        guard await question.evaluateByDefault() else {
            let reason = "the server's certificate is not trusted (use --cacert FILE for a private CA, or -k)"
            self.lock.withLock { self.trustRefusals[key] = reason }
            return .refuse(URLError(.serverCertificateUntrusted, userInfo: [NSLocalizedDescriptionKey: reason]))
        }
        return .trustPresentedChain
    }

    /// The SHA-256 (hex) of a DER certificate's public key (its SubjectPublicKeyInfo), as curl's
    /// `--pinnedpubkey sha256//` names it.
    static func publicKeySHA256(der: [UInt8]) -> String? {
        guard let certificate = try? NIOSSLCertificate(bytes: der, format: .der),
            let spki = try? certificate.extractPublicKey().toSPKIBytes()
        else { return nil }
        return SHA256.hash(data: spki).hexString
    }

    private func trustRefusal(for url: URL) -> String? {
        guard url.scheme?.lowercased() == "https", let host = url.host else { return nil }
        return self.lock.withLock { self.trustRefusals["\(host):\(url.port ?? 443)"] }
    }
}
