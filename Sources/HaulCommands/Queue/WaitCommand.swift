import ArgumentParser
import Foundation
import HaulDaemonClient
import HaulCore
import Synchronization

/// Follows queue events: keeps the latest view of every download, read on the caller's thread
/// when it waits for a change (``waitForChange(timeout:)``): no thread of its own, nothing handed
/// from one thread to another for each event. When hauld goes away (a restart, a crash), it
/// connects again as soon as the daemon is back and starts over from a fresh list, so `haul
/// wait` and `haul watch` outlive a daemon restart.
final class QueueFollower: Sendable {
    private struct State {
        var view = QueueView()
        var isClosed = false
        var client: QueueClient?
        /// Downloads changed or removed since the last ``takeChanges()``.
        var changedIDs: Set<Int64> = []
    }

    private let state = Mutex(State())
    /// Whether it hears only finishes (downloads that complete, fail or are cancelled, and those
    /// dropped), not every change: what `haul wait` without its live display needs, and cheaper
    /// for a busy daemon.
    private let finishesOnly: Bool
    /// The members of a download that the list and each change carry (`nil`: all): what the
    /// caller shows of it (``WaitCommand/finishFields``, ``WaitCommand/liveFields``). A whole
    /// download was ~400 bytes for hauld to write and ~50 K instructions for `haul add --wait`
    /// to read, a file.
    private let fields: [DownloadField]?

    /// Connects (starting hauld when `start`), subscribes (to finishes only, with
    /// `finishesOnly`; to those `fields` of each download), then reads the list: no change can
    /// fall between the two.
    init(start: Bool, finishesOnly: Bool = false, fields: [DownloadField]? = nil) throws {
        self.finishesOnly = finishesOnly
        self.fields = fields
        let client = try QueueClient.connect(start: start)
        do {
            try self.attach(client)
        } catch {
            // The daemon went away between taking the connection and answering (a restart, a
            // crash): it is followed when it is back, as after a later close.
            client.close()
            guard self.reconnect(timeout: daemonReconnectTimeout) else { throw error }
        }
    }

    /// Follows on `client` (its caller's connection, whose later calls keep reading the events):
    /// subscribes, and reads no list. For a caller that adds downloads after this: it hears
    /// everything that happens to them (`haul add --wait`). After a reconnect the list is read,
    /// as always.
    init(client: QueueClient, finishesOnly: Bool, fields: [DownloadField]? = nil) throws {
        self.finishesOnly = finishesOnly
        self.fields = fields
        try self.attach(client, lists: false)
    }

    private func attach(_ client: QueueClient, lists: Bool = true) throws {
        // Open from here on: a close while subscribing or listing is not overwritten.
        self.state.withLock { state in
            state.view.beginAttach()
            state.isClosed = false
        }
        // Events read while the list is asked for are applied first; the list does not
        // overwrite what they told (``QueueView``).
        try client.subscribe(finishesOnly: self.finishesOnly, fields: self.fields) { [weak self] event in self?.apply(event) }
        // Every state: a cancelled download is listed among the finished, as `haul ls` lists it.
        // Projected as the changes are, when they are (to what the command shows).
        let all = lists ? try client.call(.queueList(QueuePage(states: QueuedDownloadState.allCases, fields: self.fields))).downloads ?? [] : nil
        self.state.withLock { state in
            if let all {
                state.view.listed(all)
                // The list may differ from what was known before a reconnect: all of it is news.
                state.changedIDs.formUnion(state.view.downloads.keys)
                state.changedIDs.formUnion(state.view.removed)
            }
            state.client = client
        }
    }

    private func apply(_ event: DaemonEvent) {
        self.state.withLock { state in
            switch event.kind {
            case .downloadChanged:
                if let download = event.download {
                    // A projection (what was asked for) updates those members of a known download.
                    state.view.changed(download, fields: event.downloadFields == nil ? nil : self.fields ?? event.downloadFields)
                    state.changedIDs.insert(download.id)
                }
            case .downloadRemoved:
                if let id = event.downloadID {
                    state.view.removed(id: id)
                    state.changedIDs.insert(id)
                }
            default: break
            }
        }
    }

