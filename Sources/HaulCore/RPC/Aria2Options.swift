import Foundation

/// The 16-hex-digit ids aria2's RPC names downloads by.
public enum DownloadGID {
    /// `text` lower-cased when it is 16 hex digits, else `nil`.
    public static func normalized(_ text: String) -> String? {
        let utf8 = text.utf8
        guard utf8.count == 16, utf8.allSatisfy({ ($0 >= 48 && $0 <= 57) || ($0 | 0x20 >= 97 && $0 | 0x20 <= 102) }) else { return nil }
        return text.lowercased()
    }

    /// A random id (never all zeros).
    public static func random() -> String {
        var value: UInt64 = 0
        while value == 0 { value = UInt64.random(in: 1...UInt64.max) }
        return Self.format(value)
    }

    /// `count` random ids (never all zeros) from one read of the system's random source: a
    /// batch of 1,000 to add made a `getrandom` call for each (~0.35 ms of the add, before any
    /// of them could start).
    public static func random(count: Int) -> [String] {
        var values = [UInt64](repeating: 0, count: count)
        values.withUnsafeMutableBytes { bytes in
            if let base = bytes.baseAddress { arc4random_buf(base, bytes.count) }
        }
        return values.map { $0 == 0 ? Self.random() : Self.format($0) }
    }

    /// `value` in 16 lower-case hex digits, zero-padded.
    public static func format(_ value: UInt64) -> String {
        String(unsafeUninitializedCapacity: 16) { text in
            let digits: StaticString = "0123456789abcdef"
            for position in 0..<16 {
                text[position] = digits.utf8Start[Int(truncatingIfNeeded: (value >> UInt64(60 - 4 * position)) & 0xF)]
            }
            return 16
        }
    }
}

/// aria2's options as the RPC carries them (`{"dir": "/srv", "split": "4", "header": [...]}`):
/// which Haul acts on, which it keeps for `getOption`, and what is wrong with a value.
public enum Aria2Options {
    /// Options of one download that Haul acts on.
    public static let acted: Set<String> = [
        "dir", "out", "checksum", "max-download-limit", "header", "referer", "user-agent", "pause", "gid",
    ]

    /// Options of one download that are recorded (and answered by `getOption`) but do not yet
    /// change how Haul transfers: connection counts wait for segmented downloads.
    public static let recorded: Set<String> = [
        "split", "max-connection-per-server", "min-split-size", "max-tries", "retry-wait", "timeout", "connect-timeout",
        "continue", "allow-overwrite", "auto-file-renaming", "always-resume", "lowest-speed-limit",
        "max-file-not-found", "remote-time", "conditional-get", "file-allocation", "piece-length",
        "http-accept-gzip", "http-no-cache", "check-certificate", "all-proxy", "http-proxy", "https-proxy",
        "max-resume-failure-tries", "stream-piece-selector", "uri-selector",
    ]

    /// Global options `changeGlobalOption` applies, with the setting each changes.
    public static let globalSettings: [String: String] = [
        "max-concurrent-downloads": "max-concurrent",
        "max-overall-download-limit": "speed-limit",
        "dir": "dir",
    ]

    /// Global options recorded for `getGlobalOption` (and as defaults of new downloads).
    public static let globalRecorded: Set<String> = [
        "max-connection-per-server", "split", "min-split-size", "max-overall-upload-limit", "max-upload-limit",
        "user-agent", "max-tries", "retry-wait", "timeout", "connect-timeout", "continue", "allow-overwrite",
        "auto-file-renaming", "max-download-result", "keep-unfinished-download-result", "save-session",
        "log-level", "download-result", "optimize-concurrent-downloads", "max-download-limit", "lowest-speed-limit",
    ]

    /// A value as text: aria2 takes strings, and also numbers and booleans from lax clients.
    public static func text(_ value: JSONValue, name: String) throws(Aria2Fault) -> String {
        switch value {
        case .string(let text): return text
        case .integer(let number): return String(number)
        case .bool(let flag): return flag ? "true" : "false"
        case .double(let number): return String(number)
        default: throw Aria2Fault("option \(name): expected a string")
        }
    }

    /// `header` may be one string or a list of them.
    public static func headers(_ value: JSONValue) throws(Aria2Fault) -> [String] {
        let lines: [String]
        switch value {
        case .string(let line): lines = [line]
        case .array(let values):
            var collected: [String] = []
            for value in values {
                guard let line = value.stringValue else { throw Aria2Fault("option header: expected strings") }
                collected.append(line)
            }
            lines = collected
        default: throw Aria2Fault("option header: expected a string or a list of strings")
        }
        for line in lines { try Self.checkHeader(line) }
        return lines
    }

