import Foundation
import HaulCore

extension DaemonPaths {
    /// Creates the directories (the runtime one with mode 0700, so only the user can reach
    /// the socket).
    public func createDirectories() throws {
        let manager = FileManager.default
        try manager.createDirectory(at: self.dataDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try manager.createDirectory(at: self.partialDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try manager.createDirectory(at: self.runtimeDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        chmod(self.runtimeDirectory.path, 0o700)
    }
}
