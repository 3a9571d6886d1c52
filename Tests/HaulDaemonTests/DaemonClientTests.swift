import Foundation
import HaulCore
import HaulDaemonClient
import HaulTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("The daemon client")
struct DaemonClientTests {
    /// A Unix socket at `path` whose every connection is accepted and closed at once, as by a
    /// daemon killed right after accepting it. Returns how to stop it.
    static func acceptAndClose(at path: String) throws -> () -> Void {
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        try #require(listener >= 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            _ = path.utf8CString.withUnsafeBytes { raw.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0.prefix(raw.count - 1))) }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        try #require(bound == 0 && listen(listener, 16) == 0)
        let thread = Thread {
            while true {
                let connection = accept(listener, nil, nil)
                if connection < 0 { return }
                close(connection)
            }
        }
        thread.start()
        return {
            shutdown(listener, Int32(SHUT_RDWR))
            close(listener)
            unlink(path)
        }
    }

    @Test("A connection the daemon closes at once fails each request at once, not after the 30 s answer timeout")
    func closedRightAfterAccept() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-client-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let paths = DaemonPaths(dataDirectory: directory, runtimeDirectory: directory)
        let stop = try Self.acceptAndClose(at: paths.socketPath)
        defer { stop() }
        for _ in 0..<20 {
            let started = ContinuousClock.now
            let outcome = await blocking { () -> Result<DaemonResponse, any Error> in
                Result { try BackgroundDaemonClient.connectOnce(paths: paths).call(DaemonRequest(.ping)) }
            }
            #expect(throws: (any Error).self) { try outcome.get() }
            #expect(ContinuousClock.now - started < .seconds(5), "the closed connection was noticed")
        }
    }
}
