import AsyncHTTPClient
import Foundation
import HaulCore
import NIOCore
import NIOHTTP1
import NIOSSL
import Synchronization

/// The extra connections of one segmented download, and the ``SegmentPlan`` they share with
/// the run's own exchange (lane 0, a request from the first missing byte on).
///
/// Lanes fetch from *sources*: the primary URL (the run's) and any mirrors. Each source has a
/// budget of connections of its own (`-x N` is per server), each lane takes a slot of its
/// source's host limit, and a free connection goes to the source that is fastest per
/// connection, so faster servers end up fetching more (a lane that finishes early takes half of
/// the slowest one's rest). A mirror's first answer decides whether it may contribute at all
/// (``MirrorRules``); a mirror that disagrees, refuses ranges or changes is dropped with its
/// reason, never the download.
///
/// Created when the run's exchange has a response worth splitting (a resumable entity of known
/// length). Extra connections start once the partial file is open and the run's own connection
/// has shown it is not fast enough alone (``SplitGate``: below 512 MiB/s in a 50 ms window in
/// which the disk kept up; at once with mirrors), each taking a slot of the
/// host's connection limit only when one is free and nobody waits for it; a lane that finishes
/// frees its slot, and a new lane takes what the plan gives. Each extra lane is a `Range`
/// request with `If-Range`; its answer must be a `206` whose `Content-Range` starts where asked,
/// names the entity's length, and whose validators are the entity's. Anything else stops that
/// lane; a `200` or a changed validator means the entity changed: every lane stops and the map
/// is dropped, so versions never mix. Three failed lanes in a row stop new ones (the run's own
/// exchange goes on).
///
/// Confined to the engine's event loop, except ``map``, ``doneBytes`` and ``laneCount``
/// (snapshots for other threads).
final class SegmentGroup: @unchecked Sendable {
    let run: TransferRun
    let eventLoop: any EventLoop
    let validators: EntityValidators
    let path: String
    /// Lanes at once per source, the run's own included.
    let budget: Int
    let mirrorPolicy: MirrorRules.Policy
    /// Index 0: the primary; then the mirrors.
    private var sources: [SegmentSource]
    /// Which source each running lane fetches from.
    private var laneSource: [Int: Int] = [0: 0]
    private var plan: SegmentPlan
    private var helpers: [Int: RunningExchange<Void>] = [:]
    /// Lanes told to stop by the plan (their end is not a failure).
    private var stoppedByPlan: Set<Int> = []
    private var fileReady = false
    private var stopped = false
    private var primaryRunning = true
    /// The run's own exchange received everything its lane needs.
    private(set) var primaryLaneDone = false
    /// Why no more lanes are started on the primary, if so.
    private(set) var refusal: String?
    /// The entity changed under the download: every lane stops (any thread may ask).
    var entityChanged: URLError? { self.changed.withLock { $0 } }
    private let changed = Mutex<URLError?>(nil)
    private var waiters: [EventLoopPromise<Void>] = []
    /// The next look at the plan while connections are free.
    private var recheck: Scheduled<Void>?
    /// Whether extra lanes may start yet: not while the run's own connection alone is fast
    /// enough (open from the start with mirrors: the user asked for them).
    private var gate: SplitGate
    /// The run's own exchange's writer: its buffer is a lane's share only once lanes start.
    private weak var primaryWriter: FileBodyWriter?
    /// Lanes whose answer head was checked and found usable.
    private var validated: Set<Int> = []
    /// The run's own exchange at its lane's end, waiting to learn whether the lane after it
    /// delivers (stop) or not (go on: its request runs to the end of the file).
    private var primaryWaiter: EventLoopPromise<Bool>?
    private let origin = NIODeadline.now()

    private let snapshot: Mutex<(map: ByteRangeSet, lanes: Int, sources: [SegmentSourceReport])>

