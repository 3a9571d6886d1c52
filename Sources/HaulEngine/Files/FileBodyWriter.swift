import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// Carries one exchange's body bytes into its ``PartialFile`` off the event loop: the event
/// loop only queues network buffers (no copy); the writes happen on a thread pool, one batch at a
/// time per file, in order.
///
/// Buffers gather into batches: one goes out once 256 KiB are queued, 5 ms after the first
/// buffer of a smaller one (so a slow download still shows steady progress), or at once when
/// the exchange ends; while a batch is written the next one gathers. Each batch is one
/// `pwritev`, and costs two thread hops however many network reads it holds. The bytes queued
/// or being written are bounded by `bufferLimit`: above it ``enqueue(_:)`` returns a future the
/// exchange waits on before reading more, so a slow disk slows the sender (TCP back-pressure)
/// instead of filling memory.
///
/// The file is opened (and cut to the resume offset) by the writer's first job, together with a
/// first batch of up to 64 KiB: one thread hop for a small file, however it ends (a larger first
/// batch goes to the write threads after the open). That job runs on
/// ``FileBodyWriter/namespacePool`` — one thread for every file creation of the process, since
/// creating files in one directory serializes on its lock in the kernel anyway, and threads
/// that contend for it only spin (measured with 16 downloads of small files at once: a third of
/// the CPU time went to spinning on the directory's lock). Buffers that arrive meanwhile queue
/// behind it, so nothing the network delivered before an early connection reset is lost.
///
/// An unnamed file (``PartialFile/openUnnamed(path:)``) takes no directory lock to create, so
/// its first job goes to the write threads with its whole first batch, however large; and a
/// body that ended within 64 KiB before anything was written is opened and written right on
/// the event loop (a small file costs no thread hop at all: one create, one write).
///
/// A small download into an unnamed file (its body known to end within
/// ``maximumBodyWrittenOnLoop``, `writesOnEventLoop`) goes further: every batch of it is written
/// right on the event loop, as curl and aria2 write, with no thread hop at all. A page-cache write
/// of at most that much costs less than the two hops around it (measured: 500 files of 256 KiB,
/// 11 % less CPU); a larger body keeps the write threads, so one slow disk write never holds up
/// the other downloads on the loop for long.
///
/// Every method and callback runs on `eventLoop` (the exchange's loop): the state needs no lock.
/// `onWritten` is called on that loop once per completed batch, with the batch's byte count,
/// in file order; bytes are reported only once they are in the file.
package final class FileBodyWriter: @unchecked Sendable {
    // @unchecked: all state is touched on `eventLoop` only (asserted in debug builds).

    /// The bytes allowed to wait for the disk before the exchange stops reading.
    /// Measured on 1 GiB from loopback nginx with 512 KiB reads: 2 MiB was 2 % faster and
    /// 4 MiB more resident.
    package static let defaultBufferLimit = 1 << 20

    /// The one thread that opens (creates) partial files, for every writer of the process.
    package static let namespacePool: NIOThreadPool = {
        let pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        return pool
    }()

    /// Opens the file: called once, by the first job.
    private var open: (@Sendable () throws(URLError) -> PartialFile)?
    /// The open file, once the first job has opened it.
    private var file: PartialFile?
    private let eventLoop: any EventLoop
    /// The write threads, asked for on first use (a body written on the loop never starts them).
    private let poolProvider: () -> NIOThreadPool
    private lazy var pool: NIOThreadPool = self.poolProvider()
    private var bufferLimit: Int
    /// Whether `open` makes an unnamed file (no directory lock to wait for).
    private let opensUnnamed: Bool
    /// Whether every batch is written on the event loop (a small body into an unnamed file).
    private let writesOnEventLoop: Bool
    /// Whether the file is created on the write threads instead of the loop while creating
    /// files is slow (``createsAreSlow``).
    private let offloadsSlowCreation: Bool

    /// How long creating an unnamed file took lately, in nanoseconds: a moving average over
    /// the last few creations of the process (each weighs an eighth), kept by every writer.
    private static let recentCreationNanoseconds = Atomic<Int>(0)
    /// Creating files is slow when the average passes this: on ext4, a fresh directory with
    /// many inodes deleted lately makes a creation take up to a millisecond; tmpfs or a warm
    /// directory take 10–30 µs.
    static let slowCreationNanoseconds = 150_000

    /// Whether creating files has been slow lately (see ``recentCreationNanoseconds``).
    package static var createsAreSlow: Bool {
        Self.recentCreationNanoseconds.load(ordering: .relaxed) > Self.slowCreationNanoseconds
    }

    /// Adds one creation's time to the moving average (a lost update between two threads only
    /// drops a sample).
    package static func recordCreation(nanoseconds: Int) {
        let average = Self.recentCreationNanoseconds.load(ordering: .relaxed)
        Self.recentCreationNanoseconds.store(average + (nanoseconds - average) / 8, ordering: .relaxed)
    }
    private let onWritten: (Int) -> Void
    /// Where the next queued byte goes in the file.
    private var nextOffset: Int64
    /// Buffers received and not handed to a write yet, in order.
    private var queued: [ByteBuffer] = []
    /// Bytes queued plus bytes in the batch being written.
    private var buffered = 0
    /// Body bytes announced and not queued yet (`nil`: no length was announced). At zero the
    /// whole body is queued: it is written at once, with no flush timer to wait for more.
    private var bodyBytesToCome: Int64?
    private var isWriting = false
    /// Flushes a small queue that waited ``flushDelay`` for more (a scheduled callback: no
    /// promise and future per timer, as `scheduleTask` makes).
    private var flushTimer: NIOScheduledCallback?
    /// Set by ``drained()``: write what is queued now, however little.
    private var isDraining = false
    /// The first write error; once set, nothing more is written.
    package private(set) var failure: URLError?
    /// The exchange waiting for the buffer to drain below half of `bufferLimit`.
    private var roomWaiter: EventLoopPromise<Void>?
    /// Whether the exchange had to wait for the disk since ``takeHeldBack()`` last asked.
    private var wasHeldBack = false
    /// Callers of ``drained()`` waiting for the last batch.
    private var drainWaiters: [EventLoopPromise<Void>] = []

    /// Opens the file with `open` on ``namespacePool`` (an unnamed file: on `pool`, or on the
    /// loop, unless `offloadsSlowCreation` and creating files is slow lately) with the first
    /// batch (or at ``drained()`` when nothing came); later batches are written on `pool`, each
    /// pool started only when first used.
    package init(
        open: @escaping @Sendable () throws(URLError) -> PartialFile,
        offset: Int64,
        eventLoop: any EventLoop,
        pool: @escaping @autoclosure () -> NIOThreadPool = NIOThreadPool.singleton,
        bufferLimit: Int = FileBodyWriter.defaultBufferLimit,
        opensUnnamed: Bool = false,
        expectedBodyBytes: Int64? = nil,
        offloadsSlowCreation: Bool = false,
        onWritten: @escaping (Int) -> Void
    ) {
        self.opensUnnamed = opensUnnamed
        self.offloadsSlowCreation = offloadsSlowCreation
        self.writesOnEventLoop = opensUnnamed && (expectedBodyBytes.map { $0 <= Self.maximumBodyWrittenOnLoop } ?? false)
        self.bodyBytesToCome = expectedBodyBytes
        self.open = open
        self.nextOffset = offset
        self.eventLoop = eventLoop
        self.poolProvider = pool
        self.bufferLimit = bufferLimit
        self.onWritten = onWritten
    }

    /// Queues `buffer` for the file. Returns `nil` when the exchange may read on, a future to
    /// wait on when the buffer is full, or a failed future once a write has failed (with the
    /// ``failure``).
    package func enqueue(_ buffer: ByteBuffer) -> EventLoopFuture<Void>? {
        self.eventLoop.assertInEventLoop()
        if let failure = self.failure { return self.eventLoop.makeFailedFuture(failure) }
        // Draining means the exchange has ended and its run counts what is in the file: a part
        // that still arrives (read before a cancel took effect) is not written. It was, after the
        // run had recorded where the download stopped (Ctrl-C on a loaded machine: the file held
        // 64 KiB beyond the checkpoint, fetched again by the next run).
        guard buffer.readableBytes > 0, !self.isDraining else { return nil }
        self.queued.append(buffer)
        self.buffered += buffer.readableBytes
        if let remainder = self.bodyBytesToCome { self.bodyBytesToCome = remainder - Int64(buffer.readableBytes) }
        self.writeQueued()
        guard self.buffered > self.bufferLimit else { return nil }
        self.wasHeldBack = true
        if let waiter = self.roomWaiter { return waiter.futureResult }
        let waiter = self.eventLoop.makePromise(of: Void.self)
        self.roomWaiter = waiter
        return waiter.futureResult
    }

    /// Changes how many bytes may wait for the disk (a segmented download's first connection
    /// gets a lane's share once other lanes start). A waiting exchange is let go if the new
    /// limit leaves room.
    package func setBufferLimit(_ limit: Int) {
        self.eventLoop.assertInEventLoop()
        self.bufferLimit = limit
        if let waiter = self.roomWaiter, self.buffered <= limit / 2 {
            self.roomWaiter = nil
            waiter.succeed(())
        }
    }

    /// Whether the exchange waited for the disk (its bytes filled the buffer) since the last
    /// call, or waits now.
    package func takeHeldBack() -> Bool {
        self.eventLoop.assertInEventLoop()
        defer { self.wasHeldBack = false }
        return self.wasHeldBack || self.roomWaiter != nil
    }

    /// Succeeds once every queued byte is in the file (or nothing more will be written because
    /// a write failed: check ``failure``). Never fails.
    package func drained() -> EventLoopFuture<Void> {
        guard !self.startDraining() else { return self.eventLoop.makeSucceededVoidFuture() }
        let waiter = self.eventLoop.makePromise(of: Void.self)
        self.drainWaiters.append(waiter)
        return waiter.futureResult
    }

    /// Waits until every queued byte is in the file or a write has failed; returns the failure.
    /// Call from any task once the exchange has ended.
    package func drain() async -> URLError? {
        // On the loop already (a run's task prefers it) with nothing left to write: no hop.
        if self.eventLoop.inEventLoop, self.startDraining() { return self.failure }
        return try? await self.eventLoop.flatSubmit { self.drained().map { self.failure } }.get()
    }

    /// Writes what is queued now, however little; whether nothing is being written any more.
    private func startDraining() -> Bool {
        self.eventLoop.assertInEventLoop()
        self.isDraining = true
        self.writeQueued(force: true)
        return !self.isWriting
    }

    /// Queued bytes wait for more until there are this many (fewer thread hops and system
    /// calls on a fast network), or until ``flushDelay`` passed (progress on a slow one).
    static let minimumBatchBytes = 256 << 10
    static let flushDelay = TimeAmount.milliseconds(5)
    /// The largest first batch the creation thread writes together with the open.
    static let maximumFirstBatchOnCreationThread = 64 << 10
    /// The largest body whose batches are all written on the event loop (`writesOnEventLoop`).
    package static let maximumBodyWrittenOnLoop: Int64 = 1 << 20

    /// Hands the queued buffers to a write when there are enough, or when `force`; otherwise
    /// makes sure a flush comes within ``flushDelay``. The first job opens the file (even with
    /// nothing to write, when forced: an empty body still makes a file).
    private func writeQueued(force: Bool = false) {
        guard !self.isWriting, self.failure == nil else { return }
        let opening = self.open
        guard !self.queued.isEmpty || (opening != nil && force) else { return }
        let queuedBytes = self.buffered
        // The whole announced body is here: nothing more will come to batch it with (a small
        // file's one part used to schedule and cancel a flush timer: ~6,000 instructions).
        let wholeBodyQueued = self.bodyBytesToCome.map { $0 <= 0 } ?? false
        guard force || wholeBodyQueued || queuedBytes >= min(Self.minimumBatchBytes, self.bufferLimit / 2) else {
            if self.flushTimer == nil {
                self.flushTimer = try? self.eventLoop.scheduleCallback(in: Self.flushDelay, handler: self)
            }
            return
        }
        self.flushTimer?.cancel()
        self.flushTimer = nil
        // A small download into an unnamed file (no directory lock to wait for): opened and
        // written right here, without the two thread hops — every batch when its length said so
        // up front, or the whole body when it ended within the first batch.
        // Unless creating files is slow lately and this batch creates the file: then the write
        // threads create it, and the loop goes on with other transfers meanwhile.
        let createsOffLoop = opening != nil && self.offloadsSlowCreation && Self.createsAreSlow
        let onLoop = !createsOffLoop && (self.writesOnEventLoop
            || (opening != nil && self.opensUnnamed && self.isDraining && queuedBytes <= Self.maximumFirstBatchOnCreationThread))
        let timesCreation = opening != nil && self.opensUnnamed && self.offloadsSlowCreation
        // The creation thread writes a small first batch (a small file in one hop); a larger
        // one waits for the write threads, so that one slow disk write cannot hold up every
        // other download's file creation behind it. An unnamed file needs no creation thread.
        let opensOnly = opening != nil && !self.opensUnnamed && queuedBytes > Self.maximumFirstBatchOnCreationThread
        let batch = opensOnly ? [] : self.queued
        if !opensOnly { self.queued.removeAll(keepingCapacity: true) }
        let offset = self.nextOffset
        let count = batch.reduce(0) { $0 + $1.readableBytes }
        self.nextOffset += Int64(count)
        self.isWriting = true
        let openedFile = self.file
        self.open = nil
        let job = { @Sendable () -> BatchResult in
            let file: PartialFile
            if let openedFile {
                file = openedFile
            } else {
                let started = timesCreation ? DispatchTime.now().uptimeNanoseconds : 0
                do throws(URLError) { file = try opening!() } catch { return BatchResult(written: 0, failure: error, opened: nil) }
                if timesCreation { Self.recordCreation(nanoseconds: Int(DispatchTime.now().uptimeNanoseconds - started)) }
            }
            let (written, failure) = batch.isEmpty ? (0, nil) : file.write(contentsOf: batch, at: offset)
            return BatchResult(written: written, failure: failure, opened: openedFile == nil ? file : nil)
        }
        if onLoop {
            self.jobEnded(job(), count: count)
            return
        }
        let pool = opening == nil || self.opensUnnamed ? self.pool : Self.namespacePool
        pool.runIfActive(eventLoop: self.eventLoop, job).whenComplete { result in
            // `batch` is released here, on the loop that allocated its buffers.
            withExtendedLifetime(batch) {}
            switch result {
            case .success(let batch):
                self.jobEnded(batch, count: count)
            case .failure(let error):
                let what = openedFile.map { "cannot write to \($0.path)" } ?? "cannot open the file"
                self.batchEnded(BatchResult(written: 0, failure: URLError(.cannotWriteToFile, userInfo: [NSLocalizedDescriptionKey: "\(what): \(error)"]), opened: nil), count: count)
            }
        }
    }

    /// A job ended: keep the file it opened, then account for its batch.
    private func jobEnded(_ batch: BatchResult, count: Int) {
        if let opened = batch.opened { self.file = opened }
        self.batchEnded(batch, count: count)
    }

    /// What one batch wrote: the bytes in the file (a prefix of the batch), and why it stopped
    /// short.
    private struct BatchResult: Sendable {
        var written: Int
        var failure: URLError?
        /// The file the job opened (the first job only).
        var opened: PartialFile?
    }

    private func batchEnded(_ batch: BatchResult, count: Int) {
        self.isWriting = false
        self.buffered -= count
        if batch.written > 0 { self.onWritten(batch.written) }
        if let failure = batch.failure {
            self.failure = failure
            self.queued.removeAll()
            self.buffered = 0
            self.flushTimer?.cancel()
            self.flushTimer = nil
        }
        if self.failure == nil {
            self.writeQueued(force: self.isDraining)
        }
        if let waiter = self.roomWaiter, self.failure != nil || self.buffered <= self.bufferLimit / 2 {
            self.roomWaiter = nil
            if let failure = self.failure { waiter.fail(failure) } else { waiter.succeed(()) }
        }
        if !self.isWriting {
            let waiters = self.drainWaiters
            self.drainWaiters.removeAll()
            for waiter in waiters { waiter.succeed(()) }
        }
    }
}

extension FileBodyWriter: NIOScheduledCallbackHandler {
    /// The flush timer fired: write what is queued, however little.
    package func handleScheduledCallback(eventLoop: some EventLoop) {
        self.flushTimer = nil
        self.writeQueued(force: true)
    }
}
