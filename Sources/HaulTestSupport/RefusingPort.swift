import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A port on 127.0.0.1 where every connection is refused, for as long as this object lives: a
/// socket is bound to it and never listens, so no other server (another test's, started in
/// parallel) can take the port meanwhile — a port that was merely closed can be. A
/// ``FaultInjectingHTTPServer`` started on the port later listens there.
public final class RefusingPort: Sendable {
    public let port: Int
    private let descriptor: Int32

    public init() throws {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        // A test server may listen on the port later (it sets SO_REUSEPORT too).
        var one: Int32 = 1
        setsockopt(descriptor, SOL_SOCKET, SO_REUSEPORT, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer -> Bool in
                bind(descriptor, pointer, length) == 0 && getsockname(descriptor, pointer, &length) == 0
            }
        }
        guard descriptor >= 0, bound else {
            if descriptor >= 0 { close(descriptor) }
            throw NginxError("cannot bind a port on 127.0.0.1")
        }
        self.descriptor = descriptor
        self.port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit {
        close(self.descriptor)
    }
}
