#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import HaulCore

/// Moves files into place without ever replacing an existing file.
package enum NoOverwriteMove {
    package enum Failure: Error, CustomStringConvertible {
        case exists(String)
        case system(String, Int32)

        package var isExists: Bool {
            if case .exists = self { return true }
            return false
        }

        package var description: String {
            switch self {
            case .exists(let path): "\(path) already exists"
            case .system(let what, let number): "\(what): \(String(cString: strerror(number)))"
            }
        }
    }

    /// glibc's `renameat2` (2.28+; not in Swift's Glibc module): one atomic call that refuses to
    /// replace (`RENAME_NOREPLACE`), where `link` + `unlink` takes two.
    private static let renameNoReplace = GlibcFunction.lookup(
        "renameat2",
        as: (@convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32).self
    )

    /// Atomically moves `source` to `destination`; fails with `.exists` instead of replacing a
    /// file that is already there. `renameat2(RENAME_NOREPLACE)` where the file system has it,
    /// else a hard link and an unlink.
    package static func move(_ source: String, to destination: String) throws {
        if let renameNoReplace = Self.renameNoReplace {
            if renameNoReplace(AT_FDCWD, source, AT_FDCWD, destination, 1 /* RENAME_NOREPLACE */) == 0 { return }
            let number = errno
            if number == EEXIST { throw Failure.exists(destination) }
            // EINVAL / ENOSYS / ENOTSUP / EPERM: this file system (or kernel, or FUSE server)
            // cannot; the link path below can, or falls back itself.
            if number != EINVAL && number != ENOSYS && number != ENOTSUP && number != EPERM {
                throw Failure.system("cannot move to \(destination)", number)
            }
        }
        if link(source, destination) == 0 {
            unlink(source)
            return
        }
        let number = errno
        if number == EEXIST { throw Failure.exists(destination) }
        // File systems without hard links: check, then rename (a narrow race, reported honestly).
        if number == EPERM || number == EXDEV || number == ENOTSUP {
            if access(destination, F_OK) == 0 { throw Failure.exists(destination) }
            guard rename(source, destination) == 0 else { throw Failure.system("cannot move to \(destination)", errno) }
            return
        }
        throw Failure.system("cannot move to \(destination)", number)
    }

    /// Moves `source` into `directory` under `name`, or under `name (1)`, `name (2)`, … when
    /// taken. Returns the path used.
    package static func moveChoosingFreeName(_ source: String, directory: String, name: String) throws -> String {
        try self.placeChoosingFreeName(directory: directory, name: name) { path in try move(source, to: path) }
    }

    /// Names the unnamed `file` (``PartialFile/openUnnamed(path:)``) `name` in `directory`, or
    /// `name (1)`, `name (2)`, … when taken. Returns the path used.
    package static func linkChoosingFreeName(_ file: PartialFile, directory: String, name: String) throws -> String {
        try self.placeChoosingFreeName(directory: directory, name: name) { path in try file.link(to: path) }
    }

    private static func placeChoosingFreeName(directory: String, name: String, place: (String) throws -> Void) throws -> String {
        var index = 0
        while true {
            let candidate = index == 0 ? name : FileNaming.numberedAlternative(to: name, index: index)
            let path = (directory as NSString).appendingPathComponent(candidate)
            do {
                try place(path)
                return path
            } catch let failure as Failure where failure.isExists {
                index += 1
                if index > 10_000 { throw Failure.exists(path) }
            }
        }
    }
}