    /// - Parameters:
    ///   - mirrors: other URLs of the same file, with the reason for those already dropped.
    init(
        run: TransferRun,
        url: URL,
        requestHeaders: HTTPHeaderFields,
        validators: EntityValidators,
        length: Int64,
        done: ByteRangeSet,
        primaryOffset: Int64,
        path: String,
        budget: Int,
        minimumSegment: Int64,
        tlsConfiguration: TLSConfiguration?,
        mirrors: [(url: URL, dropped: String?)] = [],
        mirrorPolicy: MirrorRules.Policy = .sameValidators
    ) {
        self.run = run
        self.eventLoop = run.eventLoop
        var headers = HTTPHeaders(requestHeaders.fields.map { ($0.name, $0.value) })
        headers.remove(name: "Range")
        headers.remove(name: "If-Range")
        self.validators = validators
        self.path = path
        self.budget = budget
        self.mirrorPolicy = mirrorPolicy
        self.length = length
        var sources = [
            SegmentSource(
                url: url, host: TransferRun.hostKey(url), isPrimary: true, headers: headers, ifRange: validators.ifRangeValue,
                validators: validators, stage: .accepted, tls: .ready(tlsConfiguration), lanes: 1
            )
        ]
        for mirror in mirrors where mirror.url != url {
            var mirrorHeaders = headers
            if !SegmentSource.sameOrigin(mirror.url, url) {
                // Credentials and cookies were meant for the primary's origin.
                mirrorHeaders.remove(name: "Authorization")
                mirrorHeaders.remove(name: "Cookie")
                if let cookies = run.engine.cookieJar?.cookieHeader(for: mirror.url) { mirrorHeaders.add(name: "Cookie", value: cookies) }
            }
            let https = mirror.url.scheme?.lowercased() == "https"
            sources.append(
                SegmentSource(
                    url: mirror.url, host: TransferRun.hostKey(mirror.url), isPrimary: false, headers: mirrorHeaders, ifRange: nil,
                    validators: EntityValidators(), stage: mirror.dropped.map { .dropped($0) } ?? .untried,
                    tls: https && run.engine.trustGate != nil ? .unresolved : .ready(nil)
                )
            )
        }
        self.sources = sources
        self.gate = sources.count > 1 ? .open : SplitGate(fastEnough: run.engine.configuration.sufficientConnectionSpeed)
        var plan = SegmentPlan(length: length, done: done, minimumSegment: minimumSegment)
        plan.addPrimary(at: primaryOffset, now: 0)
        self.plan = plan
        self.snapshot = Mutex((plan.done, 1, sources.map(\.report)))
    }

    private var now: Double { Double((NIODeadline.now() - self.origin).nanoseconds) / 1e9 }

    /// The bytes a lane (the first connection too) may have waiting for the disk before it stops
    /// reading: the download's lanes share 2 MiB (16 lanes: 128 KiB each, batches of 64 KiB),
    /// as much as one single download holds. Measured on 1 GiB from loopback nginx: 4 MiB
    /// shared made no faster download (median 1.05 s vs 1.03 s) and ~2 MiB more resident.
    var laneBufferLimit: Int {
        max(128 << 10, (2 << 20) / max(1, self.budget * self.sources.count))
    }

    /// The run's own exchange writes through `writer`: while it is the only connection (the
    /// gate is closed) it keeps a single download's buffer, then a lane's share.
    func primaryWriterCreated(_ writer: FileBodyWriter) {
        self.eventLoop.assertInEventLoop()
        self.primaryWriter = writer
        if !self.gate.isOpen { writer.setBufferLimit(FileBodyWriter.defaultBufferLimit) }
    }

    /// The bytes on disk (a snapshot, any thread).
    var map: ByteRangeSet { self.snapshot.withLock { $0.map } }
    var doneBytes: Int64 { self.snapshot.withLock { $0.map.byteCount } }
    /// Connections at work now, the run's own included.
    var laneCount: Int { self.snapshot.withLock { $0.lanes } }
    /// The primary and each mirror: bytes, connections, why dropped (a snapshot, any thread).
    var sourceReports: [SegmentSourceReport] { self.snapshot.withLock { $0.sources } }
    /// The entity's length (also read from other threads).
    let length: Int64

    /// Where the download could continue from (nil once the entity changed).
    var resumePoint: ResumePoint? {
        guard self.entityChanged == nil else { return nil }
        return ResumePoint(done: self.map, validators: self.validators, entityLength: self.length)
    }
    /// The map as a resume point even after a lane saw another entity (every byte in it is of
    /// the validated one).
    var mapPoint: ResumePoint {
        ResumePoint(done: self.map, validators: self.validators, entityLength: self.length)
    }


