import Foundation
import HaulCore
import Testing

@Suite("Byte range sets")
struct ByteRangeSetTests {
    @Test("Inserting merges overlapping and touching ranges; removing cuts holes")
    func insertAndRemove() {
        var set = ByteRangeSet()
        set.insert(10..<20)
        set.insert(30..<40)
        #expect(set.ranges == [10..<20, 30..<40])
        set.insert(20..<25)
        #expect(set.ranges == [10..<25, 30..<40], "touching ranges merge")
        set.insert(0..<5)
        set.insert(24..<31)
        #expect(set.ranges == [0..<5, 10..<40])
        set.insert(3..<12)
        #expect(set.ranges == [0..<40])
        #expect(set.byteCount == 40 && set.prefixLength == 40)
        set.remove(10..<20)
        #expect(set.ranges == [0..<10, 20..<40])
        set.remove(0..<100)
        #expect(set.isEmpty)
        set.insert(5..<5)
        #expect(set.isEmpty, "empty ranges are not kept")
    }

    @Test("contains, nextCovered, gaps and the prefix")
    func queries() {
        let set = ByteRangeSet([50..<60, 0..<10, 20..<30])
        #expect(set.ranges == [0..<10, 20..<30, 50..<60])
        #expect(set.contains(0..<10) && set.contains(22..<25) && set.contains(7..<7))
        #expect(!set.contains(5..<15) && !set.contains(10..<11) && !set.contains(59..<61))
        #expect(set.nextCovered(from: 10) == 20 && set.nextCovered(from: 25) == 25 && set.nextCovered(from: 60) == nil)
        #expect(set.gaps(in: 0..<70) == [10..<20, 30..<50, 60..<70])
        #expect(set.gaps(in: 25..<55) == [30..<50])
        #expect(set.prefixLength == 10)
        #expect(ByteRangeSet([5..<9]).prefixLength == 0)
        #expect(set.description == "0-9,20-29,50-59")
    }

    @Test("Random inserts agree with a bitmap")
    func randomAgainstBitmap() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            var set = ByteRangeSet()
            var bitmap = [Bool](repeating: false, count: 200)
            for _ in 0..<Int.random(in: 1...20, using: &generator) {
                let lower = Int.random(in: 0..<200, using: &generator)
                let upper = Int.random(in: lower...200, using: &generator)
                if Bool.random(using: &generator) {
                    set.insert(Int64(lower)..<Int64(upper))
                    for index in lower..<upper { bitmap[index] = true }
                } else {
                    set.remove(Int64(lower)..<Int64(upper))
                    for index in lower..<upper { bitmap[index] = false }
                }
            }
            #expect(set.byteCount == Int64(bitmap.filter { $0 }.count))
            for (a, b) in zip(set.ranges, set.ranges.dropFirst()) { #expect(a.upperBound < b.lowerBound, "sorted, disjoint, not touching") }
            for index in 0..<200 { #expect(set.contains(Int64(index)..<Int64(index + 1)) == bitmap[index]) }
        }
    }

    @Test("Encoded as [lower, upper] pairs; malformed pairs are refused")
    func coding() throws {
        let set = ByteRangeSet([0..<10, 20..<30])
        let data = try JSONEncoder().encode(set)
        #expect(String(decoding: data, as: UTF8.self) == "[[0,10],[20,30]]")
        #expect(try JSONDecoder().decode(ByteRangeSet.self, from: data) == set)
        #expect(try JSONDecoder().decode(ByteRangeSet.self, from: Data("[[20,30],[0,25]]".utf8)).ranges == [0..<30])
        for bad in ["[[5,1]]", "[[-1,4]]", "[[1]]", "[[1,2,3]]", "{}"] {
            #expect(throws: (any Error).self, "\(bad)") { try JSONDecoder().decode(ByteRangeSet.self, from: Data(bad.utf8)) }
        }
    }
}

private func assign(_ plan: inout SegmentPlan, now: Double) throws -> SegmentPlan.Assignment {
    let assignment = plan.assign(now: now)
    return try #require(assignment)
}

@Suite("Segment plans")
struct SegmentPlanTests {
    let mib: Int64 = 1 << 20

    @Test("A primary from 0 and three free connections: split into parts that cover the file once")
    func initialSplit() throws {
        var plan = SegmentPlan(length: 16 * mib)
        plan.addPrimary(at: 0, now: 0)
        var assignments: [SegmentPlan.Assignment] = []
        for _ in 0..<3 { assignments.append(try assign(&plan, now: 0)) }
        #expect(assignments[0].range == 8 * mib..<16 * mib && assignments[0].shortened == 0)
        #expect(plan.lanes[0]!.end == 4 * mib, "split again by the second")
        let ranges = plan.lanes.values.map { $0.start..<$0.end }.sorted { $0.lowerBound < $1.lowerBound }
        #expect(ranges.map(\.count) == [4, 4, 4, 4].map { Int($0 * mib) })
        #expect(ByteRangeSet(ranges).ranges == [0..<16 * mib])
        #expect(plan.unassignedHoles().isEmpty)
    }

