/// How glibc's allocator keeps freed memory, for programs whose buffers come and go in bursts
/// (network reads freed a batch at a time).
package enum HeapPolicy {
    /// Keeps up to `trimThreshold` bytes free at the top of each heap for reuse instead of
    /// handing them back to the kernel at once (glibc's default is 128 KiB: the next reads
    /// grow the heap again, a system call and zeroed page faults each time), and serves
    /// allocations below `mmapThreshold` from the heap (setting the trim threshold also fixes the
    /// mapping threshold at 128 KiB, so a 512 KiB read buffer would be a fresh mapping each
    /// time). An explicit `malloc_trim` still hands everything free back.
    package static func keepFreedHeap(trimThreshold: Int32, mmapThreshold: Int32) {
        // mallopt(M_TRIM_THRESHOLD = -1 / M_MMAP_THRESHOLD = -3, bytes); not declared in Swift's
        // Glibc module.
        typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
        guard let mallopt = GlibcFunction.lookup("mallopt", as: Mallopt.self) else { return }
        _ = mallopt(-1, trimThreshold)
        _ = mallopt(-3, mmapThreshold)
    }
}