    // MARK: - The run's own exchange (lane 0)

    /// The partial file is open (and cut where it had to be): extra lanes may write.
    func fileIsReady() {
        self.eventLoop.assertInEventLoop()
        self.fileReady = true
        self.fill()
    }

    /// How many of `count` bytes arriving on `lane` belong to it.
    func received(_ lane: Int, count: Int) -> Int {
        Int(self.plan.received(lane, count: Int64(count), now: self.now))
    }

    func hasReceivedAll(_ lane: Int) -> Bool {
        self.plan.hasReceivedAll(lane)
    }

    /// `count` bytes of `lane` are in the file.
    func written(_ lane: Int, count: Int) {
        self.eventLoop.assertInEventLoop()
        let finished = self.plan.written(lane, count: Int64(count))
        let done = self.plan.done
        let source = self.laneSource[lane] ?? 0
        self.sources[source].bytes += Int64(count)
        let bytes = self.sources[source].bytes
        self.snapshot.withLock {
            $0.map = done
            $0.sources[source].bytes = bytes
        }
        self.run.observer.transferRun(self.run, didWrite: count, totalOnDisk: done.byteCount, expectedTotal: self.plan.length)
        for id in finished where !self.stoppedByPlan.contains(id) {
            // Lane 0 at its end decides itself (``primaryAtEnd()``); covered by another lane's
            // bytes (end game), it is stopped.
            if id == 0, let primary = self.plan.lanes[0], primary.received >= primary.end { continue }
            self.stoppedByPlan.insert(id)
            if id == 0 {
                self.primaryLaneDone = true
                self.run.cancelCurrentExchange()
            } else {
                self.helpers[id]?.cancel()
            }
        }
        self.fill()
        self.checkDone()
    }

    /// The run's own exchange received its lane's last byte: `false` when it should stop (the
    /// lane after it delivers, or bytes on disk follow), `true` when its lane was extended
    /// (the next lane's server refused ranges). Waits for the next lane's answer head, so a
    /// server that ignores ranges never costs the run its only usable connection.
    func primaryAtEnd() -> EventLoopFuture<Bool> {
        self.eventLoop.assertInEventLoop()
        if let decided = self.primaryDecision() { return self.eventLoop.makeSucceededFuture(decided) }
        let promise = self.eventLoop.makePromise(of: Bool.self)
        self.primaryWaiter?.succeed(false)
        self.primaryWaiter = promise
        return promise.futureResult
    }

    /// `nil` while the lane after the run's own has not answered yet.
    private func primaryDecision() -> Bool? {
        guard self.plan.hasReceivedAll(0) else { return true }
        guard let end = self.plan.lanes[0]?.end else { return false }
        guard let next = self.plan.lanes.first(where: { $0.key != 0 && $0.value.start == end })?.key else { return false }
        return self.validated.contains(next) ? false : nil
    }

    private func decidePrimaryWaiter() {
        guard let waiter = self.primaryWaiter, let decided = self.primaryDecision() else { return }
        self.primaryWaiter = nil
        waiter.succeed(decided)
    }

    /// A lane's answer head was usable.
    func laneValidated(_ lane: Int) {
        self.validated.insert(lane)
        self.decidePrimaryWaiter()
    }

    /// The run's own exchange has every byte of its lane (it is ended on purpose).
    func markPrimaryLaneDone() {
        self.primaryLaneDone = true
    }

    /// The run's own exchange ended; it waits on ``finished()`` next.
    func primaryEnded(laneDone: Bool) {
        self.eventLoop.assertInEventLoop()
        self.primaryRunning = false
        self.primaryWaiter?.succeed(false)
        self.primaryWaiter = nil
        if laneDone { self.primaryLaneDone = true }
        self.plan.laneEnded(0)
        if self.laneSource.removeValue(forKey: 0) != nil { self.sources[0].lanes -= 1 }
        self.updateLaneCount()
        self.fill()
        self.checkDone()
    }

