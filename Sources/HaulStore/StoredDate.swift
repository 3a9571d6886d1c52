import Foundation

/// Dates as the store writes them: GRDB's text format (`2026-11-23 10:15:00.123`, UTC, to the
/// nearest millisecond), written without a `DateFormatter` (ICU formatting was 7% of the cost of adding
/// 10,000 downloads). GRDB reads them back as it reads its own.
enum StoredDate {
    static func text(_ date: Date) -> String {
        // To the nearest millisecond, as ICU's `SSS` rounds.
        let totalMilliseconds = Int64((date.timeIntervalSince1970 * 1000).rounded())
        var seconds = time_t(totalMilliseconds >= 0 ? totalMilliseconds / 1000 : (totalMilliseconds - 999) / 1000)
        let milliseconds = Int(totalMilliseconds - Int64(seconds) * 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(23)
        func digits(_ value: Int, _ count: Int) {
            var divisor = count == 4 ? 1000 : count == 3 ? 100 : 10
            while divisor > 0 {
                bytes.append(UInt8(ascii: "0") + UInt8(value / divisor % 10))
                divisor /= 10
            }
        }
        digits(Int(parts.tm_year) + 1900, 4)
        bytes.append(UInt8(ascii: "-"))
        digits(Int(parts.tm_mon) + 1, 2)
        bytes.append(UInt8(ascii: "-"))
        digits(Int(parts.tm_mday), 2)
        bytes.append(UInt8(ascii: " "))
        digits(Int(parts.tm_hour), 2)
        bytes.append(UInt8(ascii: ":"))
        digits(Int(parts.tm_min), 2)
        bytes.append(UInt8(ascii: ":"))
        digits(Int(parts.tm_sec), 2)
        bytes.append(UInt8(ascii: "."))
        digits(milliseconds, 3)
        return String(decoding: bytes, as: UTF8.self)
    }
}
