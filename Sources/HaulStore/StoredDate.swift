import Foundation
import HaulCore

/// Dates as the store writes them: GRDB's text format (`2026-11-23 10:15:00.123`, UTC, to the
/// nearest millisecond), written without a `DateFormatter` (ICU formatting was 7% of the cost of adding
/// 10,000 downloads). GRDB reads them back as it reads its own.
enum StoredDate {
    static func text(_ date: Date) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(23)
        UTCTimestamp(date).write(to: &bytes, separator: UInt8(ascii: " "), milliseconds: true)
        return String(decoding: bytes, as: UTF8.self)
    }
}