    /// Succeeds when every lane has ended and nothing more will start: check ``isComplete``.
    func finished() -> EventLoopFuture<Void> {
        self.eventLoop.assertInEventLoop()
        let promise = self.eventLoop.makePromise(of: Void.self)
        self.waiters.append(promise)
        self.checkDone()
        return promise.futureResult
    }

    /// Every byte is on disk (a snapshot, any thread).
    var isComplete: Bool { self.doneBytes == self.length }

    /// Stops every extra lane (pause, cancel, or the run's exchange failed).
    func stop() {
        self.eventLoop.execute {
            self.stopped = true
            for task in self.helpers.values { task.cancel() }
            self.primaryWaiter?.succeed(false)
            self.primaryWaiter = nil
            self.checkDone()
        }
    }

    // MARK: - Extra lanes

    private func fill() {
        guard self.fileReady, !self.stopped, self.entityChanged == nil, !self.plan.isComplete else { return }
        guard self.gateIsOpen() else { return }
        // A mirror's server is asked about (TLS trust) before its first lane.
        for index in self.sources.indices where !self.sources[index].isDropped {
            if case .unresolved = self.sources[index].tls { self.resolveTLS(index) }
        }
        // Called after every batch written: without a source that may take a lane, the ranking
        // below (every lane's speed, a sort) is not worth making.
        guard self.sources.indices.contains(where: self.mayStartLane(on:)) else { return }
        // Plan every free connection first, then send: a lane split by a later assignment of
        // this round asks only for its final range (no connection is cut right after opening).
        var assignments: [(SegmentPlan.Assignment, source: Int)] = []
        var order: [Int]?
        while true {
            // The fastest source per connection first (an untried mirror before all: its speed
            // is worth learning); each within its own budget and host slots.
            let candidates = order ?? self.sourcesBySpeed()
            order = candidates
            guard let source = candidates.first(where: { self.mayStartLane(on: $0) && self.run.engine.limiter.tryAcquire(host: self.sources[$0].host) }) else { break }
            guard let assignment = self.plan.assign(now: self.now) else {
                self.run.engine.limiter.release(host: self.sources[source].host)
                break
            }
            self.sources[source].lanes += 1
            if case .untried = self.sources[source].stage { self.sources[source].stage = .probing }
            self.laneSource[assignment.lane] = source
            assignments.append((assignment, source))
        }
        for (var assignment, source) in assignments {
            if let end = self.plan.lanes[assignment.lane]?.end { assignment.range = assignment.range.lowerBound..<end }
            self.start(assignment, source: source)
        }
        self.updateLaneCount()
        // With connections to spare, look again soon: a lane that goes silent is worth
        // fetching a second time even when no byte arrives anywhere to wake the plan up.
        if self.sources.indices.contains(where: self.mayStartLane(on:)), !self.plan.lanes.isEmpty, self.recheck == nil {
            self.recheck = self.eventLoop.scheduleTask(in: .milliseconds(50)) {
                self.recheck = nil
                self.fill()
            }
        }
    }

    /// Asks the gate, with the run's own connection's bytes; while it is closed, looks again
    /// within a window even if no byte arrives (a stall opens it). The gate opens for good when
    /// the run's own exchange is no longer running: its lane's rest needs other connections.
    private func gateIsOpen() -> Bool {
        let mayStart: Bool
        if self.primaryRunning, let primary = self.plan.lanes[0] {
            let heldBack = self.primaryWriter?.takeHeldBack() ?? false
            mayStart = self.gate.observe(received: primary.received, now: self.now, heldBackByDisk: heldBack)
        } else {
            self.gate.open()
            mayStart = true
        }
        guard mayStart else {
            if self.recheck == nil {
                self.recheck = self.eventLoop.scheduleTask(in: .nanoseconds(Int64(self.gate.window * 1e9))) {
                    self.recheck = nil
                    self.fill()
                }
            }
            return false
        }
        if let writer = self.primaryWriter {
            self.primaryWriter = nil
            writer.setBufferLimit(self.laneBufferLimit)
        }
        return true
    }

    /// Whether a lane may start on source `index` now (host slots aside).
    private func mayStartLane(on index: Int) -> Bool {
        guard index != 0 || self.refusal == nil else { return false }
        return self.sources[index].canTakeLane && self.sources[index].lanes < self.budget
    }

