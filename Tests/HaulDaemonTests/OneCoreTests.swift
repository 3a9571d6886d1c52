import Foundation
import HaulCore
import HaulTestSupport
import Testing

/// Background-session tasks and queue downloads run on one core: one scheduler, one engine,
/// one set of limits.
@Suite("hauld: one transfer core for both owners", .serialized)
struct OneCoreTests {
    @Test("4 background and 4 queue downloads to one host with max-per-host 4: at most 4 connections, and one global speed limit for all")
    func sharedLimits() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let daemon = try DaemonProcess()
        try await daemon.start()
        let downloads = daemon.dataDirectory.deletingLastPathComponent().appendingPathComponent("downloads")
        let client = try DaemonTestClient(socketPath: daemon.socketPath)
        for (key, value) in [("max-concurrent", "16"), ("max-per-host", "4"), ("speed-limit", "2M")] {
            let answer = try await client.request(DaemonRequest(.queueSettings(.init(settingKey: key, settingValue: value))))
            #expect(answer.error == nil, "\(answer.error ?? "")")
        }
        let size: Int64 = 700_000
        let started = ContinuousClock.now
        // Queue downloads first, background tasks right after: under the 2 MiB/s limit all
        // eight overlap. Completion events may arrive while a request waits for its answer.
        var completed = 0
        let count: (DaemonEvent) -> Void = { event in
            if event.kind == .completed {
                #expect(event.errorCode == nil, "\(event.errorMessage ?? "")")
                completed += 1
            }
        }
        let added = try await client.request(
            DaemonRequest(
                .queueAdd(
                    .batch(
                        (0..<4).map { index in
                            NewDownload(urls: [server.url("/file/q\(index)?size=\(size)&seed=\(index + 30)")], directory: downloads.path)
                        }
                    )
                )
            )
        )
        #expect(added.downloads?.count == 4, "\(added.error ?? "")")
        _ = try await client.request(.attach("shared"), events: count)
        for index in 0..<4 {
            let created = try await client.request(.download("shared", server.url("/file/bg\(index)?size=\(size)&seed=\(index + 20)")), events: count)
            _ = try await client.request(.resume("shared", created.taskID), events: count)
        }
        let watchdog = Task {
            try await Task.sleep(for: .seconds(60))
            client.close()
        }
        while completed < 4, let line = await client.readLine() {
            if let event = line.event { count(event) }
        }
        var queueDone = false
        for _ in 0..<600 where !queueDone {
            let list = try await client.request(DaemonRequest(.queueList(QueuePage())), events: count)
            queueDone = list.downloads?.allSatisfy { $0.state == .complete } == true
            if !queueDone { try await Task.sleep(for: .milliseconds(50)) }
        }
        watchdog.cancel()
        let elapsed = ContinuousClock.now - started
        #expect(completed == 4)
        #expect(queueDone)
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
        let rate = Double(size * 8) / seconds
        print("one core: 8 downloads of \(size) bytes in \(seconds) s = \(Int(rate)) B/s under a 2 MiB/s limit; peak connections \(server.peakOpenConnections)")
        #expect(server.peakOpenConnections <= 4, "the per-host limit counts both owners")
        #expect(server.peakOpenConnections >= 2)
        #expect(rate <= 2 * 1_048_576 * 1.25, "the global speed limit holds for background tasks and queue downloads together")
        for index in 0..<4 {
            #expect(server.bodyBytesSent(forKey: "bg\(index)") == size)
            #expect(server.bodyBytesSent(forKey: "q\(index)") == size)
        }
        client.close()
        _ = await daemon.terminate()
        daemon.cleanUp()
        try await server.shutdown()
    }
}