    /// After the connection closed: waits up to `timeout` seconds for hauld to be back, then
    /// follows it again. `false` when it did not come back.
    func reconnect(timeout: Double) -> Bool {
        self.state.withLock { $0.client }?.close()
        let paths = DaemonPaths.fromEnvironment()
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let client = try? QueueClient.connectOnce(paths: paths) {
                // Downloads seen before the restart stay known until the fresh list replaces them.
                if (try? self.attach(client)) != nil { return true }
                client.close()
            }
            Thread.sleep(forTimeInterval: 0.2)
        }
        return false
    }

    /// Waits up to `timeout` seconds for a change: returns once events were read and no more
    /// wait (a busy queue's thousands are taken together), at once when changes wait to be
    /// taken already, and when the connection closes.
    func waitForChange(timeout: Double) {
        let (client, waits) = self.state.withLock { state in (state.client, !state.isClosed && state.changedIDs.isEmpty) }
        guard waits, let client else { return }
        do {
            try client.readEvents(timeout: timeout)
        } catch {
            self.state.withLock { $0.isClosed = true }
        }
    }

    /// What changed since the last call (the first: everything listed): the downloads as they
    /// are now and those removed. Only these are copied out: a caller that kept a snapshot of
    /// the whole view made the next event copy all of it, and looked at every download for each
    /// event.
    func takeChanges() -> (downloads: [QueuedDownloadInfo], removed: Set<Int64>, isClosed: Bool) {
        self.state.withLock { state in
            defer { state.changedIDs.removeAll(keepingCapacity: true) }
            var downloads: [QueuedDownloadInfo] = []
            var removed: Set<Int64> = []
            for id in state.changedIDs.sorted() {
                if let download = state.view.downloads[id] {
                    downloads.append(download)
                } else if state.view.removed.contains(id) {
                    removed.insert(id)
                }
            }
            return (downloads, removed, state.isClosed)
        }
    }

    func close() {
        self.state.withLock { $0.client }?.close()
    }
}

/// How long `wait` and `watch` wait for a restarted hauld before they give up.
let daemonReconnectTimeout = 60.0

