import Foundation
import HaulCore
import HaulDaemonClient
import HaulTestSupport
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A private directory for a fake daemon's socket, removed by ``remove()``.
struct ScratchDirectory {
    let directory: URL
    var paths: DaemonPaths { DaemonPaths(dataDirectory: self.directory, runtimeDirectory: self.directory) }

    init() throws {
        self.directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-client-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: self.directory, withIntermediateDirectories: true)
    }

    func remove() { try? FileManager.default.removeItem(at: self.directory) }
}

@Suite("The daemon client")
struct DaemonClientTests {
    /// A Unix socket listening at `path`.
    static func listening(at path: String) throws -> Int32 {
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        try #require(listener >= 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            path.utf8CString.withUnsafeBytes { raw.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0.prefix(raw.count - 1))) }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        try #require(bound == 0 && listen(listener, 16) == 0)
        return listener
    }

    /// Stops the socket `listening(at:)` made.
    static func stop(_ listener: Int32, at path: String) {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        unlink(path)
    }

    /// A Unix socket at `path` whose first connection `serve` handles on a thread of its own,
    /// as a daemon would; the connection is closed when `serve` returns. Returns how to stop it.
    static func serveOnce(at path: String, _ serve: @escaping @Sendable (Int32) -> Void) throws -> () -> Void {
        let listener = try Self.listening(at: path)
        Thread {
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { return }
            defer { close(connection) }
            serve(connection)
        }.start()
        return { Self.stop(listener, at: path) }
    }

    /// Reads `connection` up to and with the end of a request line (false: it closed first).
    @discardableResult
    static func readRequestLine(_ connection: Int32) -> Bool {
        var byte: UInt8 = 0
        while read(connection, &byte, 1) == 1 {
            if byte == UInt8(ascii: "\n") { return true }
        }
        return false
    }

    /// Writes `lines`, each ended by a newline, `piece` bytes per write (false: the peer went).
    @discardableResult
    static func write(_ lines: [String], to connection: Int32, piece: Int = .max) -> Bool {
        let bytes = Array(lines.map { $0 + "\n" }.joined().utf8)
        var sent = 0
        while sent < bytes.count {
            let written = bytes[sent..<min(sent + piece, bytes.count)].withUnsafeBytes { Glibc.write(connection, $0.baseAddress, $0.count) }
            guard written > 0 else { return false }
            sent += written
        }
        return true
    }

    /// A Unix socket at `path` whose every connection is accepted and closed at once, as by a
    /// daemon killed right after accepting it. Returns how to stop it.
    static func acceptAndClose(at path: String) throws -> () -> Void {
        let listener = try Self.listening(at: path)
        let thread = Thread {
            while true {
                let connection = accept(listener, nil, nil)
                if connection < 0 { return }
                close(connection)
            }
        }
        thread.start()
        return { Self.stop(listener, at: path) }
    }

    /// The two clients of the daemon's socket: the event-loop one (background sessions, `haul
    /// wait`) and the blocking one (`haul ls`, `haul add` and the other one-shot commands).
    enum Client: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case events, lines

        var testDescription: String { self.rawValue }

        /// A connection to the daemon at `paths`: how to ask it, how to close it.
        func connect(paths: DaemonPaths) throws -> (call: (DaemonRequest) throws -> DaemonResponse, close: () -> Void) {
            switch self {
            case .events:
                let client = try BackgroundDaemonClient.connectOnce(paths: paths)
                return (client.call, client.close)
            case .lines:
                let connection = try DaemonLineConnection.connectOnce(paths: paths)
                return (connection.call, connection.close)
            }
        }

