#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import NIOCore

/// The file a download streams into: positioned writes straight from the network buffers,
/// with no copy.
///
/// Not thread-safe by itself: a ``TransferRun`` touches it from one exchange at a time, and
/// the exchanges are sequenced by the futures that end them.
package struct PartialFile: Sendable {
    package let path: String
    private let descriptor: Int32

    /// Opens (creating if needed) the file at `path` for writing, without truncating it.
    ///
    /// - Throws: `URLError(.cannotCreateFile)` with the system's reason.
    package static func open(path: String) throws(URLError) -> PartialFile {
        let descriptor = Glibc.open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
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
