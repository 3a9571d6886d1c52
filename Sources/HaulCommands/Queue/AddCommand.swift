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

            With --list, the URLs are one list download instead: one entry in the queue, whose \
            files are fetched max-per-host at a time and each placed as it finishes (as \
            'haul get -i' does, through hauld). It is paused, resumed and removed as one; a file \
            that fails does not stop the others, and the list ends in error naming how many \
            failed, which 'haul resume' fetches again. For many small files it is much faster \
            than a download each.
            """
    ).haulSubcommand

    @Argument(help: "http or https URLs to download.")
    var urls: [String] = []

    @Option(name: [.customShort("i"), .customLong("input-file")], help: "Read URLs from FILE, one per line ('-' for standard input; blank lines and # comments skipped). Every line is checked before any is added. Many go to hauld in consecutive batches, each added whole or not at all: the first \(Self.firstBatch), then \(DaemonRequest.batchGrowth) times as many each time (within what one request carries, ~7,000 URLs), so that the first start while the rest are saved; a batch refused stops the rest, and what was added before it is said. With --paused, as few batches as the requests carry.")
    var inputFile: String?

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

    @Option(
        name: [.customShort("x"), .customLong("max-connections")],
        help: "Connections each download may use at once (segments; 1: one connection). Default: the daemon's 'connections' setting, within max-per-host."
    )
    var maxConnections: Int?

    // The default applied here, not given to the parser (see `GetCommand.defaultRetries`).
    static let defaultPriority = 0

    @Option(
        name: .customLong("priority"),
        help: ArgumentHelp("Higher starts first (default \(Self.defaultPriority)). (default: \(Self.defaultPriority))", valueName: "priority")
    )
    var priorityGiven: Int?
    var priority: Int { self.priorityGiven ?? Self.defaultPriority }

    @Flag(name: .customLong("list"), help: "Queue the URLs as one list download (its files fetched and placed as they finish), not one download each.")
    var list = false

    @Flag(name: .customLong("paused"), help: "Add without starting.")
    var paused = false

    @Flag(name: .customLong("json"), help: "Print the added downloads as JSON.")
    var json = false

    @Flag(
        name: [.customShort("w"), .customLong("wait")],
        help: "Then wait until they finish, printing a line for each as it completes or fails (as 'haul wait -q'); exit status 0 when every one completed, 1 otherwise."
    )
    var wait = false

    /// How many downloads the first request of a long add carries (``DaemonRequest/addBatches(_:fields:growingFrom:maximumLineLength:)``):
    /// enough to fill hauld's default slots and its look-ahead while the next batch is saved.
    static let firstBatch = 16

    func validate() throws {
        if let maxConnections, !(1...64).contains(maxConnections) { throw ValidationError("-x takes a number from 1 to 64") }
        guard !self.urls.isEmpty || self.inputFile != nil else { throw ValidationError("give at least one URL, or -i FILE") }
        for text in self.urls + self.mirrors { _ = try Self.httpURL(text) }
        if self.list, self.out != nil || self.checksum != nil || !self.mirrors.isEmpty || self.maxConnections != nil {
            throw ValidationError("--list takes no --out, --checksum, --mirror or -x: its files are named by their servers, one connection each")
        }
        if self.urls.count > 1 || self.inputFile != nil, self.out != nil || self.checksum != nil || !self.mirrors.isEmpty {
            throw ValidationError("--out, --checksum and --mirror apply to a single URL (not with -i)")
        }
        if let checksum {
            do { _ = try ChecksumSpec(parsing: checksum) } catch { throw ValidationError("bad --checksum: \(error)") }
        }
        if let limit, SpeedLimit.parse(limit) == nil {
            throw ValidationError("bad --limit '\(limit)': use a rate such as 500K or 2M")
        }
        if self.wait, self.paused { throw ValidationError("--wait with --paused would wait for ever: a paused download does not finish") }
        if self.wait, self.json { throw ValidationError("--wait prints a line for each download as it finishes; not with --json") }
        if let out, FileNaming.sanitize(out) != out {
            throw ValidationError("--out takes a plain file name, not '\(out)' (use --dir for the directory)")
        }
    }

    /// `urls` as list downloads (`--list`): one, or, when they do not fit one request to hauld
    /// (~15,000 URLs), consecutive lists that each do.
    static func lists(of urls: [URL], template: NewDownload, maximumLineLength: Int = DaemonProtocol.maximumLineLength) -> [NewDownload] {
        // Room for the request around the list and the download's other members.
        let budget = maximumLineLength - 4096
        var lists: [NewDownload] = []
        var current: [URL] = []
        var bytes = 0
        for url in urls {
            // The URL as a JSON string, escapes included at worst, and its comma.
            let size = url.absoluteString.utf8.count * 2 + 3
            if !current.isEmpty, bytes + size > budget {
                lists.append(Self.list(current, template: template))
                current = []
                bytes = 0
            }
            current.append(url)
            bytes += size
        }
        if !current.isEmpty { lists.append(Self.list(current, template: template)) }
        return lists
    }

    private static func list(_ urls: [URL], template: NewDownload) -> NewDownload {
        var download = template
        download.urls = []
        download.list = urls
        return download
    }

    static func httpURL(_ text: String) throws -> URL {
        guard let url = URL.http(text) else { throw ValidationError("not an http or https URL: '\(text)'") }
        return url
    }

    /// The URLs of `-i FILE`, checked and parsed once (each was parsed again to be sent: ~3.5 K
    /// instructions a URL): a bad line is an error naming its line number.
    static func urls(inInputFile path: String) throws -> [URL] {
        let text: String
        if path == "-" {
            text = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
        } else {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw ValidationError("cannot read the input file \(path)")
            }
            text = String(decoding: data, as: UTF8.self)
        }
        var urls: [URL] = []
        for entry in URLList.entries(in: text) {
            do { urls.append(try Self.httpURL(entry.text)) } catch { throw ValidationError("\(path):\(entry.line): not an http or https URL: '\(entry.text)'") }
        }
        guard !urls.isEmpty else { throw ValidationError("\(path) lists no URL") }
        return urls
    }

    func run() throws {
        let urls = try self.urls.map(Self.httpURL) + (self.inputFile.map(Self.urls(inInputFile:)) ?? [])
        let client = try QueueClient.connect(start: true)
        defer { client.close() }
        // Subscribed before the add, on the same connection: every finish of the downloads is
        // heard (while the add's answer is awaited, too), so no list is read afterwards. Only
        // finishes: a subscriber of every change makes hauld record each end at once.
        let follower = self.wait ? try QueueFollower(client: client, finishesOnly: true, fields: WaitCommand.finishFields) : nil
        let directory = self.directory.map { path -> String in
            path.hasPrefix("/") ? path : URL(fileURLWithPath: path, relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath)).standardizedFileURL.path
        }
        // What every download shares, read once: each read of an option is its property
        // wrapper's (~500 instructions), and a list of 1,000 URLs read seven for each.
        let template = NewDownload(
            urls: try self.mirrors.map(Self.httpURL),
            directory: directory,
            fileName: self.out,
            checksum: self.checksum,
            speedLimit: self.limit.flatMap(SpeedLimit.parse),
            priority: self.priority,
            paused: self.paused,
            connections: self.maxConnections
        )
        let downloads = self.list ? Self.lists(of: urls, template: template) : urls.map { url in
            var download = template
            download.urls = [url] + template.urls
            return download
        }
        // One request, one transaction in hauld: all of a batch are added or none. Downloads that
        // start go in batches that grow from `firstBatch` (hauld starts the first while it
        // decodes and saves the next); paused ones, and a list longer than one request may carry
        // (~7,000 plain URLs), in as few as the requests carry. The first batch refused stops
        // the rest, and what was added before it is said.
        // More than 20 are told in one line, for which their ids are enough: hauld answers with
        // those alone (1,000 whole downloads were ~220 KB to write and read).
        let summarizes = !self.json && downloads.count > 20
        let fields: [DownloadField]? = summarizes ? [.id] : nil
        let batches: [ArraySlice<NewDownload>]
        do {
            batches = try DaemonRequest.addBatches(downloads, fields: fields, growingFrom: self.paused ? nil : Self.firstBatch)
        } catch {
            Terminal.writeError("haul: \(error); nothing was added\n")
            throw ExitStatus.generic
        }
        var added: [QueuedDownloadInfo] = []
        var addedIDs: [Int64] = []
        for batch in batches {
            do {
                let response = try client.request(DaemonRequest(.queueAdd(.batch(Array(batch), fields: fields))))
                // (A daemon that does not know `fields` answers with whole downloads.)
                let whole = response.downloads ?? []
                if !summarizes { added += whole }
                addedIDs += response.downloadIDs ?? whole.map(\.id)
            } catch {
                let before = addedIDs.isEmpty ? "nothing was added" : "the first \(addedIDs.count) of \(downloads.count) were added (\(addedIDs.first!)…\(addedIDs.last!)), the rest not"
                Terminal.writeError("haul: \(error); \(before)\n")
                throw ExitStatus.generic
            }
        }
        if self.json {
            print(QueueFormatting.json(added))
        } else if summarizes, let first = addedIDs.first, let last = addedIDs.last {
            // The directory given, or the queue's default, where each of them goes.
            let target = try directory ?? client.call(.queueSettings(nil)).settings?.defaultDirectory ?? "the queue's directory"
            print("added \(addedIDs.count) downloads (\(first)…\(last)) → \(target)")
        } else {
            for download in added {
                if let files = download.fileCount {
                    print("added \(download.id): a list of \(files) files → \(download.directory)")
                } else {
                    print("added \(download.id): \(download.fileName ?? download.urls[0].absoluteString) → \(download.directory)")
                }
            }
        }
        if let follower {
            defer { follower.close() }
            guard try WaitCommand.follow(addedIDs, known: [:], follower: follower, live: false) else { throw ExitStatus.generic }
        }
    }
}
