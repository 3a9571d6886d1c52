/// Byte ranges of one entity as sorted, disjoint, non-touching half-open ranges: the map of
/// what a segmented download has on disk.
///
/// Inserting merges with overlapping and adjacent ranges, so the set stays as short as the
/// number of holes in it. Encoded (in resume data) as a list of `[lower, upper]` pairs.
public struct ByteRangeSet: Sendable, Hashable, Codable, CustomStringConvertible {
    /// Sorted by lower bound; no two overlap or touch; none is empty.
    public private(set) var ranges: [Range<Int64>] = []

    public init() {}

    /// The union of `ranges` (in any order, overlapping or not).
    public init(_ ranges: some Sequence<Range<Int64>>) {
        for range in ranges { self.insert(range) }
    }

    public init(from decoder: any Decoder) throws {
        var container = try decoder.unkeyedContainer()
        while !container.isAtEnd {
            let pair = try container.decode([Int64].self)
            guard pair.count == 2, pair[0] >= 0, pair[0] <= pair[1] else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "a byte range is a pair [lower, upper] with 0 <= lower <= upper")
            }
            self.insert(pair[0]..<pair[1])
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.unkeyedContainer()
        for range in self.ranges { try container.encode([range.lowerBound, range.upperBound]) }
    }

    public var isEmpty: Bool { self.ranges.isEmpty }

    /// Bytes covered.
    public var byteCount: Int64 { self.ranges.reduce(0) { $0 + ($1.upperBound - $1.lowerBound) } }

    /// How many bytes from 0 on are covered without a hole.
    public var prefixLength: Int64 {
        guard let first = self.ranges.first, first.lowerBound == 0 else { return 0 }
        return first.upperBound
    }

    /// Adds `range`, merging it with the ranges it overlaps or touches.
    public mutating func insert(_ range: Range<Int64>) {
        guard !range.isEmpty else { return }
        // The first range that ends at or after `range` starts (it may touch or overlap it).
        let low = self.index(endingAtOrAfter: range.lowerBound)
        var merged = range
        var high = low
        while high < self.ranges.count, self.ranges[high].lowerBound <= merged.upperBound {
            merged = min(merged.lowerBound, self.ranges[high].lowerBound)..<max(merged.upperBound, self.ranges[high].upperBound)
            high += 1
        }
        if low < high {
            self.ranges.replaceSubrange(low..<high, with: [merged])
        } else {
            self.ranges.insert(merged, at: low)
        }
    }

    /// Removes every byte of `range` from the set.
    public mutating func remove(_ range: Range<Int64>) {
        guard !range.isEmpty else { return }
        var result: [Range<Int64>] = []
        result.reserveCapacity(self.ranges.count + 1)
        for existing in self.ranges {
            if existing.upperBound <= range.lowerBound || existing.lowerBound >= range.upperBound {
                result.append(existing)
                continue
            }
            if existing.lowerBound < range.lowerBound { result.append(existing.lowerBound..<range.lowerBound) }
            if existing.upperBound > range.upperBound { result.append(range.upperBound..<existing.upperBound) }
        }
        self.ranges = result
    }

    /// Whether every byte of `range` is in the set (an empty range always is).
    public func contains(_ range: Range<Int64>) -> Bool {
        guard !range.isEmpty else { return true }
        let index = self.index(endingAtOrAfter: range.lowerBound + 1)
        guard index < self.ranges.count else { return false }
        return self.ranges[index].lowerBound <= range.lowerBound && self.ranges[index].upperBound >= range.upperBound
    }

    /// The first covered byte at or after `offset`, if any.
    public func nextCovered(from offset: Int64) -> Int64? {
        let index = self.index(endingAtOrAfter: offset + 1)
        guard index < self.ranges.count else { return nil }
        return max(offset, self.ranges[index].lowerBound)
    }

    /// The holes of the set within `bounds`, in order.
    public func gaps(in bounds: Range<Int64>) -> [Range<Int64>] {
        var gaps: [Range<Int64>] = []
        var cursor = bounds.lowerBound
        for range in self.ranges where range.upperBound > bounds.lowerBound {
            if range.lowerBound >= bounds.upperBound { break }
            if range.lowerBound > cursor { gaps.append(cursor..<range.lowerBound) }
            cursor = max(cursor, range.upperBound)
        }
        if cursor < bounds.upperBound { gaps.append(cursor..<bounds.upperBound) }
        return gaps
    }

    /// `0-1048575,2097152-4194303` (inclusive, as HTTP ranges are written).
    public var description: String {
        self.ranges.map { "\($0.lowerBound)-\($0.upperBound - 1)" }.joined(separator: ",")
    }

    /// The index of the first range whose upper bound is at or after `offset` (binary search).
    private func index(endingAtOrAfter offset: Int64) -> Int {
        var low = 0
        var high = self.ranges.count
        while low < high {
            let middle = (low + high) / 2
            if self.ranges[middle].upperBound < offset { low = middle + 1 } else { high = middle }
        }
        return low
    }
}