    static func checkHeader(_ line: String) throws(Aria2Fault) {
        guard let colon = line.firstIndex(of: ":"), colon != line.startIndex else {
            throw Aria2Fault("option header: '\(line)' is not 'Name: value'")
        }
        let name = line[..<colon]
        let tokenCharacters = Set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
        guard name.allSatisfy(tokenCharacters.contains) else { throw Aria2Fault("option header: bad header name '\(name)'") }
        guard !line.contains("\r"), !line.contains("\n"), !line.contains("\0") else {
            throw Aria2Fault("option header: line breaks are not allowed in '\(name)'")
        }
    }

    static func positiveNumber(_ text: String, name: String, range: ClosedRange<Int>) throws(Aria2Fault) -> Int {
        guard let number = Int(text), range.contains(number) else {
            throw Aria2Fault("option \(name): '\(text)' is not a number from \(range.lowerBound) to \(range.upperBound)")
        }
        return number
    }

    public static func flag(_ text: String, name: String) throws(Aria2Fault) -> Bool {
        switch text.lowercased() {
        case "true": return true
        case "false": return false
        default: throw Aria2Fault("option \(name): '\(text)' is not true or false")
        }
    }

    /// Checks a recorded option's value where aria2 would (numbers and flags).
    public static func checkRecorded(_ name: String, _ text: String) throws(Aria2Fault) {
        switch name {
        case "split": _ = try Self.positiveNumber(text, name: name, range: 1...64)
        case "max-connection-per-server": _ = try Self.positiveNumber(text, name: name, range: 1...64)
        case "max-tries", "max-file-not-found", "max-resume-failure-tries": _ = try Self.positiveNumber(text, name: name, range: 0...1_000_000)
        case "retry-wait", "timeout", "connect-timeout": _ = try Self.positiveNumber(text, name: name, range: 0...600)
        case "min-split-size", "piece-length", "lowest-speed-limit":
            guard ByteCountFormatting.parseSize(text) != nil else { throw Aria2Fault("option \(name): '\(text)' is not a size") }
        case "continue", "allow-overwrite", "auto-file-renaming", "always-resume", "remote-time", "conditional-get",
            "http-accept-gzip", "http-no-cache", "check-certificate":
            _ = try Self.flag(text, name: name)
        default: break
        }
    }

    /// A new download of `uris` with aria2's `options` (and `defaults`, the recorded global
    /// options, under them). Option names aria2 does not have are ignored, as aria2 ignores them
    /// (front-ends send options of newer aria2 versions); bad values are refused.
    public static func newDownload(uris: [String], options: [(String, JSONValue)], defaults: [String: String] = [:]) throws(Aria2Fault) -> NewDownload {
        guard !uris.isEmpty else { throw Aria2Fault("addUri needs at least one URI") }
        var urls: [URL] = []
        for text in uris {
            guard let url = URL.http(text) else { throw Aria2Fault("not an http or https URI: \(text)") }
            urls.append(url)
        }
        var download = NewDownload(urls: urls)
        var recorded: [String: String] = [:]
        for (name, value) in defaults where Self.recorded.contains(name) { recorded[name] = value }
        var headers: [String] = []
        if let agent = defaults["user-agent"] { headers.append("User-Agent: \(agent)") }
        for (name, value) in options {
            if name == "header" {
                headers.append(contentsOf: try Self.headers(value))
                continue
            }
            let text = try Self.text(value, name: name)
            switch name {
            case "dir":
                guard text.hasPrefix("/") else { throw Aria2Fault("option dir: '\(text)' is not an absolute path") }
                download.directory = text
            case "out":
                guard let sanitized = FileNaming.sanitize(text), sanitized == text else {
                    throw Aria2Fault("option out: '\(text)' is not a plain file name (no '/', no '..', not empty)")
                }
                download.fileName = text
            case "checksum":
                do { download.checksum = try ChecksumSpec(parsing: text).description } catch {
                    throw Aria2Fault("option checksum: \(error)")
                }
            case "max-download-limit":
                guard let rate = SpeedLimit.parse(text) else { throw Aria2Fault("option max-download-limit: '\(text)' is not a rate") }
                download.speedLimit = rate
            case "referer":
                try Self.checkHeader("Referer: \(text)")
                headers.append("Referer: \(text)")
            case "user-agent":
                try Self.checkHeader("User-Agent: \(text)")
                headers.removeAll { $0.lowercased().hasPrefix("user-agent:") }
                headers.append("User-Agent: \(text)")
            case "pause":
                download.paused = try Self.flag(text, name: name)
            case "gid":
                guard let gid = DownloadGID.normalized(text), gid != "0000000000000000" else {
                    throw Aria2Fault("option gid: '\(text)' is not 16 hex digits")
                }
                download.gid = gid
            default:
                guard Self.recorded.contains(name) else { continue }
                try Self.checkRecorded(name, text)
                recorded[name] = text
            }
        }
        download.requestHeaders = headers.isEmpty ? nil : headers
        download.options = recorded.isEmpty ? nil : recorded
        // aria2's split (connections per download) within max-connection-per-server, when given.
        let split = recorded["split"].flatMap(Int.init)
        let perServer = recorded["max-connection-per-server"].flatMap(Int.init)
        if split != nil || perServer != nil { download.connections = min(split ?? 64, perServer ?? 64) }
        return download
    }

