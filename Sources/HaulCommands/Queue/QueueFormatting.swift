import Foundation
import HaulCore

/// Renders queue listings for people: two sections like the seeds' two tabs.
enum QueueFormatting {
    static func table(_ downloads: [QueuedDownloadInfo], width: Int = 100) -> String {
        let inProgress = downloads.filter(\.state.isInProgress)
        let finished = downloads.filter { !$0.state.isInProgress }
        var lines: [String] = []
        lines.append("Downloading (\(inProgress.count))")
        if inProgress.isEmpty {
            lines.append("  (nothing)")
        } else {
            lines.append(self.row(["ID", "STATE", "DONE", "SIZE", "SPEED", "ETA", "NAME"]))
            for download in inProgress { lines.append(self.row(self.progressColumns(download))) }
        }
        lines.append("")
        lines.append("Finished (\(finished.count))")
        if finished.isEmpty {
            lines.append("  (nothing)")
        } else {
            lines.append(self.row(["ID", "STATE", "SIZE", "FINISHED", "NAME / REASON"], widths: self.finishedWidths))
            for download in finished {
                let detail = download.state == .complete ? (download.path ?? download.fileName ?? "") : "\(download.fileName ?? "")  \(download.errorMessage ?? "")"
                lines.append(self.row([
                    "\(download.id)", download.state.rawValue, ByteCountFormatting.bytes(download.totalBytes ?? download.bytesDone),
                    download.finishedAt.map(self.time) ?? "-", detail,
                ], widths: self.finishedWidths))
            }
        }
        return lines.map { $0.count > width ? String($0.prefix(width - 1)) + "…" : $0 }.joined(separator: "\n")
    }

    static func progressColumns(_ download: QueuedDownloadInfo) -> [String] {
        let percent = download.fraction.map { "\(Int($0 * 100))%" } ?? "-"
        let speed = download.state == .active ? download.speed.map { ByteCountFormatting.rate(bytesPerSecond: $0) } ?? "-" : "-"
        let eta = download.state == .active ? download.secondsRemaining.map { ByteCountFormatting.duration(seconds: $0) } ?? "-" : "-"
        var name = download.fileCount.map { "list of \($0) files (\(download.urls.first?.absoluteString ?? "")…)" } ?? download.fileName ?? download.urls.first?.absoluteString ?? ""
        if let runner = download.runner, download.state == .active { name += "  [\(runner)]" }
        if let message = download.errorMessage { name += "  (\(message))" }
        return [
            "\(download.id)", download.state.rawValue, percent,
            "\(ByteCountFormatting.bytes(download.bytesDone))/\(download.totalBytes.map(ByteCountFormatting.bytes) ?? "?")",
            speed, eta, name,
        ]
    }

    private static let progressWidths = [6, 9, 6, 22, 14, 9]
    private static let finishedWidths = [6, 9, 12, 21]

    static func row(_ columns: [String], widths: [Int] = progressWidths) -> String {
        var line = "  "
        for (index, column) in columns.enumerated() {
            if index < widths.count {
                line += column + String(repeating: " ", count: max(1, widths[index] - column.count))
            } else {
                line += column
            }
        }
        return line
    }

    /// A URL of the download, with what it contributes while the download runs segmented:
    /// `URL (12.0 MiB, 4 connections)` or `URL (dropped: reason)`.
    static func sourceLine(_ url: URL?, _ download: QueuedDownloadInfo) -> String {
        guard let url else { return "" }
        guard let source = download.sources?.first(where: { $0.url == url }) else { return url.absoluteString }
        if let reason = source.dropped { return "\(url.absoluteString) (dropped: \(reason))" }
        let connections = source.connections == 1 ? "1 connection" : "\(source.connections) connections"
        return "\(url.absoluteString) (\(ByteCountFormatting.bytes(source.bytes)), \(connections))"
    }

    /// A list download's files: the counts, then each failed file given (`#POSITION URL:
    /// reason`), and how many more failed.
    static func listFiles(counts: ListFileCounts, failed: [ListFileInfo]) -> String {
        var lines = ["files: \(counts.done) done, \(counts.failed) failed, \(counts.waiting) waiting (in the store; files in flight count as waiting)"]
        for file in failed { lines.append("  #\(file.position + 1) \(file.url.absoluteString): \(file.error ?? "failed")") }
        if counts.failed > failed.count { lines.append("  … and \(counts.failed - failed.count) more") }
        return lines.joined(separator: "\n")
    }

