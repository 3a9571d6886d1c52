import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HaulEngine
import NIOCore
import NIOPosix
import Testing

/// The writer that keeps disk writes off the event loop: order, back-pressure, reporting and
/// errors, against real files (and `/dev/full` for a full disk).
@Suite("FileBodyWriter: body bytes reach the file off the event loop")
struct FileBodyWriterTests {
    let eventLoop = MultiThreadedEventLoopGroup.singleton.next()

    func temporaryPath() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("haul-writer-\(UUID().uuidString)").path
    }

    /// Chunks of varying sizes whose bytes encode their position, so any reordering shows.
    func chunks(count: Int) -> [ByteBuffer] {
        var start = 0
        return (0..<count).map { index in
            let size = 1 + (index * 7919) % 40_000
            defer { start += size }
            return ByteBuffer(bytes: (start..<(start + size)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 8) })
        }
    }

    func expectedBytes(_ chunks: [ByteBuffer], prefix: Int = 0) -> Data {
        var data = Data(repeating: 0xEE, count: prefix)
        for chunk in chunks { data.append(contentsOf: chunk.readableBytesView) }
        return data
    }

    /// A writer of a new file at `path` from offset 0 that reports each write to `reported`.
    func reportingWriter(path: String, reported: ReportedBytes) async throws -> FileBodyWriter {
        try await self.eventLoop.submit {
            FileBodyWriter(
                open: { () throws(URLError) -> PartialFile in try PartialFile.open(path: path) },
                offset: 0,
                eventLoop: self.eventLoop
            ) { count in reported.add(count, sizeOnDisk: PartialFile.size(at: path) ?? 0) }
        }.get()
    }

    /// Feeds `chunks` as an exchange would: from the event loop, waiting whenever asked to.
    /// `together`: as many chunks as the writer takes without asking to wait are queued in one
    /// turn of the loop (a fast network's reads, without the test's hop to the loop for each:
    /// on a loaded machine a hop can outlast the flush delay, and every chunk went alone).
    func feed(_ writer: FileBodyWriter, _ chunks: [ByteBuffer], together: Bool = false) async throws -> Int {
        var waits = 0
        var next = 0
        while next < chunks.count {
            let start = next
            let (queued, room) = try await self.eventLoop.submit { () -> (Int, EventLoopFuture<Void>?) in
                var queued = 0
                repeat {
                    let room = writer.enqueue(chunks[start + queued])
                    queued += 1
                    if let room { return (queued, room) }
                } while together && start + queued < chunks.count
                return (queued, nil)
            }.get()
            next += queued
            if let room {
                waits += 1
                try await room.get()
            }
        }
        return waits
    }

    @Test("Bytes land in order at the resume offset; each byte is reported once, after it is written")
    func orderAndReporting() async throws {
        let path = self.temporaryPath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        try Data(repeating: 0xEE, count: 1000).write(to: URL(fileURLWithPath: path))
        let reported = ReportedBytes()
        let writer = try await self.eventLoop.submit {
            FileBodyWriter(
                open: { () throws(URLError) -> PartialFile in
                    let file = try PartialFile.open(path: path)
                    try file.truncate(to: 1000)
                    return file
                },
                offset: 1000,
                eventLoop: self.eventLoop
            ) { count in
                reported.add(count, sizeOnDisk: PartialFile.size(at: path) ?? 0)
            }
        }.get()
        let chunks = self.chunks(count: 400)
        _ = try await self.feed(writer, chunks, together: true)
        #expect(await writer.drain() == nil)
        let expected = self.expectedBytes(chunks, prefix: 1000)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == expected)
        #expect(reported.total == expected.count - 1000)
        #expect(reported.neverAheadOfDisk(offset: 1000))
        // Chunks gather into batches (256 KiB each, about 8 MB here): far fewer reports than chunks.
        #expect(reported.calls <= chunks.count / 2, "\(reported.calls) batches for \(chunks.count) chunks")
    }

    @Test("A lone small chunk reaches the file within the flush delay, with no drain (a slow download shows progress)")
    func smallChunkIsFlushed() async throws {
        let path = self.temporaryPath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let reported = ReportedBytes()
        let writer = try await self.reportingWriter(path: path, reported: reported)
        _ = try await self.eventLoop.submit { writer.enqueue(ByteBuffer(repeating: 7, count: 100)) }.get()
        let deadline = ContinuousClock.now + .seconds(2)
        while reported.total < 100, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(2)) }
        #expect(reported.total == 100)
        #expect(PartialFile.size(at: path) == 100)
        #expect(await writer.drain() == nil)
    }

    @Test("Once drained for the exchange's end, a part that still arrives is not written: the file holds what was counted")
    func nothingAfterTheDrain() async throws {
        let path = self.temporaryPath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let reported = ReportedBytes()
        let writer = try await self.reportingWriter(path: path, reported: reported)
        let chunks = self.chunks(count: 20)
        _ = try await self.feed(writer, chunks)
        #expect(await writer.drain() == nil)
        let counted = reported.total
        // A read that was under way when the exchange was cancelled delivers its bytes late.
        let late = try await self.eventLoop.submit { writer.enqueue(ByteBuffer(repeating: 9, count: 65_536)) }.get()
        #expect(late == nil)
        try await Task.sleep(for: .milliseconds(50))  // past the flush delay
        #expect(await writer.drain() == nil)
        #expect(reported.total == counted)
        #expect(PartialFile.size(at: path) == Int64(counted))
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == self.expectedBytes(chunks))
    }

    @Test("Above the buffer limit the exchange is told to wait, and everything still arrives")
    func backPressure() async throws {
        let path = self.temporaryPath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let writer = try await self.eventLoop.submit {
            FileBodyWriter(
                open: { () throws(URLError) -> PartialFile in try PartialFile.open(path: path) },
                offset: 0,
                eventLoop: self.eventLoop,
                bufferLimit: 64 * 1024
            ) { _ in }
        }.get()
        // Queued in one go on the loop: the first write cannot have finished, so the limit is hit.
        let chunks = self.chunks(count: 300)
        let rooms = try await self.eventLoop.submit { chunks.compactMap { writer.enqueue($0) } }.get()
        #expect(!rooms.isEmpty)
        for room in rooms { try await room.get() }
        #expect(await writer.drain() == nil)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == self.expectedBytes(chunks))
    }

    @Test("A full disk fails the next enqueue and the drain with the system's reason")
    func fullDisk() async throws {
        let writer = try await self.eventLoop.submit {
            FileBodyWriter(
                open: { () throws(URLError) -> PartialFile in try PartialFile.open(path: "/dev/full") },
                offset: 0,
                eventLoop: self.eventLoop
            ) { _ in }
        }.get()
        let failure = try #require(await self.eventLoop.flatSubmit { () -> EventLoopFuture<Void> in
            _ = writer.enqueue(ByteBuffer(repeating: 1, count: 4096))
            return writer.drained()
        }.flatMap { self.eventLoop.submit { writer.failure } }.get())
        #expect(failure.code == .cannotWriteToFile)
        #expect(failure.localizedDescription.contains("No space left on device"))
        let next = try await self.eventLoop.submit { writer.enqueue(ByteBuffer(repeating: 1, count: 10)) }.get()
        await #expect(throws: URLError.self) { try await next?.get() }
        #expect(await writer.drain()?.code == .cannotWriteToFile)
    }

    @Test("A file that cannot be created fails the exchange with cannotCreateFile")
    func cannotCreate() async throws {
        let writer = try await self.eventLoop.submit {
            FileBodyWriter(
                open: { () throws(URLError) -> PartialFile in try PartialFile.open(path: "/nonexistent-dir/haul/file") },
                offset: 0,
                eventLoop: self.eventLoop
            ) { _ in }
        }.get()
        let failure = await writer.drain()
        #expect(failure?.code == .cannotCreateFile)
        #expect(failure?.localizedDescription.contains("No such file or directory") == true)
    }

    @Test("A small body is opened and written by one job on the file-creation thread; an empty body still makes the file")
    func firstJobOpensAndWrites() async throws {
        let path = self.temporaryPath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let opens = ReportedBytes()
        let reported = ReportedBytes()
        let writer = try await self.eventLoop.submit {
            FileBodyWriter(
                open: { () throws(URLError) -> PartialFile in
                    // Which thread opens: the one creation thread, never the event loop.
                    opens.add(Thread.current.name == "TP-#0" ? 1 : 0, sizeOnDisk: PartialFile.size(at: path) ?? -1)
                    return try PartialFile.open(path: path)
                },
                offset: 0,
                eventLoop: self.eventLoop
            ) { count in reported.add(count, sizeOnDisk: PartialFile.size(at: path) ?? 0) }
        }.get()
        // Nothing is opened before there is something to write or the body ended.
        try await Task.sleep(for: .milliseconds(20))
        #expect(opens.calls == 0)
        let body = ByteBuffer(repeating: 9, count: 16 * 1024)
        let drained = try await self.eventLoop.flatSubmit { () -> EventLoopFuture<Void> in
            _ = writer.enqueue(body)
            return writer.drained()
        }.get()
        _ = drained
        #expect(opens.calls == 1)
        #expect(opens.total == 1, "opened on the file-creation thread")
        #expect(reported.calls == 1, "open and write in one job: one report")
        #expect(PartialFile.size(at: path) == Int64(16 * 1024))

        // A large first batch: the creation thread only opens; the write threads write it.
        let largePath = self.temporaryPath()
        defer { try? FileManager.default.removeItem(atPath: largePath) }
        let largeOpens = ReportedBytes()
        let large = try await self.eventLoop.submit {
            FileBodyWriter(
                open: { () throws(URLError) -> PartialFile in
                    largeOpens.add(Thread.current.name == "TP-#0" ? 1 : 0, sizeOnDisk: 0)
                    return try PartialFile.open(path: largePath)
                },
                offset: 0,
                eventLoop: self.eventLoop
            ) { _ in }
        }.get()
        let chunks = self.chunks(count: 60)
        _ = try await self.feed(large, chunks)
        #expect(await large.drain() == nil)
        #expect(largeOpens.calls == 1 && largeOpens.total == 1)
        #expect(try Data(contentsOf: URL(fileURLWithPath: largePath)) == self.expectedBytes(chunks))

        let emptyPath = self.temporaryPath()
        defer { try? FileManager.default.removeItem(atPath: emptyPath) }
        let empty = try await self.eventLoop.submit {
            FileBodyWriter(
                open: { () throws(URLError) -> PartialFile in try PartialFile.open(path: emptyPath) },
                offset: 0,
                eventLoop: self.eventLoop
            ) { _ in }
        }.get()
        #expect(await empty.drain() == nil)
        #expect(PartialFile.size(at: emptyPath) == 0)
    }

    /// A writer into an unnamed file at `path` (a named one where the file system has none),
    /// made on the loop, for a body announced as `announced` bytes; `writes` gets each report,
    /// `poolAsked` a call each time the write threads are asked for.
    func unnamedWriter(
        path: String,
        announcing announced: Int64,
        writes: ReportedBytes,
        poolAsked: ReportedBytes = ReportedBytes(),
        offloadsSlowCreation: Bool = false,
        createdOnLoop: ReportedBytes = ReportedBytes()
    ) async throws -> FileBodyWriter {
        let loop = self.eventLoop
        return try await loop.submit {
            FileBodyWriter(
                open: { () throws(URLError) -> PartialFile in
                    if loop.inEventLoop { createdOnLoop.add(1, sizeOnDisk: 0) }
                    guard let file = PartialFile.openUnnamed(path: path) else { return try PartialFile.open(path: path) }
                    return file
                },
                offset: 0,
                eventLoop: loop,
                pool: { poolAsked.add(1, sizeOnDisk: 0); return NIOThreadPool.singleton }(),
                opensUnnamed: true,
                expectedBodyBytes: announced,
                offloadsSlowCreation: offloadsSlowCreation
            ) { count in writes.add(count, sizeOnDisk: 0) }
        }.get()
    }

    @Test("A body announced within 1 MiB, into an unnamed file, is written on the event loop: the write threads are never asked for")
    func smallAnnouncedBodyOnTheLoop() async throws {
        let directory = self.temporaryPath()
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for (name, announced, askedForPool) in [("small.bin", Int64(600_000), false), ("large.bin", Int64(2 << 20), true)] {
            let path = directory + "/" + name
            let poolAsked = ReportedBytes()
            let writes = ReportedBytes()
            let writer = try await self.unnamedWriter(path: path, announcing: announced, writes: writes, poolAsked: poolAsked)
            let chunks = self.chunks(count: 30)
            _ = try await self.feed(writer, chunks)
            #expect(await writer.drain() == nil)
            #expect((poolAsked.calls > 0) == askedForPool, "\(name): write threads asked for \(poolAsked.calls) times")
            #expect(writes.total == chunks.reduce(0) { $0 + $1.readableBytes }, "\(name): every byte written and reported once")
        }
    }

    @Test("While creating files is slow, a writer that offloads slow creation creates its small body's file on the write threads; one that does not keeps it on the loop")
    func slowCreationOffTheLoop() async throws {
        let directory = self.temporaryPath()
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // Creations of 2 ms (a fresh ext4 directory at its worst): the average passes the mark.
        for _ in 0..<64 { FileBodyWriter.recordCreation(nanoseconds: 2_000_000) }
        defer { for _ in 0..<64 { FileBodyWriter.recordCreation(nanoseconds: 0) } }
        #expect(FileBodyWriter.createsAreSlow)
        for (name, offloads) in [("offloaded.bin", true), ("kept.bin", false)] {
            let writes = ReportedBytes()
            let createdOnLoop = ReportedBytes()
            let writer = try await self.unnamedWriter(
                path: directory + "/" + name, announcing: 600_000, writes: writes, offloadsSlowCreation: offloads, createdOnLoop: createdOnLoop
            )
            let chunks = self.chunks(count: 30)
            _ = try await self.feed(writer, chunks)
            #expect(await writer.drain() == nil)
            #expect((createdOnLoop.calls == 0) == offloads, "\(name): created on the loop \(createdOnLoop.calls) times")
            #expect(writes.total == chunks.reduce(0) { $0 + $1.readableBytes }, "\(name): every byte written and reported once")
        }
    }

    @Test("Once the whole announced body is queued it is written at once; a part of it waits to be batched")
    func wholeAnnouncedBodyWrittenAtOnce() async throws {
        let directory = self.temporaryPath()
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let loop = self.eventLoop
        let writes = ReportedBytes()
        let writer = try await self.unnamedWriter(path: directory + "/whole.bin", announcing: 3000, writes: writes)
        var part = ByteBuffer(repeating: 7, count: 1000)
        // Both looks happen in the same loop tick as the enqueue: no timer could have fired.
        let afterFirst = try await loop.submit { () -> Int in
            _ = writer.enqueue(part)
            return writes.total
        }.get()
        #expect(afterFirst == 0, "a third of the body is written alone instead of waiting for the rest")
        part = ByteBuffer(repeating: 8, count: 2000)
        let afterLast = try await loop.submit { () -> Int in
            _ = writer.enqueue(part)
            return writes.total
        }.get()
        #expect(afterLast == 3000, "the complete body waited for a flush timer")
        #expect(await writer.drain() == nil)
        #expect(writes.total == 3000)
    }
}

