#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import NIOCore
import Synchronization

/// The file a download streams into: positioned writes straight from the network buffers,
/// with no copy.
///
/// Not thread-safe by itself: a ``TransferRun`` touches it from one exchange at a time, and
/// the exchanges are sequenced by the futures that end them.
package struct PartialFile: Sendable {
    package let path: String
    private let descriptor: Int32

    /// Opens (creating if needed) the file at `path` for writing; `emptied`: cut to nothing in
    /// the same call (a fresh download), else left as it is.
    ///
    /// - Throws: `URLError(.cannotCreateFile)` with the system's reason.
    package static func open(path: String, emptied: Bool = false) throws(URLError) -> PartialFile {
        let descriptor = Glibc.open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (emptied ? O_TRUNC : 0), 0o644)
        guard descriptor >= 0 else {
            throw URLError.fileSystem(.cannotCreateFile, "cannot create \(path)", errno: errno)
        }
        return PartialFile(path: path, descriptor: descriptor)
    }

    /// Creates a file without a name in the directory that is to hold `path` (`O_TMPFILE`),
    /// for a fresh download: creating it takes no lock on the directory (a named create holds
    /// the directory's lock while the file system finds a free inode, so creations in one
    /// directory run one at a time), and a process that dies before ``link(to:)`` leaves
    /// nothing behind. `path` is the name ``link(to:)`` is usually given later.
    ///
    /// Returns `nil` where the file system or kernel cannot make unnamed files (then open the
    /// file by name).
    package static func openUnnamed(path: String) -> PartialFile? {
        let slash = path.utf8.lastIndex(of: UInt8(ascii: "/"))
        let directory = slash.map { $0 == path.utf8.startIndex ? "/" : String(path[..<$0]) } ?? "."
        let descriptor = Glibc.open(directory, Self.unnamedFileFlag | O_WRONLY | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { return nil }
        return PartialFile(path: path, descriptor: descriptor)
    }

    /// `O_TMPFILE` (Linux 3.11+; not in Swift's Glibc module): `__O_TMPFILE | O_DIRECTORY`.
    private static let unnamedFileFlag: Int32 = 0o20000000 | O_DIRECTORY

    /// Gives a file opened by ``openUnnamed(path:)`` the name `destination`, which must not
    /// exist yet (the file keeps its descriptor; the bytes are not copied). Never replaces a file.
    ///
    /// - Throws: ``NoOverwriteMove/Failure/exists(_:)`` when `destination` is taken, else
    ///   ``NoOverwriteMove/Failure/system(_:_:)`` with the system's reason.
    package func link(to destination: String) throws(NoOverwriteMove.Failure) {
        // AT_EMPTY_PATH links the descriptor itself but needs CAP_DAC_READ_SEARCH; without it
        // the kernel says ENOENT, and the descriptor's entry in /proc does the same for anyone.
        if !Self.emptyPathLinkRefused.load(ordering: .relaxed) {
            if linkat(self.descriptor, "", AT_FDCWD, destination, 0x1000 /* AT_EMPTY_PATH */) == 0 { return }
            let number = errno
            if number == EEXIST { throw .exists(destination) }
            guard number == ENOENT || number == EPERM || number == EINVAL else {
                throw .system("cannot name \(destination)", number)
            }
            Self.emptyPathLinkRefused.store(true, ordering: .relaxed)
        }
        if linkat(AT_FDCWD, "/proc/self/fd/\(self.descriptor)", AT_FDCWD, destination, AT_SYMLINK_FOLLOW) == 0 { return }
        let number = errno
        if number == EEXIST { throw .exists(destination) }
        throw .system("cannot name \(destination)", number)
    }

    /// Set once `linkat(AT_EMPTY_PATH)` was refused (no CAP_DAC_READ_SEARCH): not asked again.
    private static let emptyPathLinkRefused = Atomic<Bool>(false)

    private init(path: String, descriptor: Int32) {
        self.path = path
        self.descriptor = descriptor
    }

    /// Cuts the file to `length` bytes, dropping anything after it.
    package func truncate(to length: Int64) throws(URLError) {
        guard ftruncate(self.descriptor, off_t(length)) == 0 else {
            throw URLError.fileSystem(.cannotWriteToFile, "cannot truncate \(self.path)", errno: errno)
        }
    }

    /// Writes all readable bytes of `buffer` at `offset`.
    package func write(_ buffer: ByteBuffer, at offset: Int64) throws(URLError) {
        try buffer.withUnsafeReadableBytes { bytes throws(URLError) in try self.write(bytes, at: offset) }
    }

    /// Writes `data` at `offset` (no copy into a ByteBuffer first).
    package func write(_ data: Data, at offset: Int64) throws(URLError) {
        // Data.withUnsafeBytes rethrows untyped: carry the error out as a value.
        let failure: URLError? = data.withUnsafeBytes { bytes in
            do throws(URLError) {
                try self.write(bytes, at: offset)
                return nil
            } catch {
                return error
            }
        }
        if let failure { throw failure }
    }

    /// Writes the readable bytes of `buffers`, one after another, starting at `offset`, with as
    /// few system calls as the kernel allows (`pwritev`, at most 1,024 buffers per call: Linux's `IOV_MAX`).
    /// Returns how many bytes are in the file, and why it stopped short if it did.
    package func write(contentsOf buffers: [ByteBuffer], at offset: Int64) -> (written: Int, failure: URLError?) {
        var vectors: [iovec] = []
        var storages: [Unmanaged<AnyObject>] = []
        vectors.reserveCapacity(buffers.count)
        storages.reserveCapacity(buffers.count)
        defer { for storage in storages { storage.release() } }
        for buffer in buffers where buffer.readableBytes > 0 {
            // The storage is retained while its address is in use, as NIO's own vector writes do.
            buffer.withUnsafeReadableBytesWithStorageManagement { bytes, storage in
                storages.append(storage.retain())
                vectors.append(iovec(iov_base: UnsafeMutableRawPointer(mutating: bytes.baseAddress), iov_len: bytes.count))
            }
        }
        var written = 0
        var index = 0
        let maximumVectors = 1024  // IOV_MAX on Linux
        while index < vectors.count {
            let count = min(maximumVectors, vectors.count - index)
            let result = vectors.withUnsafeBufferPointer { all in
                pwritev(self.descriptor, all.baseAddress! + index, Int32(count), off_t(offset) + off_t(written))
            }
            if result < 0 {
                if errno == EINTR { continue }
                return (written, URLError.fileSystem(.cannotWriteToFile, "cannot write to \(self.path)", errno: errno))
            }
            written += result
            // Skip the vectors written in full; shorten the one written in part.
            var remaining = result
            while remaining > 0, index < vectors.count {
                if remaining >= vectors[index].iov_len {
                    remaining -= vectors[index].iov_len
                    index += 1
                } else {
                    vectors[index].iov_base = vectors[index].iov_base.map { $0 + remaining }
                    vectors[index].iov_len -= remaining
                    remaining = 0
                }
            }
            while index < vectors.count, vectors[index].iov_len == 0 { index += 1 }
        }
        return (written, nil)
    }

    private func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(URLError) {
        var written = 0
        while written < bytes.count {
            let result = pwrite(self.descriptor, bytes.baseAddress! + written, bytes.count - written, off_t(offset) + off_t(written))
            if result < 0 {
                if errno == EINTR { continue }
                throw URLError.fileSystem(.cannotWriteToFile, "cannot write to \(self.path)", errno: errno)
            }
            written += result
        }
    }

    /// Closes the descriptor. Call exactly once.
    package func close() {
        _ = Glibc.close(self.descriptor)
    }

    /// The size of the open file (named or not), or `nil` when the system cannot tell.
    package var size: Int64? {
        var info = stat()
        guard fstat(self.descriptor, &info) == 0 else { return nil }
        return Int64(info.st_size)
    }

    /// The size of the file at `path`, or `nil` when it does not exist.
    package static func size(at path: String) -> Int64? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return Int64(info.st_size)
    }
}

extension URLError {
    /// A file-system failure with the system's message, e.g. "No space left on device".
    package static func fileSystem(_ code: URLError.Code, _ what: String, errno number: Int32) -> URLError {
        let reason = String(cString: strerror(number))
        return URLError(code, userInfo: [NSLocalizedDescriptionKey: "\(what): \(reason)", "errno": Int(number)])
    }
}

extension PartialFile {
    /// Forces the file's written bytes at `path` onto the disk (`fdatasync`), so that a
    /// checkpoint recorded afterwards never names bytes a power cut could lose. A missing file
    /// is no error (nothing to sync). Blocks: call it off the event loops.
    package static func syncData(atPath path: String) {
        guard !path.isEmpty else { return }
        let descriptor = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        _ = fdatasync(descriptor)
        _ = Glibc.close(descriptor)
    }
}
