/// Who fetches which bytes of one segmented download, as a value type with no I/O: the engine
/// tells it what each connection received and wrote, and asks it what a free connection should
/// fetch next.
///
/// A *lane* is one connection's run over a range `[start, end)`: bytes arrive at `received`,
/// reach the disk at `written`. The plan's rules:
/// - a free connection first takes the largest hole no lane covers;
/// - with none, it *steals*: the lane expected to finish last (its remaining bytes over its
///   speed) is split in the middle of what it has not received yet, and the free connection
///   takes the second half (only when both halves are at least ``minimumSegment``);
/// - near the end, when nothing can be split, it *duplicates* the slowest lane's remainder when
///   that lane needs longer than ``endGameSeconds`` to finish: both fetch the same bytes (of the
///   same validated entity) and the first to write them wins; the other is told to stop.
///
/// Lane ends only shrink. `done` grows only with bytes on disk.
public struct SegmentPlan: Sendable {
    public struct Lane: Sendable, Hashable {
        public var start: Int64
        /// Bytes up to here arrived (queued for the disk or written).
        public var received: Int64
        /// Bytes up to here are on disk.
        public var written: Int64
        /// The lane stops here (exclusive); it may move down when another lane steals.
        public var end: Int64
        /// When the lane started (the caller's clock, in seconds).
        public var startedAt: Double
        /// The lane this one duplicates, or the one duplicating it.
        public var partner: Int?
        /// When its last byte arrived (the start before the first).
        public var lastReceivedAt: Double
        /// The current measuring window: since when, and the bytes received in it.
        var windowStart: Double
        var windowBytes: Int64 = 0
        /// Bytes per second over the last full window (`nil` before one ended).
        var recentSpeed: Double?

        init(start: Int64, end: Int64, now: Double) {
            self.start = start
            self.received = start
            self.written = start
            self.end = end
            self.startedAt = now
            self.lastReceivedAt = now
            self.windowStart = now
        }

        /// `count` bytes arrived at `now`: a window of at least ``SegmentPlan/speedWindow``
        /// seconds closes into ``recentSpeed``.
        mutating func measure(_ count: Int64, now: Double) {
            self.windowBytes += count
            let length = now - self.windowStart
            if length >= SegmentPlan.speedWindow {
                self.recentSpeed = Double(self.windowBytes) / length
                self.windowStart = now
                self.windowBytes = 0
            }
        }

        public var remaining: Int64 { max(0, self.end - self.received) }
    }

    /// A free connection's work: fetch `range` as lane `lane`.
    public struct Assignment: Sendable, Hashable {
        public var lane: Int
        public var range: Range<Int64>
        /// The lane whose remainder this one fetches too (end game), if any.
        public var duplicating: Int?
        /// The lane whose end moved down to `range.lowerBound` to make room for this one.
        public var shortened: Int?
    }

    /// The entity's length.
    public let length: Int64
    /// Bytes on disk.
    public private(set) var done: ByteRangeSet
    public private(set) var lanes: [Int: Lane] = [:]
    /// No lane is made or left shorter than this by a split.
    public let minimumSegment: Int64
    /// A lane expected to need longer than this is duplicated when nothing can be split.
    public let endGameSeconds: Double
    private var nextLane = 1
    /// A lane's speed is measured over windows this long (seconds): servers that throttle per
    /// connection often let the first second through faster (nginx's `limit_rate` burst, TCP
    /// slow start the other way), and a lifetime average would misjudge which lane ends last.
    static let speedWindow = 0.5

    public init(length: Int64, done: ByteRangeSet = ByteRangeSet(), minimumSegment: Int64 = 1 << 20, endGameSeconds: Double = 0.2) {
        precondition(length >= 0)
        self.length = length
        var kept = done
        kept.remove(length..<Int64.max)
        self.done = kept
        self.minimumSegment = max(1, minimumSegment)
        self.endGameSeconds = endGameSeconds
    }

    public var isComplete: Bool { self.done.byteCount == self.length }

    /// Bytes not on disk yet.
    public var missing: Int64 { self.length - self.done.byteCount }

    /// Lane 0: a request already running from `offset`, which covers bytes up to the next byte
    /// on disk (or the end).
    public mutating func addPrimary(at offset: Int64, now: Double) {
        let end = self.done.nextCovered(from: offset) ?? self.length
        self.lanes[0] = Lane(start: offset, end: max(offset, end), now: now)
    }

    /// What a free connection should fetch, or `nil` when nothing is worth another connection.
    public mutating func assign(now: Double) -> Assignment? {
        // 1. The largest hole no lane covers.
        if let hole = self.unassignedHoles().max(by: { $0.count < $1.count }) {
            return self.open(hole, now: now)
        }
        // 2. Steal half of what the lane expected to finish last has not received yet.
        let estimates = self.lanes.map { (id: $0.key, lane: $0.value, seconds: self.secondsLeft($0.value, now: now)) }
        let splittable = estimates.filter { $0.lane.partner == nil && $0.lane.remaining >= 2 * self.minimumSegment }
        if let victim = splittable.max(by: { ($0.seconds, $1.id) < ($1.seconds, $0.id) }) {
            let middle = victim.lane.received + victim.lane.remaining / 2
            let range = middle..<victim.lane.end
            self.lanes[victim.id]!.end = middle
            var assignment = self.open(range, now: now)
            assignment.shortened = victim.id
            return assignment
        }
        // 3. End game: fetch the slowest remainder a second time.
        // Only lanes whose speed is known: a lane that just started is not slow yet.
        // A pair whose both halves are slow (the copy landed on a slow connection too) gets
        // another copy; a copy that has not shown its speed yet is given time first.
        let slow = estimates.filter { estimate in
            guard estimate.lane.remaining > 0, self.speed(estimate.lane, now: now) != nil,
                estimate.seconds > self.duplicationThreshold(remaining: estimate.lane.remaining)
            else { return false }
            guard let partner = estimate.lane.partner.flatMap({ self.lanes[$0] }) else { return true }
            return self.speed(partner, now: now) != nil && self.secondsLeft(partner, now: now) > self.duplicationThreshold(remaining: partner.remaining)
        }
        if let victim = slow.max(by: { ($0.seconds, $1.id) < ($1.seconds, $0.id) }) {
            var assignment = self.open(victim.lane.received..<victim.lane.end, now: now)
            self.lanes[assignment.lane]!.partner = victim.id
            self.lanes[victim.id]!.partner = assignment.lane
            assignment.duplicating = victim.id
            return assignment
        }
        return nil
    }