/// `haul wait ID…`: blocks until the downloads are done, showing their progress.
struct WaitCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "wait",
        abstract: "Wait until downloads finish, showing progress.",
        discussion: "Exit status: 0 when every download completed, 1 when one failed or was cancelled."
    ).haulSubcommand

    @Argument(help: "Download ids (default: every download in progress).")
    var ids: [String] = []

    @Flag(name: [.customShort("q"), .customLong("quiet")], help: "No progress, only the outcome.")
    var quiet = false

    @OptionGroup var connection: QueueConnectionOptions

    func validate() throws { _ = try parseDownloadIDs(self.ids) }

    func run() throws {
        let live = Terminal.isInteractive && !self.quiet
        // Without the live display only the outcomes are shown: finishes are all it hears.
        let follower = try QueueFollower(start: self.connection.start, finishesOnly: !live, fields: live ? Self.liveFields : Self.finishFields)
        defer { follower.close() }
        let first = follower.takeChanges()
        let requested = try parseDownloadIDs(self.ids)
        let known = Dictionary(first.downloads.map { ($0.id, $0) }, uniquingKeysWith: { _, new in new })
        for id in requested where known[id] == nil {
            Terminal.writeError("haul: no download with id \(id) (see 'haul ls')\n")
            throw ExitStatus.generic
        }
        let ids = requested.isEmpty ? first.downloads.filter(\.state.isInProgress).map(\.id) : requested
        guard try Self.follow(ids, known: known, follower: follower, live: live) else { throw ExitStatus.generic }
    }

    /// Follows downloads `ids` until each has finished (`known`: as they stand now; one not
    /// known yet is in progress), printing a line for each as it finishes — or, `live`, a
    /// progress display and the lines at the end. Outlives a restart of hauld (the follower
    /// reconnects). Returns whether every one completed.
    static func follow(_ ids: [Int64], known: [Int64: QueuedDownloadInfo], follower: QueueFollower, live: Bool) throws -> Bool {
        var latest = known
        let watched = Set(ids)
        var drawnLines = 0
        var lastFrame = Date.distantPast
        var reported: Set<Int64> = []
        var pending: Set<Int64> = []
        /// Where download `id` stands now: still pending (in progress, or nothing heard of it
        /// yet), or done (reported once).
        func settle(_ id: Int64) {
            if latest[id]?.state.isInProgress ?? true {
                pending.insert(id)
                return
            }
            pending.remove(id)
            guard reported.insert(id).inserted, !live, let download = latest[id] else { return }
            print(Self.outcome(id, download.state, download))
        }
        for id in ids { settle(id) }
        while true {
            // A frame at most every 0.1 s, and the last one as it ends.
            if live, pending.isEmpty || Date().timeIntervalSince(lastFrame) >= Self.frameInterval {
                var output = drawnLines > 0 ? "\u{1B}[\(drawnLines)F" : ""
                for id in ids {
                    guard let download = latest[id] else { continue }
                    let line = ProgressLine.render(
                        name: "\(id) \(download.fileName ?? "")",
                        received: download.bytesDone,
                        expected: download.totalBytes,
                        bytesPerSecond: download.state == .active ? download.speed : nil,
                        width: Terminal.width - 10
                    )
                    output += "\u{1B}[2K" + line + " " + download.state.rawValue + "\n"
                }
                drawnLines = ids.count
                Terminal.writeError(output)
                lastFrame = Date()
            }
            if pending.isEmpty { break }
            // At once when changes wait already (heard while a caller's requests were answered).
            follower.waitForChange(timeout: live ? Self.frameInterval : 1)
            let changes = follower.takeChanges()
            for download in changes.downloads where watched.contains(download.id) {
                latest[download.id] = download
                settle(download.id)
            }
            for id in changes.removed where watched.contains(id) {
                if latest[id] == nil {
                    // Dropped from the list before anything else was heard of it.
                    pending.remove(id)
                    if reported.insert(id).inserted, !live { print(Self.outcome(id, .removed, nil)) }
                    continue
                }
                latest[id]?.state = .removed
                settle(id)
            }
            if changes.isClosed {
                Terminal.writeError("haul: the connection to hauld closed; waiting for it to come back\n")
                guard follower.reconnect(timeout: daemonReconnectTimeout) else {
                    Terminal.writeError("haul: hauld did not come back within \(Int(daemonReconnectTimeout)) s\n")
                    throw ExitStatus.generic
                }
                Terminal.writeError("haul: reconnected to hauld\n")
                drawnLines = 0
            }
        }
        if live {
            for id in ids {
                guard let download = latest[id] else { continue }
                print(Self.outcome(id, download.state, download))
            }
        }
        return ids.allSatisfy { latest[$0]?.state == .complete }
    }

    /// A download's line as it ends: `ID STATE PATH` when complete, `ID STATE REASON` otherwise
    /// (`download`: as last heard, `nil` when nothing but its removal was).
    static func outcome(_ id: Int64, _ state: QueuedDownloadState, _ download: QueuedDownloadInfo?) -> String {
        let detail = state == .complete ? (download?.path ?? "") : (download?.errorMessage ?? "")
        return "\(id) \(state.rawValue) \(detail)"
    }

    /// The least time between two frames of the live display.
    static let frameInterval = 0.1

    /// What a finished download's line says (``outcome(_:_:_:)``): all that `haul wait -q` and
    /// `haul add --wait` ask hauld for.
    static let finishFields: [DownloadField] = [.id, .state, .path, .errorMessage]

    /// What the live display draws of a download, and its line at the end.
    static let liveFields: [DownloadField] = [.id, .fileName, .path, .state, .bytesDone, .totalBytes, .speed, .errorMessage]
}

/// `haul watch`: a live table of the queue.
struct WatchCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "watch", abstract: "Show the queue live (Ctrl-C to stop).").haulSubcommand

    @OptionGroup var connection: QueueConnectionOptions

    func run() throws {
        let follower = try QueueFollower(start: self.connection.start)
        defer { follower.close() }
        var latest: [Int64: QueuedDownloadInfo] = [:]
        let interactive = isatty(STDOUT_FILENO) == 1
        var lastText = ""
        while true {
            let changes = follower.takeChanges()
            for download in changes.downloads { latest[download.id] = download }
            for id in changes.removed { latest[id] = nil }
            let text = QueueFormatting.table(latest.values.sorted { $0.id < $1.id }, width: max(100, Terminal.width))
            if text != lastText {
                // A terminal gets the table redrawn in place; a pipe gets each new table once.
                let frame = interactive ? "\u{1B}[H\u{1B}[2J" + text + "\n" : text + "\n\n"
                FileHandle.standardOutput.write(Data(frame.utf8))
                lastText = text
            }
            if changes.isClosed {
                Terminal.writeError("haul: the connection to hauld closed; waiting for it to come back\n")
                guard follower.reconnect(timeout: daemonReconnectTimeout) else {
                    Terminal.writeError("haul: hauld did not come back within \(Int(daemonReconnectTimeout)) s\n")
                    throw ExitStatus.generic
                }
                continue
            }
            // The table is drawn anew at most every 0.1 s: a busy queue's events are taken together.
            Thread.sleep(forTimeInterval: WaitCommand.frameInterval)
            follower.waitForChange(timeout: 1)
        }
    }
}