    /// `getOption`'s answer for a download: what it was given and what Haul acts on.
    public static func options(of info: QueuedDownloadInfo, globalDefaults: [String: String]) -> [(String, String)] {
        var options: [String: String] = [:]
        for (name, value) in globalDefaults where Self.recorded.contains(name) { options[name] = value }
        for (name, value) in info.options ?? [:] { options[name] = value }
        options["dir"] = info.directory
        if let name = info.fileName { options["out"] = name }
        if let checksum = info.checksum { options["checksum"] = checksum }
        options["max-download-limit"] = String(info.speedLimit ?? 0)
        options["gid"] = info.gid
        options["split"] = options["split"] ?? "1"
        options["max-connection-per-server"] = options["max-connection-per-server"] ?? "1"
        var headers: [String] = []
        for line in info.requestHeaders ?? [] {
            let lower = line.lowercased()
            if lower.hasPrefix("referer:") {
                options["referer"] = line.dropFirst("referer:".count).trimmingCharacters(in: .whitespaces)
            } else if lower.hasPrefix("user-agent:") {
                options["user-agent"] = line.dropFirst("user-agent:".count).trimmingCharacters(in: .whitespaces)
            } else {
                headers.append(line)
            }
        }
        if !headers.isEmpty { options["header"] = headers.joined(separator: "\n") }
        return options.sorted { $0.key < $1.key }
    }
}

/// Where `changePosition` puts a download in the waiting queue.
public enum Aria2Position {
    /// The new index of the item now at `current` among `count`, for aria2's `POS_SET`,
    /// `POS_CUR` and `POS_END` (clamped to the queue, as aria2 does).
    public static func target(current: Int, count: Int, offset: Int64, how: String) throws(Aria2Fault) -> Int {
        let base: Int64
        switch how {
        case "POS_SET": base = 0
        case "POS_CUR": base = Int64(current)
        case "POS_END": base = Int64(count) - 1
        default: throw Aria2Fault("how must be POS_SET, POS_CUR or POS_END, not '\(how)'")
        }
        let (sum, overflow) = base.addingReportingOverflow(offset)
        let wanted = overflow ? (offset < 0 ? Int64.min : Int64.max) : sum
        return Int(max(0, min(Int64(count) - 1, wanted)))
    }

    /// The rank that places an item at `index` among `others` (the queue without it, in order,
    /// as their ranks), or `nil` when there is no room between neighbours and the queue must be
    /// renumbered first.
    public static func rank(at index: Int, among others: [Double]) -> Double? {
        if others.isEmpty { return 0 }
        if index <= 0 { return others[0] - 1 }
        if index >= others.count { return others[others.count - 1] + 1 }
        let (before, after) = (others[index - 1], others[index])
        let middle = before + (after - before) / 2
        return middle > before && middle < after ? middle : nil
    }
}

/// The part of a list `tellWaiting` and `tellStopped` answer with.
public enum Aria2Window {
    /// Indices into a list of `count`: `[offset, offset + num)` for an offset ≥ 0; for a
    /// negative one, counting from the end (`-1` is the last) and going backwards, newest
    /// first, as aria2 does.
    public static func indices(count: Int, offset: Int64, num: Int64) throws(Aria2Fault) -> [Int] {
        guard num >= 0 else { throw Aria2Fault("num must not be negative") }
        guard num > 0, count > 0 else { return [] }
        if offset >= 0 {
            guard offset < count else { return [] }
            let start = Int(offset)
            let end = Int(min(Int64(count), offset + min(num, Int64(count))))
            return Array(start..<end)
        }
        let start = Int64(count) + offset
        guard start >= 0 else { return [] }
        let last = max(0, start - num + 1)
        return Array(stride(from: Int(start), through: Int(last), by: -1))
    }
}
