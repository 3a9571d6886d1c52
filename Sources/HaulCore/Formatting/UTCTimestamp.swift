import Foundation

/// A date's UTC calendar fields, for date text written by hand where a `DateFormatter` costs
/// too much per call: `JSONWriter`'s ISO 8601 and the store's GRDB text format.
public struct UTCTimestamp: Sendable, Hashable {
    public var year: Int
    public var month: Int
    public var day: Int
    public var hour: Int
    public var minute: Int
    public var second: Int
    public var millisecond: Int

    /// `date` to the nearest millisecond (as ICU's `SSS` rounds), or cut to the whole second
    /// (as `JSONEncoder`'s `.iso8601` writes it) when `wholeSeconds`.
    public init(_ date: Date, wholeSeconds: Bool = false) {
        let unit: Double = wholeSeconds ? 1 : 1000
        let scaled = (date.timeIntervalSince1970 * unit).rounded(wholeSeconds ? .down : .toNearestOrAwayFromZero)
        let total = Int64(scaled) * (wholeSeconds ? 1000 : 1)
        var seconds = time_t(total >= 0 ? total / 1000 : (total - 999) / 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        self.year = Int(parts.tm_year) + 1900
        self.month = Int(parts.tm_mon) + 1
        self.day = Int(parts.tm_mday)
        self.hour = Int(parts.tm_hour)
        self.minute = Int(parts.tm_min)
        self.second = Int(parts.tm_sec)
        self.millisecond = Int(total - Int64(seconds) * 1000)
    }

    /// Appends `yyyy-MM-dd` `separator` `HH:mm:ss`, then `.SSS` when `milliseconds`.
    public func write(to bytes: inout [UInt8], separator: UInt8, milliseconds: Bool) {
        Self.digits(self.year, 4, into: &bytes)
        bytes.append(UInt8(ascii: "-"))
        Self.digits(self.month, 2, into: &bytes)
        bytes.append(UInt8(ascii: "-"))
        Self.digits(self.day, 2, into: &bytes)
        bytes.append(separator)
        Self.digits(self.hour, 2, into: &bytes)
        bytes.append(UInt8(ascii: ":"))
        Self.digits(self.minute, 2, into: &bytes)
        bytes.append(UInt8(ascii: ":"))
        Self.digits(self.second, 2, into: &bytes)
        if milliseconds {
            bytes.append(UInt8(ascii: "."))
            Self.digits(self.millisecond, 3, into: &bytes)
        }
    }

    /// `value` in exactly `count` digits; a value that does not fit is written whole.
    private static func digits(_ value: Int, _ count: Int, into bytes: inout [UInt8]) {
        let limit = count == 4 ? 10_000 : count == 3 ? 1_000 : 100
        guard value >= 0, value < limit else { return bytes.append(contentsOf: String(value).utf8) }
        var divisor = limit / 10
        while divisor > 0 {
            bytes.append(UInt8(ascii: "0") + UInt8(value / divisor % 10))
            divisor /= 10
        }
    }
}
