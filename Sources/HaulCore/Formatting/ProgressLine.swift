/// Renders the one-line progress display of `haul get`:
/// `name  45% [=======>        ] 450.0 MiB/1.0 GiB  112.4 MiB/s  ETA 5s`.
public enum ProgressLine {
    /// - Parameters:
    ///   - name: the file name, shortened to fit.
    ///   - received: bytes of the entity on disk.
    ///   - expected: the entity length, if known.
    ///   - bytesPerSecond: the current rate, if known.
    ///   - connections: connections fetching it, shown when more than one (`x8`).
    ///   - width: the terminal width in columns.
    public static func render(
        name: String,
        received: Int64,
        expected: Int64?,
        bytesPerSecond: Double?,
        connections: Int = 1,
        width: Int
    ) -> String {
        var rate = bytesPerSecond.map { ByteCountFormatting.rate(bytesPerSecond: $0) } ?? "-- B/s"
        if connections > 1 { rate += " x\(connections)" }
        var right: String
        var percentText = ""
        var fraction: Double?
        if let expected, expected > 0 {
            let ratio = min(1, Double(received) / Double(expected))
            fraction = ratio
            percentText = "\(Int(ratio * 100))%"
            let eta: String
            if let bytesPerSecond, bytesPerSecond > 0 {
                eta = ByteCountFormatting.duration(seconds: Double(max(0, expected - received)) / bytesPerSecond)
            } else {
                eta = "--"
            }
            right = "\(ByteCountFormatting.bytes(received))/\(ByteCountFormatting.bytes(expected))  \(rate)  ETA \(eta)"
        } else {
            right = "\(ByteCountFormatting.bytes(received))  \(rate)"
        }
        let nameWidth = min(max(8, width / 4), 32)
        let shownName = name.count > nameWidth ? String(name.prefix(nameWidth - 1)) + "…" : name
        let paddedName = shownName + String(repeating: " ", count: max(0, nameWidth - shownName.count))
        let fixed = paddedName.count + 1 + 5 + right.count + 4
        let barWidth = width - fixed
        var line = paddedName + " " + String(repeating: " ", count: max(0, 4 - percentText.count)) + percentText
        if barWidth >= 10, let fraction {
            let filled = Int(Double(barWidth) * fraction)
            let arrow = filled < barWidth ? ">" : ""
            let bar = String(repeating: "=", count: max(0, filled - arrow.count)) + arrow
            line += " [" + bar + String(repeating: " ", count: max(0, barWidth - bar.count)) + "]"
        }
        line += " " + right
        return line.count > width ? String(line.prefix(width)) : line
    }
}
