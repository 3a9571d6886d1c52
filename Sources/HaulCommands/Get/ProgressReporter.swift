import Dispatch
import Foundation
import HaulCore

/// What `haul get` prints: a live progress line on a terminal, a few plain lines otherwise.
final class ProgressReporter: @unchecked Sendable {
    // @unchecked Sendable: all mutable state is guarded by `lock`.

    enum Mode: Sendable {
        /// Redraw one status line several times a second (standard error is a terminal).
        case live
        /// Plain lines: results, and a status line every 10 seconds (pipes, logs, CI).
        case lines
        /// Errors only.
        case quiet
    }

    private struct Active {
        var name: String
        var total: Int64
        var expected: Int64
        var connections = 1
        var meter = TransferRateMeter()
    }

    let mode: Mode
    private let lock = NSLock()
    private var active: [Int: Active] = [:]
    private var totalFiles = 0
    private var finishedFiles = 0
    private var allBytes: Int64 = 0
    private var aggregateMeter = TransferRateMeter()
    private var timer: (any DispatchSourceTimer)?
    private var lineIsDrawn = false
    private let clock = ContinuousClock()
    private let origin: ContinuousClock.Instant

    init(mode: Mode) {
        self.mode = mode
        self.origin = self.clock.now
    }

    private var now: Double {
        let elapsed = self.clock.now - self.origin
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }

    func start(totalFiles: Int) {
        self.lock.withLock { self.totalFiles = totalFiles }
        guard self.mode != .quiet else { return }
        let timer = DispatchSource.makeTimerSource(queue: .global())
        let interval: DispatchTimeInterval = self.mode == .live ? .milliseconds(150) : .seconds(10)
        timer.schedule(deadline: .now() + interval, repeating: interval)
        timer.setEventHandler { [weak self] in self?.tick() }
        timer.resume()
        self.lock.withLock { self.timer = timer }
    }

    func stop() {
        let timer = self.lock.withLock { () -> (any DispatchSourceTimer)? in
            defer { self.timer = nil }
            return self.timer
        }
        timer?.cancel()
        self.lock.withLock { self.clearLineLocked() }
    }

    func jobStarted(_ name: String) {}

    func progress(task: Int, name: String, bytesWritten: Int64, total: Int64, expected: Int64, connections: Int = 1) {
        let now = self.now
        self.lock.withLock {
            var entry = self.active[task] ?? Active(name: name, total: 0, expected: expected)
            entry.total = total
            entry.connections = connections
            entry.expected = expected
            entry.meter.record(total: total, at: now)
            self.active[task] = entry
            self.allBytes += bytesWritten
            self.aggregateMeter.record(total: self.allBytes, at: now)
        }
    }

    func taskEnded(_ task: Int) {
        self.lock.withLock { _ = self.active.removeValue(forKey: task) }
    }

    func jobFinished(_ name: String, savedAs path: String, bytes: Int64) {
        self.lock.withLock {
            self.finishedFiles += 1
            guard self.mode != .quiet else { return }
            self.clearLineLocked()
            Terminal.writeError("saved \(path) (\(ByteCountFormatting.bytes(bytes)))\n")
        }
    }

    func note(_ message: String) {
        self.lock.withLock {
            guard self.mode != .quiet else { return }
            self.clearLineLocked()
            Terminal.writeError("haul: \(message)\n")
        }
    }

    func error(_ message: String) {
        self.lock.withLock {
            self.clearLineLocked()
            Terminal.writeError("haul: error: \(message)\n")
        }
    }

    private func clearLineLocked() {
        if self.lineIsDrawn {
            Terminal.writeError("\r\u{1B}[K")
            self.lineIsDrawn = false
        }
    }

    private func tick() {
        self.lock.withLock {
            guard let line = self.statusLineLocked(width: self.mode == .live ? Terminal.width - 1 : 200) else { return }
            switch self.mode {
            case .live:
                Terminal.writeError("\r\u{1B}[K" + line)
                self.lineIsDrawn = true
            case .lines:
                Terminal.writeError(line + "\n")
            case .quiet:
                break
            }
        }
    }

    private func statusLineLocked(width: Int) -> String? {
        if self.totalFiles == 1 || self.active.count == 1, self.totalFiles == 1, let entry = self.active.values.first {
            return ProgressLine.render(
                name: entry.name,
                received: entry.total,
                expected: entry.expected >= 0 ? entry.expected : nil,
                bytesPerSecond: entry.meter.bytesPerSecond,
                connections: entry.connections,
                width: width
            )
        }
        guard self.totalFiles > 1 else { return nil }
        let rate = self.aggregateMeter.bytesPerSecond.map { ByteCountFormatting.rate(bytesPerSecond: $0) } ?? "-- B/s"
        let line = "[\(self.finishedFiles)/\(self.totalFiles) files] \(self.active.count) active  "
            + "\(ByteCountFormatting.bytes(self.allBytes))  \(rate)"
        return String(line.prefix(width))
    }
}