    @Test("A file smaller than two segments stays on one connection; no end game before speeds are known")
    func smallFile() {
        var plan = SegmentPlan(length: mib + 5)
        plan.addPrimary(at: 0, now: 0)
        let first = plan.assign(now: 0)
        let later = plan.assign(now: 0.1)
        #expect(first == nil && later == nil)
    }

    @Test("A free connection steals half of the lane expected to finish last")
    func stealFromSlowest() throws {
        var plan = SegmentPlan(length: 40 * mib)
        plan.addPrimary(at: 0, now: 0)
        let second = try assign(&plan, now: 0)  // 20–40
        // After one second the primary did 10 MiB, the second lane only 1 MiB.
        _ = plan.received(0, count: 10 * mib)
        _ = plan.received(second.lane, count: mib)
        let third = try assign(&plan, now: 1)
        #expect(third.shortened == second.lane, "the slow lane (19 MiB at 1 MiB/s) loses half")
        #expect(third.range == (21 * mib + 19 * mib / 2)..<40 * mib)
        #expect(plan.lanes[second.lane]!.end == third.range.lowerBound)
    }

    @Test("Bytes past a lane's moved end are not taken; a lane knows when it has received all")
    func receivedIsCapped() throws {
        var plan = SegmentPlan(length: 8 * mib)
        plan.addPrimary(at: 0, now: 0)
        _ = try assign(&plan, now: 0)
        let first = plan.received(0, count: 3 * mib)
        let second = plan.received(0, count: 3 * mib)
        #expect(first == 3 * mib && second == mib, "the primary now ends at 4 MiB")
        #expect(plan.hasReceivedAll(0))
    }

    @Test("End game: the slow remainder is fetched twice and the first to write it stops the other")
    func endGame() throws {
        var plan = SegmentPlan(length: 4 * mib, minimumSegment: mib)
        plan.addPrimary(at: 0, now: 0)
        let second = try assign(&plan, now: 0)  // 2–4 MiB
        // The second lane finishes quickly; the primary crawls.
        _ = plan.received(second.lane, count: 2 * mib)
        let stopped = plan.written(second.lane, count: 2 * mib)
        #expect(stopped == [second.lane])
        plan.laneEnded(second.lane)
        _ = plan.received(0, count: mib / 4)
        _ = plan.written(0, count: mib / 4)
        // 1.75 MiB left at 0.25 MiB/s: 7 s; too short to split in two segments of 1 MiB.
        let duplicate = try assign(&plan, now: 1)
        #expect(duplicate.duplicating == 0 && duplicate.range == mib / 4..<2 * mib)
        let another = plan.assign(now: 1)
        #expect(another == nil, "one duplicate per lane")
        _ = plan.received(duplicate.lane, count: duplicate.range.upperBound - duplicate.range.lowerBound)
        let finished = plan.written(duplicate.lane, count: duplicate.range.upperBound - duplicate.range.lowerBound)
        #expect(finished == [0, duplicate.lane].sorted(), "the primary's remainder is on disk: it stops too")
        #expect(plan.isComplete)
    }

    @Test("End game: when the copy is slow too, another copy is tried; a silent lane counts as slow")
    func slowCopyAndSilence() throws {
        var plan = SegmentPlan(length: 4 * mib, minimumSegment: mib)
        plan.addPrimary(at: 0, now: 0)
        let second = try assign(&plan, now: 0)
        _ = plan.received(second.lane, count: 2 * mib, now: 0.5)
        _ = plan.written(second.lane, count: 2 * mib)
        plan.laneEnded(second.lane)
        _ = plan.received(0, count: mib / 4, now: 1)
        let copy = try assign(&plan, now: 1)
        #expect(copy.duplicating == 0)
        // A second later both crawl (64 KiB each): a third lane takes the same remainder.
        _ = plan.received(0, count: 64 << 10, now: 2)
        _ = plan.received(copy.lane, count: 64 << 10, now: 2)
        let third = try assign(&plan, now: 2)
        #expect(third.duplicating == 0 || third.duplicating == copy.lane)

        // Silence: a lane with a tiny remainder that stops sending is copied once it has been
        // quiet a little (a copy of 1,000 bytes costs nothing: 20 ms).
        var quiet = SegmentPlan(length: 3 * mib, minimumSegment: mib)
        quiet.addPrimary(at: 0, now: 0)
        let other = try assign(&quiet, now: 0)
        _ = quiet.received(other.lane, count: quiet.lanes[other.lane]!.remaining, now: 0.5)
        _ = quiet.written(other.lane, count: quiet.lanes[other.lane]!.end - quiet.lanes[other.lane]!.start)
        quiet.laneEnded(other.lane)
        _ = quiet.received(0, count: quiet.lanes[0]!.end - 1000, now: 0.5)
        let early = quiet.assign(now: 0.51)
        #expect(early == nil, "1,000 bytes at full speed: nothing to do yet")
        let late = try assign(&quiet, now: 0.55)
        #expect(late.duplicating == 0 && late.range.count == 1000, "silent for 50 ms: fetched again")

        // A segment's worth left waits the whole end-game threshold (0.2 s) before a copy.
        var big = SegmentPlan(length: 8 * mib, minimumSegment: mib)
        big.addPrimary(at: 0, now: 0)
        let half = try assign(&big, now: 0)
        _ = big.received(half.lane, count: big.lanes[half.lane]!.remaining, now: 0.5)
        _ = big.written(half.lane, count: big.lanes[half.lane]!.end - big.lanes[half.lane]!.start)
        big.laneEnded(half.lane)
        _ = big.received(0, count: big.lanes[0]!.end - mib, now: 0.5)
        #expect(big.assign(now: 0.51) == nil, "1 MiB at 6 MiB/s: about 0.17 s, not yet (a 1,000-byte rest would be copied by now)")
        let copied = try assign(&big, now: 0.9)
        #expect(copied.duplicating == 0 && copied.range.count == mib)
    }

