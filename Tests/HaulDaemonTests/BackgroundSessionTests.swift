import Foundation
import Haul
import HaulCore
import HaulTestSupport
import Testing

/// Runs `haul-background-demo` (a real client program using the Haul library) against a
/// private hauld, which the library starts by itself.
struct DemoClient {
    var environment: [String: String]

    init(daemon: DaemonProcess) {
        var environment = ProcessInfo.processInfo.environment
        environment["HAUL_DATA_DIR"] = daemon.dataDirectory.path
        environment["HAUL_RUNTIME_DIR"] = daemon.runtimeDirectory.path
        environment["HAUL_DAEMON_PATH"] = DaemonProcess.executable.path
        self.environment = environment
    }

    static var executable: URL {
        DaemonProcess.executable.deletingLastPathComponent().appendingPathComponent("haul-background-demo")
    }

    func run(_ arguments: [String]) async throws -> (status: Int32, lines: [String]) {
        let process = Process()
        process.executableURL = Self.executable
        process.arguments = arguments
        process.environment = self.environment
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        try process.run()
        let output = await blocking { pipe.fileHandleForReading.readDataToEndOfFile() }
        await blocking { process.waitUntilExit() }
        let lines = String(decoding: output, as: UTF8.self).split(separator: "\n").map(String.init)
        return (process.terminationStatus, lines)
    }
}