        /// Connects to the daemon at `paths` and asks `request` once.
        func call(_ request: DaemonRequest, paths: DaemonPaths) throws -> DaemonResponse {
            try self.connect(paths: paths).call(request)
        }
    }

    @Test("A connection the daemon closes at once fails each request at once, not after the 30 s answer timeout", arguments: Client.allCases)
    func closedRightAfterAccept(client: Client) async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let paths = scratch.paths
        let stop = try Self.acceptAndClose(at: paths.socketPath)
        defer { stop() }
        for _ in 0..<20 {
            let started = ContinuousClock.now
            let outcome = await blocking { () -> Result<DaemonResponse, any Error> in
                Result { try client.call(DaemonRequest(.ping), paths: paths) }
            }
            #expect(throws: (any Error).self) { try outcome.get() }
            #expect(ContinuousClock.now - started < .seconds(5), "the closed connection was noticed")
        }
    }

    @Test("A request longer than hauld takes in one line fails in the client with what to do, nothing sent: the connection stays open", arguments: Client.allCases)
    func overlongRequest(kind: Client) async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        defer { daemon.cleanUp() }
        let paths = DaemonPaths(dataDirectory: daemon.dataDirectory, runtimeDirectory: daemon.runtimeDirectory)
        let huge = NewDownload(urls: [URL(string: "http://127.0.0.1:9/" + String(repeating: "x", count: DaemonProtocol.maximumLineLength))!], paused: true)
        let (refused, answered) = await blocking { () -> (String, Bool) in
            guard let client = try? kind.connect(paths: paths) else { return ("no connection", false) }
            defer { client.close() }
            let refused = Result { try client.call(DaemonRequest(.queueAdd(.batch([huge])))) }
            // Had the line gone out, hauld would have closed the connection.
            let answered = (try? client.call(DaemonRequest(.ping)))?.processID != nil
            if case .failure(let error) = refused { return ("\(error)", answered) }
            return ("answered", answered)
        }
        #expect(refused.contains("queueAdd takes") && refused.contains("more than one request to hauld may carry"), "\(refused)")
        #expect(answered, "the same connection answers the next request")

        // A request whose line is the limit exactly (before its newline, as the daemon counts)
        // goes out and is answered: the client refused it once (it counted the newline).
        let exact = await blocking { () -> String in
            guard let client = try? kind.connect(paths: paths) else { return "no connection" }
            defer { client.close() }
            // A fresh client's first request has id 1.
            func request(padding: Int) -> DaemonRequest {
                DaemonRequest(id: 1, .queueAdd(.batch([NewDownload(urls: [URL(string: "http://127.0.0.1:9/" + String(repeating: "e", count: padding))!], paused: true)])))
            }
            let probe = (try? request(padding: 0).encodedLine().count) ?? 0
            let padding = DaemonProtocol.maximumLineLength - (probe - 1)
            guard (try? request(padding: padding).encodedLine().count) == DaemonProtocol.maximumLineLength + 1 else { return "cannot make the line" }
            switch Result(catching: { try client.call(request(padding: padding)) }) {
            case .success(let response): return response.downloads?.count == 1 ? "added" : "answered without the download"
            case .failure(let error): return "\(error)"
            }
        }
        #expect(exact == "added", "\(exact)")

        // The daemon's own limit, exactly: a line one byte over it is refused with a message and
        // the connection closed, whatever the reads it came in; one at it is read.
        for extra in [0, 1] {
            let raw = try DaemonTestClient(socketPath: daemon.socketPath)
            defer { raw.close() }
            let prefix = Array(#"{"id":5,"method":"ping","pad":""#.utf8)
            let suffix = Array(#""}"#.utf8)
            var line = prefix + [UInt8](repeating: UInt8(ascii: "p"), count: DaemonProtocol.maximumLineLength - prefix.count - suffix.count + extra) + suffix
            #expect(line.count == DaemonProtocol.maximumLineLength + extra)
            line.append(UInt8(ascii: "\n"))
            raw.sendRaw(line)
            let answer = await raw.readLine()
            if extra == 0 {
                #expect(answer?.response?.id == 5 && answer?.response?.error == nil, "a line of the limit is taken")
            } else {
                let refused = answer?.response?.error?.contains("request line longer than") == true
                #expect(refused, "one byte more is refused: \(String(describing: answer))")
                // (Waited for only when refused: a connection that stays open would hold the test.)
                if refused { #expect(await raw.readLine() == nil, "and the connection closed") }
            }
        }
        _ = await daemon.terminate()
    }

    /// A Unix socket at `path` that answers its first connection's first request line with
    /// `events` event lines, then the answer. Returns how to stop it.
    static func answerAfterEvents(at path: String, events: Int) throws -> () -> Void {
        try Self.serveOnce(at: path) { connection in
            Self.readRequestLine(connection)
            let event = #"{"event":{"kind":"progress","taskID":7,"bytesOnDisk":1}}"#
            Self.write(Array(repeating: event, count: events) + [#"{"response":{"id":1}}"#], to: connection)
        }
    }

    @Test("The event handler is called the same way for the thousandth event as for the first (no thunk more for each event heard)")
    func eventHandlerDepthStaysFlat() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let paths = scratch.paths
        let count = 2000
        let stop = try Self.answerAfterEvents(at: paths.socketPath, events: count)
        defer { stop() }
        // The stack depth at which the handler runs, for each event.
        let depths = Mutex<[Int]>([])
        let outcome = await blocking { () -> Result<DaemonResponse, any Error> in
            Result {
                let client = try BackgroundDaemonClient.connectOnce(paths: paths)
                defer { client.close() }
                client.onEvent { _ in
                    let depth = Thread.callStackReturnAddresses.count
                    depths.withLock { $0.append(depth) }
                }
                return try client.call(DaemonRequest(.ping))
            }
        }
        _ = try outcome.get()
        let seen = depths.withLock { $0 }
        #expect(seen.count == count, "every event before the answer reached the handler")
        // The network stack may call it a few frames deeper or shallower (a read that found
        // the socket drained, a buffer grown); a thunk more for every event heard made the
        // last one thousands of frames deeper than the first.
        let (low, high) = (seen.min() ?? 0, seen.max() ?? 0)
        #expect(high - low <= 16, "depths from \(low) to \(high) frames")
    }

    @Test("The blocking client reads past events and lines it cannot read to its answer, however the bytes come")
    func linesSkipEvents() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let paths = scratch.paths
        // 2,000 event lines (~120 KB: more than one read) before the answer.
        let stop = try Self.answerAfterEvents(at: paths.socketPath, events: 2000)
        defer { stop() }
        let outcome = await blocking { Result { try Client.lines.call(DaemonRequest(.ping), paths: paths) } }
        #expect(try outcome.get().id == 1)
    }

    @Test("An answer of megabytes, written in many pieces after an event line, reaches its call whole", arguments: Client.allCases)
    func longAnswer(client: Client) async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let paths = scratch.paths
        let padding = String(repeating: "w", count: 3_000_000)
        let stop = try Self.serveOnce(at: paths.socketPath) { connection in
            Self.readRequestLine(connection)
            // In pieces of 1,000 bytes, each its own write; then open until the client closes.
            let lines = [#"{"event":{"kind":"progress","taskID":7}}"#, #"{"response":{"id":1,"webURL":"\#(padding)"}}"#]
            guard Self.write(lines, to: connection, piece: 1000) else { return }
            while Self.readRequestLine(connection) {}
        }
        defer { stop() }
        let outcome = await blocking { Result { try client.call(DaemonRequest(.ping), paths: paths) } }
        #expect(try outcome.get().webURL == padding)
    }

    @Test("The blocking client hands events to its handler in order: those before an answer during the call, later ones when asked; it returns once they are read, after the time given when none come, and says when the daemon closed")
    func linesReadEvents() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let paths = scratch.paths
        @Sendable func event(_ taskID: Int) -> String { #"{"event":{"kind":"progress","taskID":\#(taskID)}}"# }
        // The server closes once the client has seen that nothing more comes, not after a fixed
        // time: a loaded machine (a parallel run of the whole suite) delayed the client's third
        // step past the close, which it then heard there, and the fourth found the connection
        // already closed.
        let mayClose = DispatchSemaphore(value: 0)
        let stop = try Self.serveOnce(at: paths.socketPath) { connection in
            Self.readRequestLine(connection)
            Self.write([event(1), #"{"response":{"id":1}}"#], to: connection)
            Thread.sleep(forTimeInterval: 0.3)
            Self.write([event(2), event(3)], to: connection)
            _ = mayClose.wait(timeout: .now() + 30)
        }
        defer { stop() }
        let heard = Mutex<[Int64]>([])
        let steps = await blocking { () -> [String] in
            guard let connection = try? DaemonLineConnection.connectOnce(paths: paths, timeout: .seconds(5)) else { return ["no connection"] }
            defer { connection.close() }
            connection.onEvent { event in heard.withLock { $0.append(event.taskID ?? 0) } }
            var steps: [String] = []
            let answered = (try? connection.call(DaemonRequest(.ping)))?.id == 1
            steps.append("answered \(answered), heard \(heard.withLock { $0 })")
            var started = ContinuousClock.now
            try? connection.readEvents(timeout: .seconds(3))
            steps.append("heard \(heard.withLock { $0 }) within a second: \(ContinuousClock.now - started < .seconds(1))")
            started = ContinuousClock.now
            try? connection.readEvents(timeout: .milliseconds(200))
            let waited = ContinuousClock.now - started
            steps.append("nothing more, waited the time given: \(waited >= .milliseconds(200) && waited < .milliseconds(900))")
            mayClose.signal()
            do {
                try connection.readEvents(timeout: .seconds(3))
                steps.append("no error")
            } catch {
                steps.append("\(error)")
            }
            return steps
        }
        #expect(steps.count == 4)
        #expect(steps.first == "answered true, heard [1]")
        #expect(steps.dropFirst().first == "heard [1, 2, 3] within a second: true")
        #expect(steps.dropFirst(2).first == "nothing more, waited the time given: true")
        #expect(steps.last?.contains("hauld closed the connection") == true, "\(steps)")
    }

    @Test("The blocking client keeps what it read past an answer for the next call")
    func linesKeepReadAhead() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let paths = scratch.paths
        // Both answers (an event between them) in one write, after the first request; the
        // connection closed after the second request: an answer not kept is never read.
        let stop = try Self.serveOnce(at: paths.socketPath) { connection in
            Self.readRequestLine(connection)
            Self.write([#"{"response":{"id":1,"count":1}}"#, #"{"event":{"kind":"progress","taskID":7}}"#, #"{"response":{"id":2,"count":2}}"#], to: connection)
            Self.readRequestLine(connection)
        }
        defer { stop() }
        let counts = await blocking { () -> [Int?] in
            guard let connection = try? DaemonLineConnection.connectOnce(paths: paths, timeout: .seconds(5)) else { return [] }
            defer { connection.close() }
            return [(try? connection.call(DaemonRequest(.ping)))?.count, (try? connection.call(DaemonRequest(.ping)))?.count]
        }
        #expect(counts == [1, 2])
    }

    @Test("The blocking client gives up on a daemon that does not answer, says which request, and its later calls fail at once")
    func linesTimeOut() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let paths = scratch.paths
        // Accepts and reads, never answers.
        let listener = try Self.listening(at: paths.socketPath)
        defer { Self.stop(listener, at: paths.socketPath) }
        let accepted = Mutex<[Int32]>([])
        Thread {
            let connection = accept(listener, nil, nil)
            if connection >= 0 { accepted.withLock { $0.append(connection) } }
        }.start()
        defer { accepted.withLock { $0 }.forEach { close($0) } }
        let (first, elapsed, second) = await blocking { () -> (String, Duration, String) in
            guard let connection = try? DaemonLineConnection.connectOnce(paths: paths, timeout: .milliseconds(300)) else { return ("no connection", .zero, "") }
            defer { connection.close() }
            let started = ContinuousClock.now
            let first = Result { try connection.call(DaemonRequest(.queueList(QueuePage()))) }
            let elapsed = ContinuousClock.now - started
            let second = Result { try connection.call(DaemonRequest(.ping)) }
            func text(_ result: Result<DaemonResponse, any Error>) -> String {
                if case .failure(let error) = result { return "\(error)" }
                return "answered"
            }
            return (text(first), elapsed, text(second))
        }
        #expect(first.contains("hauld did not answer queueList within"), "\(first)")
        #expect(elapsed >= .milliseconds(300) && elapsed < .seconds(5), "\(elapsed)")
        #expect(second.contains("closed"), "a connection whose answer is still due cannot be read in order any more: \(second)")
    }
}
