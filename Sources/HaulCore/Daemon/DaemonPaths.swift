import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Where `hauld` keeps its files.
///
/// - data directory: `$HAUL_DATA_DIR`, else `$XDG_DATA_HOME/haul`, else `~/.local/share/haul`;
///   holds `store.sqlite`, `hauld.lock`, partial downloads and the holding area.
/// - runtime directory: `$HAUL_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/haul`, else `/tmp/haul-UID`;
///   holds the socket `hauld.sock`. Created with mode 0700.
public struct DaemonPaths: Sendable, Hashable {
    public var dataDirectory: URL
    public var runtimeDirectory: URL

    public init(dataDirectory: URL, runtimeDirectory: URL) {
        self.dataDirectory = dataDirectory
        self.runtimeDirectory = runtimeDirectory
    }

    /// The paths from the environment, as described above.
    public static func fromEnvironment(_ environment: [String: String] = ProcessInfo.processInfo.environment) -> DaemonPaths {
        let home = environment["HOME"] ?? NSHomeDirectory()
        let data: URL
        if let explicit = environment["HAUL_DATA_DIR"], !explicit.isEmpty {
            data = URL(fileURLWithPath: explicit, isDirectory: true)
        } else if let xdg = environment["XDG_DATA_HOME"], !xdg.isEmpty {
            data = URL(fileURLWithPath: xdg, isDirectory: true).appendingPathComponent("haul", isDirectory: true)
        } else {
            data = URL(fileURLWithPath: home, isDirectory: true).appendingPathComponent(".local/share/haul", isDirectory: true)
        }
        let runtime: URL
        if let explicit = environment["HAUL_RUNTIME_DIR"], !explicit.isEmpty {
            runtime = URL(fileURLWithPath: explicit, isDirectory: true)
        } else if let xdg = environment["XDG_RUNTIME_DIR"], !xdg.isEmpty {
            runtime = URL(fileURLWithPath: xdg, isDirectory: true).appendingPathComponent("haul", isDirectory: true)
        } else {
            runtime = URL(fileURLWithPath: "/tmp/haul-\(getuid())", isDirectory: true)
        }
        return DaemonPaths(dataDirectory: data, runtimeDirectory: runtime)
    }

    public var socketPath: String { self.runtimeDirectory.appendingPathComponent("hauld.sock").path }
    public var lockPath: String { self.dataDirectory.appendingPathComponent("hauld.lock").path }
    public var storePath: String { self.dataDirectory.appendingPathComponent("store.sqlite").path }
    public var partialDirectory: URL { self.dataDirectory.appendingPathComponent("partial", isDirectory: true) }
    public var logPath: String { self.dataDirectory.appendingPathComponent("hauld.log").path }

    /// The holding area of a session: finished downloads wait here for the client.
    public func heldDirectory(session: String) -> URL {
        let safe = session.unicodeScalars.map { CharacterSet.alphanumerics.contains($0) || "._-".unicodeScalars.contains($0) ? String($0) : "_" }.joined()
        return self.dataDirectory.appendingPathComponent("held", isDirectory: true).appendingPathComponent(safe, isDirectory: true)
    }

}