    /// Source indices, fastest per connection first; mirrors never tried come first (their
    /// speed is worth learning).
    private func sourcesBySpeed() -> [Int] {
        var measured: [Int: [Double]] = [:]
        for (lane, state) in self.plan.lanes {
            guard let source = self.laneSource[lane], let speed = self.plan.speed(state, now: self.now) else { continue }
            measured[source, default: []].append(speed)
        }
        for (source, speeds) in measured { self.sources[source].speed = speeds.reduce(0, +) / Double(speeds.count) }
        return self.sources.indices.sorted { a, b in
            let x = self.sources[a].speed ?? .infinity
            let y = self.sources[b].speed ?? .infinity
            return x != y ? x > y : a < b
        }
    }

    /// Asks the engine's trust gate about a mirror's server (its first connection waits).
    private func resolveTLS(_ index: Int) {
        self.sources[index].tls = .resolving
        let url = self.sources[index].url
        guard let gate = self.run.engine.trustGate, let host = url.host else {
            self.sources[index].tls = .ready(nil)
            return
        }
        let proxy = self.run.engine.configuration.proxies.proxy(for: url)
        Task {
            let decision = await gate.decision(host: host, port: url.port ?? 443, proxy: proxy)
            self.eventLoop.execute {
                switch decision {
                case .useDefault: self.sources[index].tls = .ready(nil)
                case .use(let configuration): self.sources[index].tls = .ready(configuration)
                case .refused(let error): self.drop(index, reason: "its server was not trusted (\(error.localizedDescription))")
                }
                self.fill()
            }
        }
    }

    /// A mirror contributes nothing more (its lanes stop; the bytes they wrote were checked
    /// when it was accepted and stay).
    private func drop(_ index: Int, reason: String) {
        guard !self.sources[index].isDropped else { return }
        self.sources[index].stage = .dropped(reason)
        self.run.mirrorDropped(self.sources[index].url, reason: reason)
        for (lane, source) in self.laneSource where source == index && lane != 0 {
            self.stoppedByPlan.insert(lane)
            self.helpers[lane]?.cancel()
        }
        self.updateLaneCount()
    }

    private func start(_ assignment: SegmentPlan.Assignment, source index: Int) {
        let lane = assignment.lane
        let range = assignment.range
        let source = self.sources[index]
        var headers = source.headers
        headers.replaceOrAdd(name: "Range", value: "bytes=\(range.lowerBound)-\(range.upperBound - 1)")
        if let ifRange = source.ifRange { headers.replaceOrAdd(name: "If-Range", value: ifRange) }
        var tlsConfiguration: TLSConfiguration?
        if case .ready(let configuration) = source.tls { tlsConfiguration = configuration }
        let delegate = SegmentExchange(group: self, lane: lane, range: range)
        let task: RunningExchange<Void>
        if let direct = self.run.engine.startDirectExchange(
            url: source.url, origin: URLOrigin(source.url), method: "GET", headers: headers, hasBody: false,
            sink: delegate, finished: { try delegate.finishedResponse() }
        ) {
            task = direct
        } else {
            let request: HTTPClient.Request
            do {
                request = try HTTPClient.Request(url: source.url, method: .GET, headers: headers, tlsConfiguration: tlsConfiguration)
            } catch {
                self.laneEnded(lane, .failure(error))
                return
            }
            let (client, _, _) = self.run.engine.client(for: source.url, decodes: false)
            task = .client(client.execute(request: request, delegate: delegate, eventLoop: .indifferent))
        }
        self.helpers[lane] = task
        task.futureResult.hop(to: self.eventLoop).whenComplete { result in
            let drained = delegate.writer?.drained() ?? self.eventLoop.makeSucceededVoidFuture()
            drained.whenComplete { _ in
                if let failure = delegate.writer?.failure {
                    self.laneEnded(lane, .failure(failure))
                } else {
                    self.laneEnded(lane, result.map { _ in })
                }
            }
        }
    }

