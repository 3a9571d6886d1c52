import Foundation
import HaulEngine
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Hands back memory an idle hauld holds but does not use.
///
/// Most of an idle daemon's resident set is not its data: it is clean, file-backed pages of the
/// executable and the Swift and Foundation libraries, mapped while the daemon started (a page
/// fault maps a window of neighbouring pages, not one). Measured on hauld (release build):
/// 35 MiB resident when idle, of which 3.5 MiB anonymous; after ``trim()`` 9 MiB, 12.6 MiB with
/// the web UI. The kernel would reclaim these pages under memory pressure anyway; trimming
/// makes the resident set say what the daemon really uses, which is what users of a NAS or a
/// small VPS read in `top`. Pages that are needed again come back on demand, from the page
/// cache or the disk. Pages that another process maps too (a second Swift program running) are
/// left alone by the kernel, so the figure is higher then.
///
/// Called by ``DaemonService`` at the first quiet second after it starts serving, then every 30
/// seconds when the daemon was quiet meanwhile (quiet: no transfer running, no request on the
/// socket or the web UI since the last call, ``noteActivity()``), so a daemon in use keeps its
/// pages; cheap when there is nothing to reclaim.
package enum WorkingSetTrimmer {
    private static let active = Atomic<Bool>(false)

    /// A request arrived: the next trim is skipped.
    package static func noteActivity() {
        Self.active.store(true, ordering: .relaxed)
    }

    /// Whether nothing was noted since the last call.
    package static func wasQuiet() -> Bool {
        !Self.active.exchange(false, ordering: .relaxed)
    }

    /// `MADV_PAGEOUT` (Linux 5.4); older kernels refuse it and nothing happens.
    private static let pageOut: Int32 = 21

    /// The text of a `/proc` file (their size reads as 0, so Foundation's readers see nothing).
    private static func readProcFile(_ path: String) -> String? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count <= 0 { break }
            bytes.append(contentsOf: chunk[0..<count])
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// glibc's `malloc_trim` (not in the Swift Glibc module): returns the free pages of every
    /// malloc arena, not only the top of the main one.
    private static let mallocTrim = GlibcFunction.lookup("malloc_trim", as: (@convention(c) (Int) -> Int32).self)

    /// Keeps freed heap memory for reuse while the daemon works, as `haul get` does
    /// (``HeapPolicy``: a 1 GiB download through hauld took 18-26 K page faults, now ~1.1 K).
    /// What is kept goes back at the quiet-time trims (``trim()``, ``releaseFreeHeap()``), so an
    /// idle daemon's size is what it was; 4 MiB, not `haul get`'s 16, keeps a busy one's too
    /// (`queue-bench`, 10,000 queued: 38.4 MiB after the add, 47.4 after a restart, as before;
    /// with 16 MiB, 42.7 and 53.0).
    package static func keepFreedHeapWhileBusy() {
        #if os(Linux)
        HeapPolicy.keepFreedHeap(trimThreshold: 4 << 20, mmapThreshold: 1 << 20)
        #endif
    }

    /// Returns the free pages of the heap to the system (`malloc_trim`): called when the last
    /// running transfer ends, so the buffers a burst of downloads used are not still counted
    /// while the daemon sits idle. Costs a walk over the heap's free chunks (0.2 ms for 60 MB
    /// of small allocations, half of them freed).
    package static func releaseFreeHeap() {
        #if os(Linux)
        _ = Self.mallocTrim?(0)
        #endif
    }

    /// Returns freed heap pages to the system and asks the kernel to reclaim this process's
    /// read-only file-backed mappings. Returns how many bytes of mappings were advised.
    @discardableResult
    package static func trim() -> Int {
        #if os(Linux)
        Self.mallocTrim?(0)
        guard let maps = Self.readProcFile("/proc/self/maps") else { return 0 }
        // Every range first, then the calls in a tight loop: code run between two calls would
        // fault its pages (and their neighbours) straight back in.
        var ranges: [(start: UInt, length: Int)] = []
        for line in maps.split(separator: "\n") {
            let fields = line.split(separator: " ", maxSplits: 5, omittingEmptySubsequences: true)
            // Only read-only, private mappings of files: code and constants, never data.
            // (The path keeps the padding before it: maxSplits stops the splitting there.)
            guard fields.count == 6, fields[1].hasPrefix("r"), !fields[1].contains("w"),
                  fields[5].drop(while: { $0 == " " }).hasPrefix("/")
            else { continue }
            let bounds = fields[0].split(separator: "-")
            guard bounds.count == 2, let start = UInt(bounds[0], radix: 16), let end = UInt(bounds[1], radix: 16), end > start else { continue }
            ranges.append((start, Int(end - start)))
        }
        var advised = 0
        for range in ranges where madvise(UnsafeMutableRawPointer(bitPattern: range.start), range.length, Self.pageOut) == 0 {
            advised += range.length
        }
        return advised
        #else
        return 0
        #endif
    }
}
