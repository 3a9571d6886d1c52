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
/// Created when the run's exchange has a response worth splitting (a resumable entity of known
/// length). Extra connections start once the partial file is open, each taking a slot of the
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
    let url: URL
    let headers: HTTPHeaders
    let validators: EntityValidators
    let ifRange: String
    let path: String
    let host: String
    /// Lanes at once, the run's own included.
    let budget: Int
    let tlsConfiguration: TLSConfiguration?
    private var plan: SegmentPlan
    private var helpers: [Int: HTTPClient.Task<Void>] = [:]
    /// Lanes told to stop by the plan (their end is not a failure).
    private var stoppedByPlan: Set<Int> = []
    private var fileReady = false
    private var stopped = false
    private var primaryRunning = true
    /// The run's own exchange received everything its lane needs.
    private(set) var primaryLaneDone = false
    private var consecutiveFailures = 0
    /// Why no more extra lanes are started, if so.
    private(set) var refusal: String?
    /// The entity changed under the download: every lane stops (any thread may ask).
    var entityChanged: URLError? { self.changed.withLock { $0 } }
    private let changed = Mutex<URLError?>(nil)
    private var waiters: [EventLoopPromise<Void>] = []
    /// The next look at the plan while connections are free.
    private var recheck: Scheduled<Void>?
    /// Lanes whose answer head was checked and found usable.
    private var validated: Set<Int> = []
    /// The run's own exchange at its lane's end, waiting to learn whether the lane after it
    /// delivers (stop) or not (go on: its request runs to the end of the file).
    private var primaryWaiter: EventLoopPromise<Bool>?
    private let origin = NIODeadline.now()

    private let snapshot: Mutex<(map: ByteRangeSet, lanes: Int)>

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
        tlsConfiguration: TLSConfiguration?
    ) {
        self.run = run
        self.eventLoop = run.eventLoop
        self.url = url
        var headers = HTTPHeaders(requestHeaders.fields.map { ($0.name, $0.value) })
        headers.remove(name: "Range")
        headers.remove(name: "If-Range")
        self.headers = headers
        self.validators = validators
        self.ifRange = validators.ifRangeValue ?? ""
        self.path = path
        self.host = TransferRun.hostKey(url)
        self.budget = budget
        self.tlsConfiguration = tlsConfiguration
        self.length = length
        var plan = SegmentPlan(length: length, done: done, minimumSegment: minimumSegment)
        plan.addPrimary(at: primaryOffset, now: 0)
        self.plan = plan
        self.snapshot = Mutex((plan.done, 1))
    }

    private var now: Double { Double((NIODeadline.now() - self.origin).nanoseconds) / 1e9 }

    /// The bytes on disk (a snapshot, any thread).
    var map: ByteRangeSet { self.snapshot.withLock { $0.map } }
    var doneBytes: Int64 { self.snapshot.withLock { $0.map.byteCount } }
    /// Connections at work now, the run's own included.
    var laneCount: Int { self.snapshot.withLock { $0.lanes } }
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
        self.snapshot.withLock { $0.map = done }
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
        guard self.fileReady, !self.stopped, self.refusal == nil, self.entityChanged == nil, !self.plan.isComplete else { return }
        // Plan every free connection first, then send: a lane split by a later assignment of
        // this round asks only for its final range (no connection is cut right after opening).
        var assignments: [SegmentPlan.Assignment] = []
        while self.plan.lanes.count < self.budget {
            guard self.run.engine.limiter.tryAcquire(host: self.host) else { break }
            guard let assignment = self.plan.assign(now: self.now) else {
                self.run.engine.limiter.release(host: self.host)
                break
            }
            assignments.append(assignment)
        }
        for var assignment in assignments {
            if let end = self.plan.lanes[assignment.lane]?.end { assignment.range = assignment.range.lowerBound..<end }
            self.start(assignment)
        }
        self.updateLaneCount()
        // With connections to spare, look again soon: a lane that goes silent is worth
        // fetching a second time even when no byte arrives anywhere to wake the plan up.
        if self.plan.lanes.count < self.budget, !self.plan.lanes.isEmpty, self.recheck == nil {
            self.recheck = self.eventLoop.scheduleTask(in: .milliseconds(50)) {
                self.recheck = nil
                self.fill()
            }
        }
    }

    private func start(_ assignment: SegmentPlan.Assignment) {
        let lane = assignment.lane
        let range = assignment.range
        var headers = self.headers
        headers.replaceOrAdd(name: "Range", value: "bytes=\(range.lowerBound)-\(range.upperBound - 1)")
        headers.replaceOrAdd(name: "If-Range", value: self.ifRange)
        let request: HTTPClient.Request
        do {
            request = try HTTPClient.Request(url: self.url, method: .GET, headers: headers, tlsConfiguration: self.tlsConfiguration)
        } catch {
            self.laneEnded(lane, .failure(error))
            return
        }
        let delegate = SegmentExchange(group: self, lane: lane, range: range)
        let (client, _, _) = self.run.engine.client(for: self.url, decodes: false)
        let task = client.execute(request: request, delegate: delegate, eventLoop: .indifferent)
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
        self.run.engine.limiter.release(host: self.host)
        let byPlan = self.stoppedByPlan.remove(lane) != nil
        self.plan.laneEnded(lane)
        self.validated.remove(lane)
        defer {
            // Without other lanes, the run's own request (to the end of the file) takes back
            // what it can.
            if self.refusal != nil, self.primaryRunning { self.plan.extend(0) }
            self.decidePrimaryWaiter()
        }
        switch result {
        case .success:
            self.consecutiveFailures = 0
        case .failure(let error):
            if byPlan || self.stopped {
                break
            } else if let refusal = error as? SegmentExchange.Refusal {
                switch refusal {
                case .entityChanged(let reason):
                    let failure = URLError(.badServerResponse, userInfo: [NSLocalizedDescriptionKey: "the file changed on the server during the download (\(reason))"])
                    self.changed.withLock { $0 = failure }
                    self.stopped = true
                    for task in self.helpers.values { task.cancel() }
                    self.run.cancelCurrentExchange()
                case .notUsable(let reason):
                    self.refuse(reason)
                case .reachedEnd:
                    break
                }
            } else {
                self.consecutiveFailures += 1
                if self.consecutiveFailures >= 3 { self.refuse("three extra connections in a row failed (\(error))") }
            }
        }
        self.updateLaneCount()
        self.fill()
        self.checkDone()
    }

    /// No more extra lanes: the run's own exchange (a request to the end of the file) takes
    /// back what it can.
    private func refuse(_ reason: String) {
        self.refusal = reason
        if self.primaryRunning { self.plan.extend(0) }
    }

    private func updateLaneCount() {
        let count = self.plan.lanes.count
        self.snapshot.withLock { $0.lanes = count }
    }

    private func checkDone() {
        guard !self.primaryRunning, self.helpers.isEmpty, !self.waiters.isEmpty else { return }
        self.recheck?.cancel()
        self.recheck = nil
        let waiters = self.waiters
        self.waiters.removeAll()
        for waiter in waiters { waiter.succeed(()) }
    }

    /// What a lane's answer head means for the download (for ``SegmentExchange``).
    func judge(status: Int, headers: HTTPHeaderFields, range: Range<Int64>) -> SegmentExchange.Refusal? {
        switch RangeResumeRules.judgeSegment(status: status, headers: headers, asked: range, length: self.plan.length, validators: self.validators) {
        case .usable: return nil
        case .entityChanged(let reason): return .entityChanged(reason)
        case .notUsable(let reason): return .notUsable(reason)
        }
    }
}