    /// `count` bytes arrived for `lane`; how many of them it may queue for the disk (its end
    /// may have moved). When the answer is less than `count`, or the lane has reached its end,
    /// the lane should stop fetching.
    public mutating func received(_ lane: Int, count: Int64, now: Double? = nil) -> Int64 {
        guard var state = self.lanes[lane] else { return 0 }
        let allowed = max(0, min(count, state.end - state.received))
        state.received += allowed
        if let now, allowed > 0 {
            state.lastReceivedAt = now
            state.measure(allowed, now: now)
        }
        self.lanes[lane] = state
        return allowed
    }

    /// Whether `lane` has received everything it should (and can stop reading).
    public func hasReceivedAll(_ lane: Int) -> Bool {
        guard let state = self.lanes[lane] else { return true }
        return state.received >= state.end || self.done.contains(state.received..<state.end)
    }

    /// `count` bytes of `lane` reached the disk (in order, from its `written`). Returns the
    /// lanes that have nothing left to do and should stop now (this one when done, and a
    /// partner whose remainder these bytes covered).
    public mutating func written(_ lane: Int, count: Int64) -> [Int] {
        guard var state = self.lanes[lane], count > 0 else { return [] }
        self.done.insert(state.written..<(state.written + count))
        state.written += count
        self.lanes[lane] = state
        var finished: [Int] = []
        for (id, other) in self.lanes where self.done.contains(other.written..<other.end) {
            finished.append(id)
        }
        return finished.sorted()
    }

    /// Moves `lane`'s end as far as its request can go (an open-ended one, like lane 0's): up
    /// to the next byte on disk or claimed by another lane, or the end. Used when no other lane
    /// can take the rest.
    public mutating func extend(_ lane: Int) {
        guard var state = self.lanes[lane] else { return }
        var limit = self.done.nextCovered(from: state.received) ?? self.length
        for (id, other) in self.lanes where id != lane && other.written >= state.received && other.written < other.end {
            limit = min(limit, other.written)
        }
        state.end = max(state.end, limit)
        self.lanes[lane] = state
    }

    /// `lane` ended (finished, stopped or failed); what it did not write is free again.
    public mutating func laneEnded(_ lane: Int) {
        guard let state = self.lanes.removeValue(forKey: lane) else { return }
        if let partner = state.partner { self.lanes[partner]?.partner = nil }
    }

    /// The holes that no lane covers, in order.
    public func unassignedHoles() -> [Range<Int64>] {
        var covered = self.done
        for lane in self.lanes.values { covered.insert(lane.written..<lane.end) }
        return covered.gaps(in: 0..<self.length)
    }

    /// How long a lane with `remaining` bytes may still need before its rest is fetched a
    /// second time: ``endGameSeconds`` for a segment's worth or more, less for a smaller rest
    /// (a copy costs only those bytes; a server that holds the last few KiB of a response back
    /// — nginx sends in 2 MiB chunks under `limit_rate` — would otherwise cost a whole wait),
    /// never less than 20 ms.
    func duplicationThreshold(remaining: Int64) -> Double {
        max(0.02, self.endGameSeconds * min(1, Double(remaining) / Double(self.minimumSegment)))
    }

    /// Bytes per second of `lane` lately: over the last full window and the current one (so a
    /// lane that slows down or goes quiet shows it within a window); before a window ended, its
    /// average so far (`nil` before it has run a little).
    public func speed(_ lane: Lane, now: Double) -> Double? {
        if let recent = lane.recentSpeed {
            return (Double(lane.windowBytes) + recent * Self.speedWindow) / (max(0, now - lane.windowStart) + Self.speedWindow)
        }
        let elapsed = now - lane.startedAt
        guard elapsed >= 0.2, lane.received > lane.start else { return nil }
        return Double(lane.received - lane.start) / elapsed
    }

    /// How long `lane` will take to receive the rest, at its own speed (or, when it is new, at
    /// the mean speed of the others; as if it were infinitely slow when nothing is known),
    /// plus how long it has been silent: a lane that stalls (a server pausing it, a dead
    /// connection) looks slower the longer it stays silent.
    func secondsLeft(_ lane: Lane, now: Double) -> Double {
        guard lane.remaining > 0 else { return 0 }
        let silent = max(0, now - lane.lastReceivedAt)
        if let speed = self.speed(lane, now: now), speed > 0 { return Double(lane.remaining) / speed + silent }
        let speeds = self.lanes.values.compactMap { self.speed($0, now: now) }.filter { $0 > 0 }
        guard !speeds.isEmpty else { return Double(lane.remaining) }
        return Double(lane.remaining) / (speeds.reduce(0, +) / Double(speeds.count))
    }

    private mutating func open(_ range: Range<Int64>, now: Double) -> Assignment {
        let id = self.nextLane
        self.nextLane += 1
        self.lanes[id] = Lane(start: range.lowerBound, end: range.upperBound, now: now)
        return Assignment(lane: id, range: range)
    }
}
