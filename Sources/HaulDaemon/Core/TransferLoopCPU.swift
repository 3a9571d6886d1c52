#if canImport(Glibc)
import Glibc
#endif
import HaulEngine
import Synchronization

/// Keeps the queue's bookkeeping off the CPU the transfer loop last ran on.
///
/// Every transfer of a small body in hauld runs on the first engine's event loop (those of large
/// bodies spread over a loop per core, ``LoopSpread``: then no core is the loop's alone, and
/// the drains run anywhere, ``releaseCaller()``); the queue's drains (claims,
/// ends recorded, the scheduler's decisions) run on dispatch threads. When the kernel put a
/// drain on the loop's core — it places a woken thread beside its waker when no core is idle,
/// and the loop wakes the queue's thread for every few ends — the loop waited while the drain
/// ran, and a queue of small files went at the pace of the two added, not of the loop alone.
/// So each drain lets its thread run on every CPU the process may use except the one the loop
/// reported last. The loop stays free to move (a core another program takes is one the loop can
/// leave, and the drains follow it), and the drains keep their priority: not the idle class,
/// which an unprivileged thread cannot leave again, and which would stall them whenever the
/// machine is busy.
///
/// Measured against the build before it (alternating rounds, 1,000 × 16 KiB on tmpfs, 2 cores,
/// nginx on the same machine, from `queueAdd` to the last file): 86.1 → 71.9 ms at 91.0 → 80.8
/// µs of CPU a file (11 rounds; 89.0 → 77.0 ms in 9 others); with another program's busy loop
/// floating over the cores 118.1 → 104.4 ms, with one on each core 159.6 → 139.7 ms. 500 ×
/// 256 KiB: no change (the loop itself is the pace there).
final class TransferLoopCPU: Sendable {
    /// The CPU the loop reported last; -1 before it reported.
    private let lastCPU = Atomic<Int32>(-1)
    /// Per thread, the CPU it keeps off now (+2, so that no value is a null pointer): a thread
    /// re-targets only when the loop's CPU is another. A fact about the thread, so one key for
    /// the process (keys are few: 1,024).
    private static let keptOff: pthread_key_t? = {
        var key = pthread_key_t()
        return pthread_key_create(&key, nil) == 0 ? key : nil
    }()

    /// The CPU the loop reported last (`nil` before it did).
    var cpu: Int32? {
        let cpu = self.lastCPU.load(ordering: .relaxed)
        return cpu >= 0 ? cpu : nil
    }

    /// Records the CPU the caller runs on as the loop's. Called on the engine's loop each time a
    /// run ends or takes its slot (a few times a file): `sched_getcpu` (no system call: the
    /// kernel keeps it in memory the thread reads) and an atomic store.
    func noteLoopRunsHere() {
        guard let cpu = Self.currentCPU?() else { return }
        self.noteLoopRuns(on: cpu)
    }

    /// Records `cpu` as the loop's (what ``noteLoopRunsHere()`` reads; tests name one).
    func noteLoopRuns(on cpu: Int32) {
        self.lastCPU.store(cpu, ordering: .relaxed)
    }

    /// Lets the calling thread run on every CPU the process may use except the loop's last one.
    /// Called at the start of each drain of the queue's inbox, on its serial queue. Two system
    /// calls when the loop's CPU is not the one this thread already keeps off (the loop rarely
    /// moves: a handful of times a round); nothing before the loop reported, and nothing when
    /// that would leave the thread no CPU (a process allowed one). The process's CPUs are read
    /// at each re-target, so a set that changes (`taskset`, a container's cpuset) is taken up
    /// the next time the loop moves.
    func keepCallerOffLoopCPU() {
        guard let cpu = self.cpu, let keptOff = Self.keptOff else { return }
        if let current = pthread_getspecific(keptOff), Int(bitPattern: current) == Int(cpu) + 2 { return }
        // Remembered either way: a set that cannot be narrowed (one CPU) is not asked again.
        _ = Self.keepCallerOff(cpu)
        pthread_setspecific(keptOff, UnsafeRawPointer(bitPattern: Int(cpu) + 2))
    }

    /// Lets the calling thread run on every CPU of the process again, when
    /// ``keepCallerOffLoopCPU()`` had narrowed it: while transfers run on a loop per core
    /// (``TransferCore/isSpreading``), there is no loop's core to keep off. Nothing when the
    /// thread was not narrowed; two system calls when it was.
    func releaseCaller() {
        guard let keptOff = Self.keptOff, let current = pthread_getspecific(keptOff), Int(bitPattern: current) != Self.released else { return }
        _ = Self.keepCallerOff(nil)
        pthread_setspecific(keptOff, UnsafeRawPointer(bitPattern: Self.released))
    }

    /// The per-thread value of a thread ``releaseCaller()`` let run everywhere (CPUs are kept as
    /// +2: never 1).
    private static let released = 1

    // MARK: - The system's calls

    private typealias CurrentCPU = @convention(c) () -> Int32
    private typealias Affinity = @convention(c) (pid_t, Int, UnsafeMutableRawPointer) -> Int32

    // Not declared in Swift's Glibc module (they need _GNU_SOURCE).
    private static let currentCPU = GlibcFunction.lookup("sched_getcpu", as: CurrentCPU.self)
    private static let getAffinity = GlibcFunction.lookup("sched_getaffinity", as: Affinity.self)
    private static let setAffinity = GlibcFunction.lookup("sched_setaffinity", as: Affinity.self)

    /// The CPUs the thread `thread` may run on (0: the caller; the process's id: its main
    /// thread, which hauld never narrows, so the process's own set).
    static func allowedCPUs(of thread: pid_t = 0) -> Set<Int32>? {
        guard let getAffinity = Self.getAffinity else { return nil }
        var set = cpu_set_t()
        let read = withUnsafeMutableBytes(of: &set) { getAffinity(thread, $0.count, $0.baseAddress!) }
        guard read == 0 else { return nil }
        return withUnsafeBytes(of: &set) { raw in
            var cpus: Set<Int32> = []
            for index in 0..<raw.count / 8 {
                let word = raw.load(fromByteOffset: index * 8, as: UInt64.self)
                for bit in 0..<64 where word & (1 << UInt64(bit)) != 0 { cpus.insert(Int32(index * 64 + bit)) }
            }
            return cpus
        }
    }

    /// Lets the caller run on the process's CPUs but `cpu` (all of them when `nil`); `false`
    /// when that leaves none or a call fails (the caller's set is then as it was).
    private static func keepCallerOff(_ cpu: Int32?) -> Bool {
        guard let getAffinity = Self.getAffinity, let setAffinity = Self.setAffinity else { return false }
        var set = cpu_set_t()
        return withUnsafeMutableBytes(of: &set) { raw -> Bool in
            guard getAffinity(getpid(), raw.count, raw.baseAddress!) == 0 else { return false }
            guard let cpu else { return setAffinity(0, raw.count, raw.baseAddress!) == 0 }
            // The set is an array of 64-bit words, CPU n at bit n % 64 of word n / 64.
            let offset = Int(cpu) / 64 * 8
            guard cpu >= 0, offset + 8 <= raw.count else { return false }
            let word = raw.load(fromByteOffset: offset, as: UInt64.self) & ~(1 << UInt64(Int(cpu) % 64))
            raw.storeBytes(of: word, toByteOffset: offset, as: UInt64.self)
            guard (0..<raw.count / 8).contains(where: { raw.load(fromByteOffset: $0 * 8, as: UInt64.self) != 0 }) else { return false }
            return setAffinity(0, raw.count, raw.baseAddress!) == 0
        }
    }
}
