import ArgumentParser
import Foundation
import HaulDaemonClient
import HaulCore
import Synchronization

/// Follows queue events: keeps the latest view of every download and wakes the caller on change.
/// When hauld goes away (a restart, a crash), it connects again as soon as the daemon is back
/// and starts over from a fresh list, so `haul wait` and `haul watch` outlive a daemon restart.
final class QueueFollower: Sendable {
    private struct State {
        var view = QueueView()
        var isClosed = false
        var client: QueueClient?
    }

    private let state = Mutex(State())
    private let changed = DispatchSemaphore(value: 0)

    /// Connects (starting hauld when `start`), subscribes, then reads the list: no change can
    /// fall between the two.
    init(start: Bool) throws {
        let client = try QueueClient.connect(start: start)
        do {
            try self.attach(client)
        } catch {
            // The daemon went away between taking the connection and answering (a restart, a
            // crash): it is followed when it is back, as after a later close.
            client.connection.close()
            guard self.reconnect(timeout: daemonReconnectTimeout) else { throw error }
        }
    }

    private func attach(_ client: QueueClient) throws {
        // Open from here on: a close while subscribing or listing is not overwritten.
        self.state.withLock { state in
            state.view.beginAttach()
            state.isClosed = false
        }
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
                    if let download = event.download { state.view.changed(download) }
                case .downloadRemoved:
                    if let id = event.downloadID { state.view.removed(id: id) }
                default: break
                }
            }
            self.changed.signal()
        }
        let all = try client.call(.queueList(QueuePage())).downloads ?? []
        self.state.withLock { state in
            state.view.listed(all)
            state.client = client
        }
    }

    /// After the connection closed: waits up to `timeout` seconds for hauld to be back, then
    /// follows it again. `false` when it did not come back.
    func reconnect(timeout: Double) -> Bool {
        self.state.withLock { $0.client }?.close()
        let paths = DaemonPaths.fromEnvironment()
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let connection = try? BackgroundDaemonClient.connectOnce(paths: paths) {
                // Downloads seen before the restart stay known until the fresh list replaces them.
                if (try? self.attach(QueueClient(connection: connection, paths: paths))) != nil { return true }
                connection.close()
            }
            Thread.sleep(forTimeInterval: 0.2)
        }
        return false
    }

    /// Waits up to `timeout` seconds for a change.
    func waitForChange(timeout: Double) {
        _ = self.changed.wait(timeout: .now() + timeout)
    }

    var snapshot: (downloads: [Int64: QueuedDownloadInfo], removed: Set<Int64>, isClosed: Bool) {
        self.state.withLock { ($0.view.downloads, $0.view.removed, $0.isClosed) }
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
    )

    @Argument(help: "Download ids (default: every download in progress).")
    var ids: [String] = []

    @Flag(name: [.customShort("q"), .customLong("quiet")], help: "No progress, only the outcome.")
    var quiet = false

    @OptionGroup var connection: QueueConnectionOptions

    func validate() throws { _ = try parseDownloadIDs(self.ids) }

    func run() throws {
        let follower = try QueueFollower(start: self.connection.start)
        defer { follower.close() }
        let all = Array(follower.snapshot.downloads.values)
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
                Terminal.writeError("haul: the connection to hauld closed; waiting for it to come back\n")
                guard follower.reconnect(timeout: daemonReconnectTimeout) else {
                    Terminal.writeError("haul: hauld did not come back within \(Int(daemonReconnectTimeout)) s\n")
                    throw ExitStatus.generic
                }
                Terminal.writeError("haul: reconnected to hauld\n")
                drawnLines = 0
                continue
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
        let follower = try QueueFollower(start: self.connection.start)
        defer { follower.close() }
        var latest: [Int64: QueuedDownloadInfo] = [:]
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
                Terminal.writeError("haul: the connection to hauld closed; waiting for it to come back\n")
                guard follower.reconnect(timeout: daemonReconnectTimeout) else {
                    Terminal.writeError("haul: hauld did not come back within \(Int(daemonReconnectTimeout)) s\n")
                    throw ExitStatus.generic
                }
                continue
            }
            follower.waitForChange(timeout: 1)
        }
    }
}
