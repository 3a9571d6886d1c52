import ArgumentParser
import Foundation
import HaulCore

/// `haul add`: queue downloads in hauld (started if needed).
struct AddCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add",
        abstract: "Queue downloads in the daemon (starts hauld when it is not running).",
        discussion: """
            Each URL becomes one download. A download's file appears under its final name only \
            when complete and verified; until then it is NAME.ID.haul-part in the same directory. \
            A name that is taken gets a number ('file (1).iso'), never an overwrite.
            """
    )

    @Argument(help: "http or https URLs to download.")
    var urls: [String]

    @Option(name: [.customShort("d"), .customLong("dir")], help: "Directory to save into (default: the daemon's 'dir' setting).")
    var directory: String?

    @Option(name: [.customShort("o"), .customLong("out")], help: "File name for the (single) download.")
    var out: String?

    @Option(name: .customLong("checksum"), help: "Expected checksum TYPE=HEX (sha256, sha1, md5) of the (single) download.")
    var checksum: String?

    @Option(name: .customLong("limit"), help: "Speed limit per download, e.g. 500K or 2M (per second).")
    var limit: String?

    @Option(name: .customLong("mirror"), help: "Another URL of the same file (repeatable; single download only).")
    var mirrors: [String] = []

    @Option(name: .customLong("priority"), help: "Higher starts first (default 0).")
    var priority: Int = 0

    @Flag(name: .customLong("paused"), help: "Add without starting.")
    var paused = false

    @Flag(name: .customLong("json"), help: "Print the added downloads as JSON.")
    var json = false

    func validate() throws {
        guard !self.urls.isEmpty else { throw ValidationError("give at least one URL") }
        for text in self.urls + self.mirrors { _ = try Self.httpURL(text) }
        if self.urls.count > 1, self.out != nil || self.checksum != nil || !self.mirrors.isEmpty {
            throw ValidationError("--out, --checksum and --mirror apply to a single URL")
        }
        if let checksum {
            do { _ = try ChecksumSpec(parsing: checksum) } catch { throw ValidationError("bad --checksum: \(error)") }
        }
        if let limit, SpeedLimit.parse(limit) == nil {
            throw ValidationError("bad --limit '\(limit)': use a rate such as 500K or 2M")
        }
        if let out, FileNaming.sanitize(out) != out {
            throw ValidationError("--out takes a plain file name, not '\(out)' (use --dir for the directory)")
        }
    }

    static func httpURL(_ text: String) throws -> URL {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
            url.host?.isEmpty == false
        else {
            throw ValidationError("not an http or https URL: '\(text)'")
        }
        return url
    }

    func run() throws {
        let client = try QueueClient.connect(start: true)
        defer { client.close() }
        let directory = self.directory.map { path -> String in
            path.hasPrefix("/") ? path : URL(fileURLWithPath: path, relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath)).standardizedFileURL.path
        }
        var added: [QueuedDownloadInfo] = []
        for text in self.urls {
            let urls = try [Self.httpURL(text)] + self.mirrors.map(Self.httpURL)
            let response = try client.call(.queueAdd) { request in
                request.urls = urls
                request.directory = directory
                request.fileName = self.out
                request.checksum = self.checksum
                request.speedLimit = self.limit.flatMap(SpeedLimit.parse)
                request.priority = self.priority
                request.paused = self.paused
            }
            guard let download = response.download else { continue }
            added.append(download)
            if !self.json {
                print("added \(download.id): \(download.fileName ?? text) → \(download.directory)")
            }
        }
        if self.json { print(QueueFormatting.json(added)) }
    }
}
