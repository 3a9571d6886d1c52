#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import NIOCore

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