@Suite("EventLoopTaskExecutor: a run's task follows its event loop")
struct EventLoopTaskExecutorTests {
    @Test("A task that prefers the executor runs on the loop, and continues there after awaiting the loop's futures")
    func runsOnTheLoop() async throws {
        let eventLoop = MultiThreadedEventLoopGroup.singleton.next()
        let executor = EventLoopTaskExecutor(eventLoop)
        let onLoop = await Task(executorPreference: executor) { () -> [Bool] in
            var seen = [eventLoop.inEventLoop]
            for _ in 0..<3 {
                // A future completed later from the loop: the continuation is queued on the loop.
                try? await eventLoop.scheduleTask(in: .milliseconds(1)) {}.futureResult.get()
                seen.append(eventLoop.inEventLoop)
            }
            return seen
        }.value
        #expect(onLoop == [true, true, true, true])
    }
}

/// What the writer reported, and the file's size at each report.
final class ReportedBytes: @unchecked Sendable {
    private let lock = NSLock()
    private var counts: [(count: Int, sizeOnDisk: Int64)] = []

    func add(_ count: Int, sizeOnDisk: Int64) {
        self.lock.withLock { self.counts.append((count, sizeOnDisk)) }
    }

    var total: Int { self.lock.withLock { self.counts.reduce(0) { $0 + $1.count } } }
    var calls: Int { self.lock.withLock { self.counts.count } }

    /// Every report's running total is already in the file.
    func neverAheadOfDisk(offset: Int64) -> Bool {
        self.lock.withLock {
            var running = offset
            for report in self.counts {
                running += Int64(report.count)
                if report.sizeOnDisk < running { return false }
            }
            return true
        }
    }
}
