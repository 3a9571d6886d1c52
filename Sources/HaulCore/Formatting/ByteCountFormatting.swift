/// Human-readable sizes, rates and durations for progress output, in binary units (KiB, MiB)
/// as curl and aria2 print them.
public enum ByteCountFormatting {
    private static let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]

    /// `1536` → `"1.5 KiB"`, `42` → `"42 B"`.
    public static func bytes(_ count: Int64) -> String {
        guard count >= 1024 else { return "\(max(0, count)) B" }
        var value = Double(count)
        var unit = 0
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return "\(oneDecimal(value)) \(units[unit])"
    }

    /// A transfer rate: `"12.3 MiB/s"`.
    public static func rate(bytesPerSecond: Double) -> String {
        guard bytesPerSecond.isFinite, bytesPerSecond >= 0 else { return "-- B/s" }
        return bytes(Int64(bytesPerSecond)) + "/s"
    }

    /// A duration for an ETA: `"42s"`, `"3m05s"`, `"2h07m"`, `"3d04h"`.
    public static func duration(seconds: Double) -> String {
        guard seconds.isFinite, seconds >= 0 else { return "--" }
        let total = Int64(seconds.rounded(.up))
        let days = total / 86_400
        let hours = (total % 86_400) / 3600
        let minutes = (total % 3600) / 60
        let secs = total % 60
        if days > 0 { return "\(days)d\(twoDigits(hours))h" }
        if hours > 0 { return "\(hours)h\(twoDigits(minutes))m" }
        if minutes > 0 { return "\(minutes)m\(twoDigits(secs))s" }
        return "\(secs)s"
    }

    /// Parses a size such as `512K`, `10M`, `1.5G` or `4096` (bytes). Units are binary.
    public static func parseSize(_ text: String) -> Int64? {
        let trimmed = text.trimmingASCIIWhitespace().uppercased()
        guard !trimmed.isEmpty else { return nil }
        let multipliers: [(String, Double)] = [
            ("KIB", 1024), ("MIB", 1_048_576), ("GIB", 1_073_741_824),
            ("KB", 1024), ("MB", 1_048_576), ("GB", 1_073_741_824),
            ("K", 1024), ("M", 1_048_576), ("G", 1_073_741_824), ("B", 1),
        ]
        for (suffix, factor) in multipliers where trimmed.hasSuffix(suffix) {
            guard let number = Double(trimmed.dropLast(suffix.count)), number >= 0 else { return nil }
            return Int64(number * factor)
        }
        guard let number = Double(trimmed), number >= 0 else { return nil }
        return Int64(number)
    }

    private static func oneDecimal(_ value: Double) -> String {
        let tenths = Int64((value * 10).rounded())
        return "\(tenths / 10).\(tenths % 10)"
    }

    private static func twoDigits(_ value: Int64) -> String {
        value < 10 ? "0\(value)" : "\(value)"
    }
}