/// One extra lane's exchange: checks the `206`, queues the bytes that belong to the lane for
/// the file (positioned writes through a ``FileBodyWriter`` of its own on the shared partial
/// file), honours the run's speed limits, and ends early once the lane has all it needs.
final class SegmentExchange: HTTPClientResponseDelegate, @unchecked Sendable {
    // @unchecked: AsyncHTTPClient calls a delegate on its event loop, one call at a time.
    typealias Response = Void

    enum Refusal: Error {
        case entityChanged(String)
        case notUsable(String)
        /// The lane has what it needs (not a failure).
        case reachedEnd
    }

    let group: SegmentGroup
    let lane: Int
    let range: Range<Int64>
    private(set) var writer: FileBodyWriter?

    init(group: SegmentGroup, lane: Int, range: Range<Int64>) {
        self.group = group
        self.lane = lane
        self.range = range
    }

    func didReceiveHead(task: HTTPClient.Task<Void>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        let headers = HTTPHeaderFields(head.headers.map { ($0.name, $0.value) })
        if let refusal = self.group.judge(status: Int(head.status.code), headers: headers, range: self.range) {
            return task.eventLoop.makeFailedFuture(refusal)
        }
        self.group.laneValidated(self.lane)
        let run = self.group.run
        let path = self.group.path
        let group = self.group
        let lane = self.lane
        self.writer = FileBodyWriter(
            open: { () throws(URLError) -> PartialFile in try run.openFile(path: path) },
            offset: self.range.lowerBound,
            eventLoop: group.eventLoop,
            pool: run.engine.fileIOPool
        ) { count in
            group.written(lane, count: count)
        }
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func didReceiveBodyPart(task: HTTPClient.Task<Void>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        guard let writer = self.writer else { return task.eventLoop.makeSucceededVoidFuture() }
        let allowed = self.group.received(self.lane, count: buffer.readableBytes)
        var room: EventLoopFuture<Void>?
        if allowed > 0 {
            room = writer.enqueue(allowed == buffer.readableBytes ? buffer : buffer.getSlice(at: buffer.readerIndex, length: allowed)!)
        }
        if self.group.hasReceivedAll(self.lane) {
            return task.eventLoop.makeFailedFuture(Refusal.reachedEnd)
        }
        return self.group.run.readOn(after: allowed, room: room, on: task.eventLoop)
    }

    func didFinishRequest(task: HTTPClient.Task<Void>) throws {
        guard self.writer != nil else { throw Refusal.notUsable("no answer") }
    }
}

