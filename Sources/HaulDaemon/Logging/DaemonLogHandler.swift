import Foundation
import HaulCore
import Logging

/// hauld's log lines on standard error: `2026-11-26T04:48:22.123Z info hauld: message key=value`,
/// in UTC, each line one `write(2)` (lines of different threads never mix).
///
/// swift-log's `StreamLogHandler` formats each line's time through the C library's local-time
/// and `strftime` machinery and writes through a locked `FILE`: a fifth of what recording a
/// small file's end cost hauld's queue (1,000 × 16 KiB, one line each). Here the line is bytes
/// put together by hand.
public struct DaemonLogHandler: LogHandler {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    private let label: String
    private let descriptor: Int32

    /// A handler for the logger labelled `label`, writing to `descriptor` (standard error unless
    /// told otherwise).
    public init(label: String, descriptor: Int32 = STDERR_FILENO, metadataProvider: Logger.MetadataProvider? = nil) {
        self.label = label
        self.descriptor = descriptor
        self.metadataProvider = metadataProvider
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.metadata[key] }
        set { self.metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var line: [UInt8] = []
        line.reserveCapacity(160)
        Self.appendLine(
            to: &line,
            date: Date(),
            level: event.level,
            label: self.label,
            message: event.message.description,
            metadata: self.mergedMetadata(event.metadata)
        )
        Self.writeAll(line, to: self.descriptor)
    }

    /// The handler's own metadata, then the provider's, then the call's (later wins).
    private func mergedMetadata(_ call: Logger.Metadata?) -> Logger.Metadata {
        var merged = self.metadata
        if let provided = self.metadataProvider?.get() { merged.merge(provided) { $1 } }
        if let call { merged.merge(call) { $1 } }
        return merged
    }

    /// Appends one line: the UTC time to the millisecond, the level, the label, the message
    /// and the metadata sorted by key.
    static func appendLine(
        to line: inout [UInt8],
        date: Date,
        level: Logger.Level,
        label: String,
        message: String,
        metadata: Logger.Metadata
    ) {
        UTCTimestamp(date).write(to: &line, separator: UInt8(ascii: "T"), milliseconds: true)
        line.append(UInt8(ascii: "Z"))
        line.append(UInt8(ascii: " "))
        line.append(contentsOf: level.rawValue.utf8)
        line.append(UInt8(ascii: " "))
        line.append(contentsOf: label.utf8)
        line.append(UInt8(ascii: ":"))
        line.append(UInt8(ascii: " "))
        line.append(contentsOf: message.utf8)
        for key in metadata.keys.sorted() {
            line.append(UInt8(ascii: " "))
            line.append(contentsOf: key.utf8)
            line.append(UInt8(ascii: "="))
            line.append(contentsOf: metadata[key]!.description.utf8)
        }
        line.append(UInt8(ascii: "\n"))
    }

    /// Writes all of `bytes` (a pipe or file may take them in parts; interrupted writes are
    /// repeated). A log line that cannot be written is dropped: there is nowhere to say so.
    static func writeAll(_ bytes: [UInt8], to descriptor: Int32) {
        bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if written > 0 {
                    offset += written
                } else if written < 0, errno == EINTR {
                    continue
                } else {
                    return
                }
            }
        }
    }
}