    static func details(_ download: QueuedDownloadInfo) -> String {
        var lines: [(String, String)] = [
            ("id", "\(download.id)"),
            ("gid", download.gid),
            ("state", download.state.rawValue),
            (download.fileCount == nil ? "url" : "first url", Self.sourceLine(download.urls.first, download)),
        ]
        if let files = download.fileCount { lines.append(("files", "\(files) (a list download: each file placed in the directory as it finishes)")) }
        for mirror in download.urls.dropFirst() { lines.append(("mirror", Self.sourceLine(mirror, download))) }
        lines.append(("directory", download.directory))
        lines.append(("name", download.fileName ?? "-"))
        if let path = download.path { lines.append((download.state == .complete ? "file" : "partial file", path)) }
        let total = download.totalBytes.map(ByteCountFormatting.bytes) ?? "unknown"
        lines.append(("progress", "\(ByteCountFormatting.bytes(download.bytesDone)) of \(total)" + (download.fraction.map { " (\(Int($0 * 100))%)" } ?? "")))
        if let runner = download.runner { lines.append(("daemon", runner)) }
        if let speed = download.speed { lines.append(("speed", ByteCountFormatting.rate(bytesPerSecond: speed))) }
        if let connections = download.connections { lines.append(("connections", String(connections))) }
        if let maximum = download.maximumConnections { lines.append(("max connections", String(maximum))) }
        if let map = download.segments, let total = download.totalBytes, download.state != .complete {
            lines.append(("map", SegmentMapBar.render(map, length: total, width: 50)))
            let ranges = map.ranges.prefix(8).map { "\($0.lowerBound)-\($0.upperBound - 1)" }.joined(separator: ", ")
            lines.append(("on disk", ranges + (map.ranges.count > 8 ? ", … (\(map.ranges.count) ranges)" : "")))
        }
        if let eta = download.secondsRemaining { lines.append(("eta", ByteCountFormatting.duration(seconds: eta))) }
        if let checksum = download.checksum { lines.append(("checksum", checksum)) }
        for header in download.requestHeaders ?? [] { lines.append(("header", header)) }
        for (name, value) in (download.options ?? [:]).sorted(by: { $0.key < $1.key }) { lines.append(("option", "\(name)=\(value)")) }
        if let limit = download.speedLimit { lines.append(("speed limit", ByteCountFormatting.rate(bytesPerSecond: Double(limit)))) }
        lines.append(("priority", "\(download.priority)"))
        lines.append(("added", self.time(download.createdAt)))
        if let started = download.startedAt { lines.append(("started", self.time(started))) }
        if let finished = download.finishedAt { lines.append(("finished", self.time(finished))) }
        if let error = download.errorMessage { lines.append(("error", error)) }
        return lines.map { "\($0.0):" + String(repeating: " ", count: max(1, 14 - $0.0.count)) + $0.1 }.joined(separator: "\n")
    }

    /// `haul daemon status`: the daemons sharing the queue and the downloads each runs.
    static func fleet(_ fleet: [DaemonPresence], this name: String?, store: String?) -> String {
        var lines: [String] = []
        if let store { lines.append("store: \(store)") }
        lines.append("daemons (\(fleet.count))")
        let widths = [24, 9, 21, 21]
        lines.append(self.row(["NAME", "PID", "STARTED", "SEEN", "DOWNLOADS"], widths: widths))
        for member in fleet {
            let shown = member.name == name ? "\(member.name) *" : member.name
            var downloads = member.downloads.isEmpty ? "-" : "\(member.downloads.count): " + member.downloads.prefix(20).map(String.init).joined(separator: " ")
            if member.downloads.count > 20 { downloads += " …" }
            lines.append(self.row([shown, "\(member.pid)", self.time(member.startedAt), self.time(member.seenAt), downloads], widths: widths))
        }
        return lines.joined(separator: "\n")
    }

    static func settings(_ settings: QueueSettings) -> String {
        let limit = settings.globalSpeedLimit == 0 ? "unlimited" : ByteCountFormatting.rate(bytesPerSecond: Double(settings.globalSpeedLimit))
        return """
            max-concurrent  \(settings.maximumConcurrentDownloads)
            max-per-host    \(settings.maximumConnectionsPerHost)
            speed-limit     \(limit)
            dir             \(settings.defaultDirectory)
            """
    }

    static func time(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"
        return formatter.string(from: date)
    }

    static func json<T: Encodable>(_ value: T) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return String(decoding: (try? encoder.encode(value)) ?? Data(), as: UTF8.self)
    }
}