    private func laneEnded(_ lane: Int, _ result: Result<Void, any Error>) {
        self.eventLoop.assertInEventLoop()
        self.helpers[lane] = nil
        let index = self.laneSource.removeValue(forKey: lane) ?? 0
        self.sources[index].lanes -= 1
        self.run.engine.limiter.release(host: self.sources[index].host)
        let byPlan = self.stoppedByPlan.remove(lane) != nil
        if let state = self.plan.lanes[lane], let speed = self.plan.speed(state, now: self.now) {
            self.sources[index].speed = speed
        }
        self.plan.laneEnded(lane)
        self.validated.remove(lane)
        if case .probing = self.sources[index].stage {
            // The first answer never came (or the connection failed): try again later.
            self.sources[index].stage = .untried
        }
        defer {
            // Without other lanes, the run's own request (to the end of the file) takes back
            // what it can.
            if self.refusal != nil, self.primaryRunning { self.plan.extend(0) }
            self.decidePrimaryWaiter()
        }
        switch result {
        case .success:
            self.sources[index].consecutiveFailures = 0
        case .failure(let error):
            if byPlan || self.stopped {
                break
            } else if let refusal = error as? SegmentExchange.Refusal {
                switch refusal {
                case .entityChanged(let reason) where index == 0:
                    let failure = URLError(.badServerResponse, userInfo: [NSLocalizedDescriptionKey: "the file changed on the server during the download (\(reason))"])
                    self.changed.withLock { $0 = failure }
                    self.stopped = true
                    for task in self.helpers.values { task.cancel() }
                    self.run.cancelCurrentExchange()
                case .entityChanged(let reason):
                    self.drop(index, reason: "the mirror's file changed (\(reason))")
                case .notUsable(let reason) where index == 0:
                    self.refuse(reason)
                case .notUsable(let reason), .mirrorDropped(let reason):
                    self.drop(index, reason: reason)
                case .reachedEnd:
                    break
                }
            } else {
                self.sources[index].consecutiveFailures += 1
                if self.sources[index].consecutiveFailures >= 3 {
                    let reason = "three connections in a row failed (\(error))"
                    if index == 0 { self.refuse(reason) } else { self.drop(index, reason: reason) }
                }
            }
        }
        self.updateLaneCount()
        self.fill()
        self.checkDone()
    }

    /// No more extra lanes on the primary: the run's own exchange (a request to the end of
    /// the file) takes back what it can, and mirrors go on.
    private func refuse(_ reason: String) {
        self.refusal = reason
        if self.primaryRunning { self.plan.extend(0) }
    }

    private func updateLaneCount() {
        let count = self.plan.lanes.count
        let reports = self.sources.map(\.report)
        self.snapshot.withLock {
            $0.lanes = count
            $0.sources = reports
        }
    }

    private func checkDone() {
        guard !self.primaryRunning, self.helpers.isEmpty, !self.waiters.isEmpty else { return }
        self.recheck?.cancel()
        self.recheck = nil
        let waiters = self.waiters
        self.waiters.removeAll()
        for waiter in waiters { waiter.succeed(()) }
    }

    /// What a lane's answer head means for the download (for ``SegmentExchange``): a mirror's
    /// first answer decides whether it is accepted; later ones are judged against the
    /// validators of the lane's source.
    func judge(lane: Int, status: Int, headers: HTTPHeaderFields, range: Range<Int64>) -> SegmentExchange.Refusal? {
        self.eventLoop.assertInEventLoop()
        guard let index = self.laneSource[lane] else { return .reachedEnd }
        let source = self.sources[index]
        if case .dropped(let reason) = source.stage { return .mirrorDropped(reason) }
        if case .probing = source.stage {
            switch MirrorRules.judgeFirstAnswer(status: status, headers: headers, asked: range, length: self.plan.length, primary: self.validators, policy: self.mirrorPolicy) {
            case .accepted(let ifRange, let validators):
                self.sources[index].stage = .accepted
                self.sources[index].ifRange = ifRange
                self.sources[index].validators = validators
                return nil
            case .dropped(let reason):
                return .mirrorDropped(reason)
            }
        }
        switch RangeResumeRules.judgeSegment(status: status, headers: headers, asked: range, length: self.plan.length, validators: source.validators) {
        case .usable: return nil
        case .entityChanged(let reason): return .entityChanged(reason)
        case .notUsable(let reason): return .notUsable(reason)
        }
    }
}
