import Foundation
import Synchronization

/// Parses and formats HTTP dates (RFC 9110 §5.6.7): IMF-fixdate, plus the obsolete RFC 850 and
/// asctime forms that recipients must accept.
///
/// IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`, what servers send) is read and written by
/// hand: a `DateFormatter` made per call cost about 0.3 ms, on every cached response and
/// cookie. The obsolete forms go through formatters made once and shared under a lock.
public enum HTTPDate {
    private static let obsoleteFormats = [
        "EEEE, dd-MMM-yy HH:mm:ss zzz",
        "EEE MMM d HH:mm:ss yyyy",
        // IMF-fixdate with a zone other than GMT or odd spacing: the formatter's leniency.
        "EEE, dd MMM yyyy HH:mm:ss zzz",
    ]

    private static let formatters: Mutex<[DateFormatter]> = Mutex(Self.obsoleteFormats.map { format in
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = format
        return formatter
    })

    private static let months: [[UInt8]] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"].map { Array($0.utf8) }
    private static let weekdays: [[UInt8]] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"].map { Array($0.utf8) }

    /// Returns the instant `text` names, or `nil` if it is not an HTTP date.
    public static func parse(_ text: String) -> Date? {
        let trimmed = text.trimmingASCIIWhitespace()
        if let date = Self.parseIMFFixdate(Array(trimmed.utf8)) { return date }
        // An HTTP date is short printable ASCII. Anything else never reaches DateFormatter, which
        // traps on some non-ASCII input (found by fuzzing: "Incorrect range CFRange").
        guard trimmed.utf8.count <= 64, trimmed.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else { return nil }
        return Self.formatters.withLock { formatters in
            for formatter in formatters {
                if let date = formatter.date(from: trimmed) { return date }
            }
            return nil
        }
    }

    /// `Sun, 06 Nov 1994 08:49:37 GMT` exactly (29 bytes), or `nil`.
    static func parseIMFFixdate(_ bytes: [UInt8]) -> Date? {
        guard bytes.count == 29, bytes[3] == UInt8(ascii: ","), bytes[4] == 0x20, bytes[7] == 0x20, bytes[11] == 0x20,
            bytes[16] == 0x20, bytes[19] == UInt8(ascii: ":"), bytes[22] == UInt8(ascii: ":"), bytes[25] == 0x20,
            bytes[26...28].elementsEqual("GMT".utf8), Self.weekdays.contains(where: { $0.elementsEqual(bytes[0..<3]) }),
            let month = Self.months.firstIndex(where: { $0.elementsEqual(bytes[8..<11]) })
        else { return nil }
        guard let day = UTCTimestamp.decimal(bytes[5..<7]), let year = UTCTimestamp.decimal(bytes[12..<16]),
              let hour = UTCTimestamp.decimal(bytes[17..<19]), let minute = UTCTimestamp.decimal(bytes[20..<22]),
              let second = UTCTimestamp.decimal(bytes[23..<25])
        else { return nil }
        return UTCTimestamp.date(year: year, month: month + 1, day: day, hour: hour, minute: minute, second: second)
    }

    /// Formats `date` as an IMF-fixdate, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
    public static func format(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(29)
        func two(_ value: Int32) {
            bytes.append(UInt8(ascii: "0") + UInt8(value / 10 % 10))
            bytes.append(UInt8(ascii: "0") + UInt8(value % 10))
        }
        bytes += Self.weekdays[Int(parts.tm_wday)]
        bytes += Array(", ".utf8)
        two(parts.tm_mday)
        bytes.append(0x20)
        bytes += Self.months[Int(parts.tm_mon)]
        bytes.append(0x20)
        let year = parts.tm_year + 1900
        two(year / 100)
        two(year % 100)
        bytes.append(0x20)
        two(parts.tm_hour)
        bytes.append(UInt8(ascii: ":"))
        two(parts.tm_min)
        bytes.append(UInt8(ascii: ":"))
        two(parts.tm_sec)
        bytes += Array(" GMT".utf8)
        return String(decoding: bytes, as: UTF8.self)
    }
}