@Suite("Background sessions through the library", .serialized)
struct BackgroundSessionTests {
    @Test("start exits at once; transfers finish without it; collect gets each file and event once")
    func startExitCollect() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let daemon = try DaemonProcess()  // not started: the library starts hauld itself
        let client = DemoClient(daemon: daemon)
        let sizes: [Int64] = [1_500_000, 600_000]
        let urls = sizes.enumerated().map { server.url("/file/lib\($0.offset).bin?size=\($0.element)&seed=\($0.offset + 70)&rate=3000000").absoluteString }
        let started = ContinuousClock.now
        let start = try await client.run(["start", "demo"] + urls)
        #expect(start.status == 0)
        #expect(start.lines.filter { $0.hasPrefix("created ") }.count == 2)
        #expect(ContinuousClock.now - started < .seconds(10), "start returns once the tasks are durable")
        // The client is gone; the daemon carries on.
        #expect(await waitUntil(timeout: .seconds(30)) {
            sizes.indices.allSatisfy { server.bodyBytesSent(forKey: "lib\($0).bin") >= sizes[$0] }
        })
        try await Task.sleep(for: .milliseconds(300))

        let output = try makeTemporaryDirectory()
        let collect = try await client.run(["collect", "demo", output.path])
        #expect(collect.status == 0, "\(collect.lines)")
        let finished = collect.lines.filter { $0.hasPrefix("finished ") }
        #expect(finished.count == 2, "\(collect.lines)")
        #expect(collect.lines.filter { $0.hasPrefix("completed ") && $0.hasSuffix(" ok") }.count == 2)
        #expect(collect.lines.last == "events-finished", "urlSessionDidFinishEvents comes after the events")
        for (index, size) in sizes.enumerated() {
            let file = try #require(try FileManager.default.contentsOfDirectory(atPath: output.path).first { $0.hasSuffix("lib\(index).bin") })
            #expect(try TestContent.sha256Hex(ofFileAt: output.appendingPathComponent(file).path) == TestContent.sha256Hex(size: size, seed: UInt64(index + 70)))
        }
        let heldDirectory = daemon.dataDirectory.appendingPathComponent("held/demo").path
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: heldDirectory)) ?? []).isEmpty, "held files are gone once taken")

        let again = try await client.run(["collect", "demo", output.path])
        #expect(again.lines == ["events-finished"], "nothing is delivered twice: \(again.lines)")
        await Self.stopDaemon(daemon)
        try await server.shutdown()
    }

    @Test("sessionSendsLaunchEvents: hauld launches the client when results wait and none is attached")
    func launchEvents() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let daemon = try DaemonProcess()
        let client = DemoClient(daemon: daemon)
        let output = try makeTemporaryDirectory()
        let start = try await client.run(["start", "woken", "--launch-dir", output.path, server.url("/file/wake.bin?size=500000&seed=3&rate=2000000").absoluteString])
        #expect(start.status == 0)
        let arrived = await waitUntil(timeout: .seconds(30)) {
            ((try? FileManager.default.contentsOfDirectory(atPath: output.path)) ?? []).contains { $0.hasSuffix("wake.bin") }
        }
        #expect(arrived, "the launched client collected the file")
        if arrived {
            let name = try FileManager.default.contentsOfDirectory(atPath: output.path).first { $0.hasSuffix("wake.bin") }!
            #expect(try TestContent.sha256Hex(ofFileAt: output.appendingPathComponent(name).path) == TestContent.sha256Hex(size: 500_000, seed: 3))
        }
        await Self.stopDaemon(daemon)
        try await server.shutdown()
    }

    @Test("The default launch runs the executable without its arguments: results delivered once, no work created again")
    func defaultLaunchNeverRepeatsWork() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let daemon = try DaemonProcess()
        var client = DemoClient(daemon: daemon)
        let output = try makeTemporaryDirectory()
        // hauld inherits this from the demo that starts it, and the launched demo from hauld.
        client.environment["HAUL_DEMO_COLLECT_DIR"] = output.path
        let url = server.url("/file/relaunch.bin?size=400000&seed=8&rate=2000000").absoluteString
        let start = try await client.run(["start", "relaunched", "--relaunch", url])
        #expect(start.status == 0 && start.lines.filter { $0.hasPrefix("created") }.count == 1, "\(start.lines)")
        let arrived = await waitUntil(timeout: .seconds(30)) {
            ((try? FileManager.default.contentsOfDirectory(atPath: output.path)) ?? []).contains { $0.hasSuffix("relaunch.bin") }
        }
        #expect(arrived, "the launched program collected the file")
        // Past the launch interval: nothing more is launched, downloaded or created.
        try await Task.sleep(for: .seconds(12))
        let files = ((try? FileManager.default.contentsOfDirectory(atPath: output.path)) ?? []).filter { $0.hasSuffix("relaunch.bin") }
        #expect(files.count == 1, "\(files)")
        if let name = files.first {
            #expect(try TestContent.sha256Hex(ofFileAt: output.appendingPathComponent(name).path) == TestContent.sha256Hex(size: 400_000, seed: 8))
        }
        #expect(server.requestCount(forKey: "relaunch.bin") == 1, "the file was fetched once, not again per launch")
        let launches = (try? String(contentsOf: output.appendingPathComponent("launches.log"), encoding: .utf8)) ?? ""
        #expect(launches == "launched background-events\n", "launched once, without the creating arguments: \(launches)")
        let socket = try DaemonTestClient(socketPath: daemon.socketPath)
        let tasks = try await socket.request(DaemonRequest(.listTasks(.init(session: "relaunched"))))
        #expect((tasks.tasks ?? []).isEmpty, "no task was created again: \(tasks.tasks ?? [])")
        socket.close()
        await Self.stopDaemon(daemon)
        try await server.shutdown()
    }

    @Test("SIGTERM pauses transfers resumably; the next daemon continues them")
    func gracefulShutdown() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let daemon = try DaemonProcess()
        try await daemon.start()
        let client = try DaemonTestClient(socketPath: daemon.socketPath)
        _ = try await client.request(.attach("term"))
        let size: Int64 = 4_000_000
        let created = try await client.request(.download("term", server.url("/file/term.bin?size=\(size)&seed=9&rate=2000000")))
        _ = try await client.request(.resume("term", created.taskID))
        client.close()
        #expect(await waitUntil { server.bodyBytesSent(forKey: "term.bin") > 1_000_000 })
        #expect(await daemon.terminate() == 0, "graceful shutdown exits 0")
        // What the stopped daemon kept: its one partial file. The next daemon must continue from
        // exactly its end (bytes the server sent that never reached the file are sent again; how
        // many depends on how fast the stop was, not on the checkpoint).
        let partials = try FileManager.default.contentsOfDirectory(atPath: daemon.dataDirectory.appendingPathComponent("partial").path)
        try #require(partials.count == 1, "\(partials)")
        let kept = try #require(fileSize(daemon.dataDirectory.appendingPathComponent("partial").appendingPathComponent(partials[0]).path))
        #expect(kept > 1_000_000 && kept < size)
        try await daemon.start()
        let collector = try DaemonTestClient(socketPath: daemon.socketPath)
        var (_, events) = try await collectBacklog(collector, session: "term")
        let watchdog = Task {
            try await Task.sleep(for: .seconds(30))
            collector.close()
        }
        while !events.contains(where: { $0.kind == .completed }), let line = await collector.readLine() {
            if let event = line.event, event.kind == .finishedDownloading || event.kind == .completed { events.append(event) }
        }
        watchdog.cancel()
        let held = try #require(events.first { $0.kind == .finishedDownloading }?.heldFilePath)
        #expect(try TestContent.sha256Hex(ofFileAt: held) == TestContent.sha256Hex(size: size, seed: 9))
        #expect(server.requests.last?.header("Range") == "bytes=\(kept)-", "a graceful stop checkpoints the exact offset: \(kept) bytes kept")
        collector.close()
        _ = await daemon.terminate()
        daemon.cleanUp()
        try await server.shutdown()
    }

    @Test("A background download over four connections: kill -9 of hauld mid-download, the next daemon continues every segment from the synced map")
    func segmentedBackgroundDownload() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let daemon = try DaemonProcess()
        try await daemon.start()
        let client = try DaemonTestClient(socketPath: daemon.socketPath)
        _ = try await client.request(.attach("seg"))
        let size: Int64 = 16 << 20
        let created = try await client.request(.download("seg", server.url("/file/bgseg.bin?size=\(size)&seed=19&rate=1000000"), connections: 4))
        _ = try await client.request(.resume("seg", created.taskID))
        client.close()
        let ranged = { server.requests.filter { ($0.header("Range") ?? "").hasSuffix("-") == false && $0.header("Range") != nil }.count }
        #expect(await waitUntil(timeout: .seconds(20)) { ranged() >= 3 && server.bodyBytesSent(forKey: "bgseg.bin") > 6 << 20 })
        try await Task.sleep(for: .milliseconds(1000))  // past a checkpoint (every 0.5 s), even on a loaded run
        await daemon.kill9()
        let before = server.bodyBytesSent(forKey: "bgseg.bin")
        #expect(before < size - (2 << 20), "killed mid-download")
        try await daemon.start()
        let collector = try DaemonTestClient(socketPath: daemon.socketPath)
        var (_, events) = try await collectBacklog(collector, session: "seg")
        let watchdog = Task {
            try await Task.sleep(for: .seconds(40))
            collector.close()
        }
        while !events.contains(where: { $0.kind == .completed }), let line = await collector.readLine() {
            if let event = line.event, event.kind == .finishedDownloading || event.kind == .completed { events.append(event) }
        }
        watchdog.cancel()
        let held = try #require(events.first { $0.kind == .finishedDownloading }?.heldFilePath)
        #expect(try TestContent.sha256Hex(ofFileAt: held) == TestContent.sha256Hex(size: size, seed: 19))
        let again = server.bodyBytesSent(forKey: "bgseg.bin") - size
        #expect(again < 4 << 20, "fetched again after kill -9: \(again) bytes (\(before) before)")
        print("background segmented kill -9: \(again) bytes fetched again of \(size) (\(before) before the kill)")
        collector.close()
        _ = await daemon.terminate()
        daemon.cleanUp()
        try await server.shutdown()
    }

    @Test("An upload from a file runs in hauld; its response body arrives before the completion")
    func backgroundUpload() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let daemon = try DaemonProcess()
        setenv("HAUL_DATA_DIR", daemon.dataDirectory.path, 1)
        setenv("HAUL_RUNTIME_DIR", daemon.runtimeDirectory.path, 1)
        setenv("HAUL_DAEMON_PATH", DaemonProcess.executable.path, 1)
        defer {
            unsetenv("HAUL_DATA_DIR")
            unsetenv("HAUL_RUNTIME_DIR")
        }
        let file = try makeTemporaryDirectory().appendingPathComponent("upload.bin")
        let bytes = Data(TestContent.bytes(0..<700_000, seed: 23))
        try bytes.write(to: file)
        let delegate = CompletionRecorder()
        let session = TransferSession(configuration: .background(withIdentifier: "uploads"), delegate: delegate, delegateQueue: nil)
        var request = URLRequest(url: server.url("/echo"))
        request.httpMethod = "POST"
        let task = session.uploadTask(with: request, fromFile: file)
        #expect(task.countOfBytesExpectedToSend == 700_000)
        task.resume()
        let error = await delegate.completion()
        #expect(error == nil)
        #expect(delegate.received == bytes, "the echoed body arrives through didReceive data")
        #expect((task.response as? HTTPURLResponse)?.statusCode == 200)
        session.finishTasksAndInvalidate()
        await Self.stopDaemon(daemon)
        try await server.shutdown()
    }

    @Test("Resume data from an in-process session continues in hauld, which takes the partial file over")
    func resumeDataIntoBackground() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let daemon = try DaemonProcess()
        setenv("HAUL_DATA_DIR", daemon.dataDirectory.path, 1)
        setenv("HAUL_RUNTIME_DIR", daemon.runtimeDirectory.path, 1)
        setenv("HAUL_DAEMON_PATH", DaemonProcess.executable.path, 1)
        defer {
            unsetenv("HAUL_DATA_DIR")
            unsetenv("HAUL_RUNTIME_DIR")
        }
        let size: Int64 = 1_200_000
        let url = server.url("/file/handover.bin?size=\(size)&seed=31&cutAfter=400000&cutMode=close")
        let local = TransferSession(configuration: .default)
        let failure = await #expect(throws: URLError.self) { _ = try await local.download(from: url) }
        let resumeData = try #require(failure?.userInfo[TransferSessionDownloadTaskResumeData] as? Data)
        local.finishTasksAndInvalidate()

        let delegate = CompletionRecorder()
        let session = TransferSession(configuration: .background(withIdentifier: "handover"), delegate: delegate, delegateQueue: nil)
        let task = session.downloadTask(withResumeData: resumeData)
        task.resume()
        let error = await delegate.completion()
        #expect(error == nil)
        #expect(delegate.digest == TestContent.sha256Hex(size: size, seed: 31))
        #expect(delegate.resumedAt == [400_000])
        #expect(server.bodyBytesSent(forKey: "handover.bin") == size, "no byte was fetched twice")
        session.finishTasksAndInvalidate()
        await Self.stopDaemon(daemon)
        try await server.shutdown()
    }

    /// Stops a daemon the library started (it is not our child): SIGTERM through its lock file.
    static func stopDaemon(_ daemon: DaemonProcess) async {
        let lock = daemon.dataDirectory.appendingPathComponent("hauld.lock").path
        if let text = try? String(contentsOfFile: lock, encoding: .utf8), let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
            kill(pid, SIGTERM)
            _ = await waitUntil(timeout: .seconds(10)) { kill(pid, 0) != 0 }
        }
        daemon.cleanUp()
    }
}

