/// A download's map of bytes on disk drawn as a bar of `width` cells, for `haul show`: `█` a
/// cell wholly on disk, `▒` partly, `·` not yet.
public enum SegmentMapBar {
    public static func render(_ map: ByteRangeSet, length: Int64, width: Int) -> String {
        guard length > 0, width > 0 else { return "" }
        var cells = ""
        cells.reserveCapacity(width * 3)
        for cell in 0..<width {
            let start = length * Int64(cell) / Int64(width)
            let end = max(start + 1, length * Int64(cell + 1) / Int64(width))
            let range = start..<min(end, length)
            if map.contains(range) {
                cells += "█"
            } else if let next = map.nextCovered(from: range.lowerBound), next < range.upperBound {
                cells += "▒"
            } else {
                cells += "·"
            }
        }
        return cells
    }
}
