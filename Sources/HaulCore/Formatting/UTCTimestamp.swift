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

    /// `date` to the nearest millisecond (as ICU's `SSS` rounds: a half up, toward later, also
    /// before 1970), or cut to the whole second (as `JSONEncoder`'s `.iso8601` writes it) when
    /// `wholeSeconds`.
    public init(_ date: Date, wholeSeconds: Bool = false) {
        // ms + 0.5 is exact below 2^52 ms (a half is a multiple of every smaller ulp).
        let scaled = wholeSeconds ? date.timeIntervalSince1970.rounded(.down) : (date.timeIntervalSince1970 * 1000 + 0.5).rounded(.down)
        let total = Int64(scaled) * (wholeSeconds ? 1000 : 1)
        let seconds = total >= 0 ? total / 1000 : (total - 999) / 1000
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let time = Int(seconds - days * 86_400)
        (self.year, self.month, self.day) = Self.civil(days: days)
        self.hour = time / 3_600
        self.minute = time / 60 % 60
        self.second = time % 60
        self.millisecond = Int(total - seconds * 1000)
    }

    /// The proleptic Gregorian date `days` after 1 January 1970, by arithmetic (H. Hinnant's
    /// `civil_from_days`): `gmtime_r` took glibc's time zone lock and ~500 instructions for
    /// every timestamp a log line or a stored row writes.
    static func civil(days: Int64) -> (year: Int, month: Int, day: Int) {
        let shifted = days + 719_468
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return (Int(yearOfEra + era * 400 + (month <= 2 ? 1 : 0)), Int(month), Int(day))
    }

    /// Appends `yyyy-MM-dd` `separator` `HH:mm:ss`, then `.SSS` when `milliseconds`.
    ///
    /// The text is made in a fixed buffer and appended once: digit by digit, each append to
    /// the array checked its uniqueness and capacity (~1,000 instructions a timestamp, and a
    /// queued file's row and log lines take several).
    public func write(to bytes: inout [UInt8], separator: UInt8, milliseconds: Bool) {
        guard (0..<10_000).contains(self.year), (0..<100).contains(self.month), (0..<100).contains(self.day),
              (0..<100).contains(self.hour), (0..<100).contains(self.minute), (0..<100).contains(self.second),
              (0..<1_000).contains(self.millisecond)
        else { return self.writeUnusual(to: &bytes, separator: separator, milliseconds: milliseconds) }
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 23) { text in
            func put(_ value: Int, _ count: Int, at start: Int) {
                var value = value
                for position in stride(from: start + count - 1, through: start, by: -1) {
                    text[position] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: value % 10)
                    value /= 10
                }
            }
            put(self.year, 4, at: 0)
            text[4] = UInt8(ascii: "-")
            put(self.month, 2, at: 5)
            text[7] = UInt8(ascii: "-")
            put(self.day, 2, at: 8)
            text[10] = separator
            put(self.hour, 2, at: 11)
            text[13] = UInt8(ascii: ":")
            put(self.minute, 2, at: 14)
            text[16] = UInt8(ascii: ":")
            put(self.second, 2, at: 17)
            text[19] = UInt8(ascii: ".")
            put(self.millisecond, 3, at: 20)
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: text[0..<(milliseconds ? 23 : 19)]))
        }
    }

    /// ``write(to:separator:milliseconds:)`` for a field that does not fit its digits (a year
    /// past 9999): that field is written whole.
    private func writeUnusual(to bytes: inout [UInt8], separator: UInt8, milliseconds: Bool) {
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

    /// `2026-11-23T10:15:00Z`: what `JSONEncoder`'s `.iso8601` writes, without the calendar and
    /// time zone machinery it brings up (ICU's time zone data: ~0.7 MiB resident in `haul get`).
    public static func iso8601(_ date: Date) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(20)
        UTCTimestamp(date, wholeSeconds: true).write(to: &bytes, separator: UInt8(ascii: "T"), milliseconds: false)
        bytes.append(UInt8(ascii: "Z"))
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The instant `text` names when it is exactly `yyyy-MM-ddTHH:mm:ssZ` (what ``iso8601(_:)``
    /// writes); `nil` for anything else, including real dates in other ISO 8601 forms.
    public static func parseISO8601(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        guard bytes.count == 20, bytes[19] == UInt8(ascii: "Z") else { return nil }
        return bytes.withUnsafeBufferPointer { wholeSeconds($0, separator: UInt8(ascii: "T")) }
    }

    /// The instant `text` names when it is exactly `yyyy-MM-dd HH:mm:ss.SSS` in UTC (what the
    /// store writes, GRDB's own format); `nil` for anything else. Reading a row's dates through
    /// a calendar cost more than the rest of the row.
    public static func parseStored(_ text: UnsafeBufferPointer<UInt8>) -> Date? {
        guard text.count == 23, text[19] == UInt8(ascii: "."), let millisecond = decimal(text[20..<23]),
              let whole = wholeSeconds(text, separator: UInt8(ascii: " "))
        else { return nil }
        return Date(timeIntervalSince1970: whole.timeIntervalSince1970 + Double(millisecond) / 1000)
    }

    /// The instant of `yyyy-MM-dd` `separator` `HH:mm:ss` at the start of `text` (what follows
    /// is the caller's), or `nil` when it is not that or names no real moment.
    private static func wholeSeconds(_ text: UnsafeBufferPointer<UInt8>, separator: UInt8) -> Date? {
        guard text.count >= 19, text[4] == UInt8(ascii: "-"), text[7] == UInt8(ascii: "-"), text[10] == separator,
              text[13] == UInt8(ascii: ":"), text[16] == UInt8(ascii: ":"),
              let year = decimal(text[0..<4]), let month = decimal(text[5..<7]), let day = decimal(text[8..<10]),
              let hour = decimal(text[11..<13]), let minute = decimal(text[14..<16]), let second = decimal(text[17..<19])
        else { return nil }
        return date(year: year, month: month, day: day, hour: hour, minute: minute, second: second)
    }

    /// The value of ASCII decimal digits, or `nil` when a byte is not one.
    static func decimal<Digits: Collection<UInt8>>(_ digits: Digits) -> Int? {
        var value = 0
        for byte in digits {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
        }
        return value
    }

    /// The instant of these UTC calendar fields (`month` 1-12; a leap second counts as :59), or
    /// `nil` when they name no real moment: hour 24, 31 February (which `timegm` would roll over
    /// to 3 March).
    static func date(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) -> Date? {
        guard (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61 else { return nil }
        var parts = tm()
        parts.tm_year = Int32(year - 1900)
        parts.tm_mon = Int32(month - 1)
        parts.tm_mday = Int32(day)
        parts.tm_hour = Int32(hour)
        parts.tm_min = Int32(minute)
        parts.tm_sec = Int32(min(second, 59))
        let seconds = timegm(&parts)
        guard parts.tm_mday == Int32(day), parts.tm_mon == Int32(month - 1) else { return nil }
        return Date(timeIntervalSince1970: TimeInterval(seconds))
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
