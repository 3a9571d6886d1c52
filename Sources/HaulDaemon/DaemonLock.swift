import Foundation

/// Keeps two daemons off one store: an exclusive `flock` on `hauld.lock`, held for the
/// daemon's life (the kernel releases it when the process dies, even by `kill -9`).
public final class DaemonLock: Sendable {
    /// Another daemon holds the lock.
    public struct AlreadyRunning: Error, CustomStringConvertible {
        public var path: String
        public var otherProcessID: String
        public var description: String {
            "another hauld (pid \(self.otherProcessID)) is already running for this store (lock \(self.path))"
        }
    }

    private let descriptor: Int32

    /// Takes the lock at `path` or throws ``AlreadyRunning``.
    public init(path: String) throws {
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw CocoaError(.fileWriteNoPermission, userInfo: [NSFilePathErrorKey: path])
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let other = (try? String(contentsOfFile: path, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
            close(descriptor)
            throw AlreadyRunning(path: path, otherProcessID: other.isEmpty ? "?" : other)
        }
        ftruncate(descriptor, 0)
        let text = "\(getpid())\n"
        _ = text.withCString { write(descriptor, $0, strlen($0)) }
        self.descriptor = descriptor
    }

    deinit {
        close(self.descriptor)
    }
}
