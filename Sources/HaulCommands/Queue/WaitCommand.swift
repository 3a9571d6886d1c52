import ArgumentParser
import Foundation
import HaulCore
import Synchronization

/// Follows queue events: keeps the latest view of every download and wakes the caller on change.
final class QueueFollower: Sendable {
    private struct State {
        var downloads: [Int64: QueuedDownloadInfo] = [:]
        var removed: Set<Int64> = []
        var isClosed = false
    }

    private let state = Mutex(State())
    private let changed = DispatchSemaphore(value: 0)

    init(client: QueueClient, initial: [QueuedDownloadInfo]) throws {
        self.state.withLock { state in for download in initial { state.downloads[download.id] = download } }
        client.connection.onClose.withLock {
            $0 = { [weak self] in
                self?.state.withLock { $0.isClosed = true }
                self?.changed.signal()
            }
        }
        try client.subscribe { [weak self] event in
            guard let self else { return }
            self.state.withLock { state in
                switch event.kind {
                case .downloadChanged:
                    if let download = event.download { state.downloads[download.id] = download }
                case .downloadRemoved:
                    if let id = event.downloadID {
                        state.downloads[id] = nil
                        state.removed.insert(id)
                    }
                default: break
                }
            }
            self.changed.signal()
        }
    }

    /// Waits up to `timeout` seconds for a change.
    func waitForChange(timeout: Double) {
        _ = self.changed.wait(timeout: .now() + timeout)
    }

    var snapshot: (downloads: [Int64: QueuedDownloadInfo], removed: Set<Int64>, isClosed: Bool) {
        self.state.withLock { ($0.downloads, $0.removed, $0.isClosed) }
    }
}

/// `haul wait ID…`: blocks until the downloads are done, showing their progress.
struct WaitCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "wait",
        abstract: "Wait until downloads finish, showing progress.",
        discussion: "Exit status: 0 when every download completed, 1 when one failed or was cancelled."
    )

    @Argument(help: "Download ids (default: every download in progress).")
    var ids: [String] = []

    @Flag(name: [.customShort("q"), .customLong("quiet")], help: "No progress, only the outcome.")
    var quiet = false

    @OptionGroup var connection: QueueConnectionOptions

    func validate() throws { _ = try parseDownloadIDs(self.ids) }

    func run() throws {
        let client = try QueueClient.connect(start: self.connection.start)
        defer { client.close() }
        // Subscribe first, then read the state: no change can fall between the two.
        let follower = try QueueFollower(client: client, initial: [])
        let all = try client.call(.queueList).downloads ?? []
        let requested = try parseDownloadIDs(self.ids)
        for id in requested where !all.contains(where: { $0.id == id }) {
            Terminal.writeError("haul: no download with id \(id) (see 'haul ls')\n")
            throw ExitStatus.generic
        }
        let ids = requested.isEmpty ? all.filter(\.state.isInProgress).map(\.id) : requested
        var latest = Dictionary(uniqueKeysWithValues: all.map { ($0.id, $0) })
        let live = Terminal.isInteractive && !self.quiet
        var drawnLines = 0
        var reported: Set<Int64> = []
        while true {
            let snapshot = follower.snapshot
            latest.merge(snapshot.downloads) { _, new in new }
            if live {
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
            }
            var pending = 0
            for id in ids {
                if snapshot.removed.contains(id) { latest[id]?.state = .removed }
                guard let download = latest[id] else { continue }
                if download.state.isInProgress {
                    pending += 1
                } else if !reported.contains(id) {
                    reported.insert(id)
                    if !live || self.quiet {
                        let detail = download.state == .complete ? (download.path ?? "") : (download.errorMessage ?? "")
                        print("\(id) \(download.state.rawValue) \(detail)")
                    }
                }
            }
            if pending == 0 { break }
            if snapshot.isClosed {
                Terminal.writeError("haul: the connection to hauld closed\n")
                throw ExitStatus.generic
            }
            follower.waitForChange(timeout: 1)
        }
        if live {
            for id in ids {
                guard let download = latest[id] else { continue }
                print("\(id) \(download.state.rawValue) \(download.state == .complete ? (download.path ?? "") : (download.errorMessage ?? ""))")
            }
        }
        if ids.contains(where: { latest[$0]?.state != .complete }) { throw ExitStatus.generic }
    }
}

/// `haul watch`: a live table of the queue.
struct WatchCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "watch", abstract: "Show the queue live (Ctrl-C to stop).")

    @OptionGroup var connection: QueueConnectionOptions

    func run() throws {
        let client = try QueueClient.connect(start: self.connection.start)
        defer { client.close() }
        let follower = try QueueFollower(client: client, initial: [])
        var latest: [Int64: QueuedDownloadInfo] = [:]
        for download in try client.call(.queueList).downloads ?? [] { latest[download.id] = download }
        let interactive = isatty(STDOUT_FILENO) == 1
        var lastText = ""
        while true {
            let snapshot = follower.snapshot
            latest.merge(snapshot.downloads) { _, new in new }
            for id in snapshot.removed { latest[id] = nil }
            let text = QueueFormatting.table(latest.values.sorted { $0.id < $1.id }, width: max(100, Terminal.width))
            if text != lastText {
                // A terminal gets the table redrawn in place; a pipe gets each new table once.
                let frame = interactive ? "\u{1B}[H\u{1B}[2J" + text + "\n" : text + "\n\n"
                FileHandle.standardOutput.write(Data(frame.utf8))
                lastText = text
            }
            if snapshot.isClosed {
                Terminal.writeError("haul: the connection to hauld closed\n")
                throw ExitStatus.generic
            }
            follower.waitForChange(timeout: 1)
        }
    }
}