func makeTemporaryDirectory() throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("haul-bg-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}

/// Records what the background-session tests look at: the finished file's digest, resume
/// offsets, received data and the completion.
final class CompletionRecorder: TransferSessionDownloadDelegate, TransferSessionDataDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var data = Data()
    var received: Data { self.lock.withLock { self.data } }

    func urlSession(_ session: TransferSession, dataTask: TransferSessionDataTask, didReceive data: Data) {
        self.lock.withLock { self.data.append(data) }
    }

    private var result: (any Error)??
    private var waiter: CheckedContinuation<(any Error)?, Never>?
    private(set) var digest: String?
    private(set) var resumedAt: [Int64] = []

    func urlSession(_ session: TransferSession, downloadTask: TransferSessionDownloadTask, didFinishDownloadingTo location: URL) {
        let digest = try? TestContent.sha256Hex(ofFileAt: location.path)
        self.lock.withLock { self.digest = digest }
    }

    func urlSession(_ session: TransferSession, downloadTask: TransferSessionDownloadTask, didResumeAtOffset fileOffset: Int64, expectedTotalBytes: Int64) {
        self.lock.withLock { self.resumedAt.append(fileOffset) }
    }

    func urlSession(_ session: TransferSession, task: TransferSessionTask, didCompleteWithError error: (any Error)?) {
        let waiter = self.lock.withLock { () -> CheckedContinuation<(any Error)?, Never>? in
            self.result = .some(error)
            defer { self.waiter = nil }
            return self.waiter
        }
        waiter?.resume(returning: error)
    }

    /// Waits for the completion; a test that would wait longer than 60 s gets a timeout error.
    func completion() async -> (any Error)? {
        await withCheckedContinuation { continuation in
            let done: (any Error)?? = self.lock.withLock {
                if let result = self.result { return .some(result) }
                self.waiter = continuation
                return nil
            }
            if let done {
                continuation.resume(returning: done)
                return
            }
            DispatchQueue.global().asyncAfter(deadline: .now() + 60) {
                let waiter = self.lock.withLock { () -> CheckedContinuation<(any Error)?, Never>? in
                    defer { self.waiter = nil }
                    return self.waiter
                }
                waiter?.resume(returning: DaemonTestError("no completion within 60 s"))
            }
        }
    }
}
