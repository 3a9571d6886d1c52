#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation

/// What `haul` needs to know about its terminal.
enum Terminal {
    /// Whether standard error is a terminal (live progress) or a pipe/file (quiet lines).
    static var isInteractive: Bool { isatty(STDERR_FILENO) == 1 }

    /// The terminal's width in columns (80 when unknown).
    static var width: Int {
        var size = winsize()
        if ioctl(STDERR_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 { return Int(size.ws_col) }
        return 80
    }

    /// Writes `text` to standard error unbuffered.
    static func writeError(_ text: String) {
        FileHandle.standardError.write(Data(text.utf8))
    }
}

/// The size of the file at `path`, or `nil` when there is none.
func fileSize(_ path: String) -> Int64? {
    (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.int64Value
}