    @Test("A lane that ends early gives its unwritten bytes back; a resumed plan skips what is on disk")
    func laneEndedAndResume() throws {
        var plan = SegmentPlan(length: 10 * mib, done: ByteRangeSet([0..<2 * mib, 6 * mib..<7 * mib]))
        plan.addPrimary(at: 2 * mib, now: 0)
        #expect(plan.lanes[0]!.end == 6 * mib, "the primary stops where bytes on disk begin")
        let tail = try assign(&plan, now: 0)
        #expect(tail.range == 7 * mib..<10 * mib && tail.shortened == nil, "the largest hole first")
        _ = plan.received(tail.lane, count: mib)
        _ = plan.written(tail.lane, count: mib)
        plan.laneEnded(tail.lane)
        #expect(plan.unassignedHoles() == [8 * mib..<10 * mib])
        #expect(plan.missing == 10 * mib - 4 * mib)
    }

    @Test("Simulated: random speeds, random failures; every byte written once per lane, all covered, done only when complete")
    func simulation() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<100 {
            let length = Int64.random(in: 1...(64 * mib), using: &generator)
            var plan = SegmentPlan(length: length, minimumSegment: mib / 2, endGameSeconds: 0.5)
            plan.addPrimary(at: 0, now: 0)
            var speeds: [Int: Int64] = [0: Int64.random(in: 64 << 10...(8 * mib), using: &generator)]
            var now = 0.0
            var steps = 0
            let connections = Int.random(in: 1...16, using: &generator)
            while !plan.isComplete, steps < 100_000 {
                steps += 1
                while plan.lanes.count < connections, let assignment = plan.assign(now: now) {
                    speeds[assignment.lane] = Int64.random(in: 64 << 10...(8 * mib), using: &generator)
                }
                now += 0.1
                for id in plan.lanes.keys.sorted() where plan.lanes[id] != nil {
                    if Int.random(in: 0..<200, using: &generator) == 0 {
                        plan.laneEnded(id)  // a reset
                        continue
                    }
                    let got = plan.received(id, count: speeds[id]! / 10)
                    for finished in plan.written(id, count: got) { plan.laneEnded(finished) }
                    if plan.lanes[id] != nil, plan.hasReceivedAll(id), plan.lanes[id]!.written >= plan.lanes[id]!.received {
                        plan.laneEnded(id)
                    }
                }
                if plan.lanes.isEmpty, !plan.isComplete {
                    guard let assignment = plan.assign(now: now) else {
                        Issue.record("stuck with \(plan.missing) bytes missing")
                        break
                    }
                    speeds[assignment.lane] = Int64.random(in: 64 << 10...(8 * mib), using: &generator)
                }
            }
            #expect(plan.isComplete, "length \(length), \(connections) connections")
            #expect(plan.done.ranges == (length > 0 ? [0..<length] : []))
        }
    }
}

@Suite("Segment maps shown")
struct SegmentMapDisplayTests {
    @Test("The bar marks whole, partial and missing cells")
    func bar() {
        let map = ByteRangeSet([0..<50, 75..<80])
        #expect(SegmentMapBar.render(map, length: 100, width: 10) == "█████··▒··")
        #expect(SegmentMapBar.render(ByteRangeSet([0..<100]), length: 100, width: 4) == "████")
        #expect(SegmentMapBar.render(ByteRangeSet(), length: 100, width: 3) == "···")
        #expect(SegmentMapBar.render(map, length: 0, width: 3) == "")
    }

    @Test("aria2's bitfield from a map: a bit per 1 MiB piece wholly on disk")
    func bitfieldFromMap() {
        let mib: Int64 = 1 << 20
        // Pieces 0, 2, 3 and the short last piece 9 are on disk.
        let map = ByteRangeSet([0..<mib, 2 * mib..<4 * mib + 5, 9 * mib..<9 * mib + 100])
        let (pieces, hex) = Aria2Status.bitfield(map: map, total: 9 * mib + 100)
        #expect(pieces == 10)
        #expect(hex == "b040")
        // A prefix gives what the prefix form gives.
        #expect(Aria2Status.bitfield(map: ByteRangeSet([0..<(5 * mib)]), total: 12 * mib) == Aria2Status.bitfield(done: 5 * mib, total: 12 * mib))
    }
}
