import Foundation
import Haul

// A program that starts background downloads and exits, and a second run that collects them:
//
//   haul-background-demo start IDENTIFIER [--launch-dir DIR] URL...
//   haul-background-demo collect IDENTIFIER DIR
//
//   haul-background-demo start IDENTIFIER --relaunch URL...
//   haul-background-demo                      (as hauld launches it: HAUL_SESSION_IDENTIFIER set)
//
// `start` returns as soon as every task is durable in hauld. `collect` attaches to the same
// session, moves each finished file into DIR, prints one line per event, and exits after
// urlSessionDidFinishEvents once no task is left running. With --launch-dir, hauld itself runs
// `collect` into DIR when results are waiting and no client is attached (an explicit launch
// command). With --relaunch, hauld launches the program the library's default way: the
// executable with no arguments and the identifier in HAUL_SESSION_IDENTIFIER; run like that it
// collects into $HAUL_DEMO_COLLECT_DIR (default ./haul-demo-IDENTIFIER) and notes each launch
// in launches.log there.

final class Collector: TransferSessionDownloadDelegate, @unchecked Sendable {
    let directory: URL
    let done = DispatchSemaphore(value: 0)
    private let lock = NSLock()
    private var eventsFinished = false
    private var outstanding = Set<Int>()
    private var isTracking = false

    init(directory: URL) {
        self.directory = directory
    }

    func track(_ tasks: [TransferSessionTask]) {
        self.lock.withLock {
            self.outstanding.formUnion(tasks.map(\.taskIdentifier))
            self.isTracking = true
        }
        self.checkDone()
    }

    func say(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    func urlSession(_ session: TransferSession, downloadTask: TransferSessionDownloadTask, didFinishDownloadingTo location: URL) {
        let name = "\(downloadTask.taskIdentifier)-\(downloadTask.originalRequest?.url?.lastPathComponent ?? "download")"
        let target = self.directory.appendingPathComponent(name)
        do {
            try FileManager.default.moveItem(at: location, to: target)
            self.say("finished \(downloadTask.taskIdentifier) \(target.path)")
        } catch {
            self.say("finished \(downloadTask.taskIdentifier) move-failed \(error)")
        }
    }

    func urlSession(_ session: TransferSession, task: TransferSessionTask, didCompleteWithError error: (any Error)?) {
        self.say("completed \(task.taskIdentifier) \(error.map { "\($0.localizedDescription)" } ?? "ok")")
        self.lock.withLock { _ = self.outstanding.remove(task.taskIdentifier) }
        self.checkDone()
    }

    func urlSessionDidFinishEvents(forBackgroundURLSession session: TransferSession) {
        self.say("events-finished")
        self.lock.withLock { self.eventsFinished = true }
        self.checkDone()
    }

    let invalidated = DispatchSemaphore(value: 0)

    func urlSession(_ session: TransferSession, didBecomeInvalidWithError error: (any Error)?) {
        if let error {
            self.say("invalid \(error.localizedDescription)")
            exit(3)
        }
        self.invalidated.signal()
    }

    private func checkDone() {
        let finished = self.lock.withLock { self.isTracking && self.eventsFinished && self.outstanding.isEmpty }
        if finished { self.done.signal() }
    }
}

var arguments = Array(CommandLine.arguments.dropFirst())
if arguments.isEmpty, let launched = ProcessInfo.processInfo.environment["HAUL_SESSION_IDENTIFIER"] {
    // Launched by hauld for waiting results: collect them, nothing else.
    let environment = ProcessInfo.processInfo.environment
    let directory = environment["HAUL_DEMO_COLLECT_DIR"] ?? FileManager.default.currentDirectoryPath + "/haul-demo-\(launched)"
    try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let log = directory + "/launches.log"
    if !FileManager.default.fileExists(atPath: log) { FileManager.default.createFile(atPath: log, contents: nil) }
    if let handle = FileHandle(forWritingAtPath: log) {
        handle.seekToEndOfFile()
        handle.write(Data("launched \(environment["HAUL_LAUNCH_REASON"] ?? "?")\n".utf8))
        try? handle.close()
    }
    arguments = ["collect", launched, directory]
}
guard arguments.count >= 2 else {
    FileHandle.standardError.write(Data("usage: haul-background-demo start ID [--launch-dir DIR | --relaunch] URL... | collect ID DIR\n".utf8))
    exit(2)
}
let identifier = arguments[1]
switch arguments[0] {
case "start":
    var rest = Array(arguments.dropFirst(2))
    let configuration = TransferSessionConfiguration.background(withIdentifier: identifier)
    configuration.sessionSendsLaunchEvents = false
    if rest.first == "--launch-dir", rest.count >= 2 {
        configuration.sessionSendsLaunchEvents = true
        let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
        configuration.launchCommand = [executable, "collect", identifier, rest[1]]
        rest.removeFirst(2)
    } else if rest.first == "--relaunch" {
        // The library's default launch: this executable, no arguments.
        configuration.sessionSendsLaunchEvents = true
        rest.removeFirst()
    }
    let collector = Collector(directory: FileManager.default.temporaryDirectory)
    let session = TransferSession(configuration: configuration, delegate: collector, delegateQueue: nil)
    for text in rest {
        guard let url = URL(string: text) else { continue }
        let task = session.downloadTask(with: url)
        task.resume()  // durable in hauld once this returns
        collector.say("created \(task.taskIdentifier) \(url.absoluteString)")
    }
    exit(0)  // the downloads go on without us
case "collect":
    guard arguments.count >= 3 else { exit(2) }
    let directory = URL(fileURLWithPath: arguments[2], isDirectory: true)
    try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let collector = Collector(directory: directory)
    let configuration = TransferSessionConfiguration.background(withIdentifier: identifier)
    configuration.sessionSendsLaunchEvents = false
    let session = TransferSession(configuration: configuration, delegate: collector, delegateQueue: nil)
    let semaphore = DispatchSemaphore(value: 0)
    session.getAllTasks { tasks in
        // A task may have completed between the listing and this callback: its completion has
        // then already been delivered (same serial queue), so it is not waited for.
        let tasks = tasks.filter { $0.state != .completed }
        collector.track(tasks)
        for task in tasks { collector.say("running \(task.taskIdentifier) \(task.countOfBytesReceived)") }
        semaphore.signal()
    }
    semaphore.wait()
    if collector.done.wait(timeout: .now() + 120) == .timedOut {
        collector.say("timeout")
        exit(1)
    }
    // Let the queued delegate calls and their acknowledgements finish before exiting.
    session.finishTasksAndInvalidate()
    _ = collector.invalidated.wait(timeout: .now() + 10)
    exit(0)
default:
    exit(2)
}
