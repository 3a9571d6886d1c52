import Glibc
import NIOCore
import NIOPosix

extension TransferEngine {
    /// Does, ahead of the first transfer, the one-time work its first connection would do on
    /// the way: starts the shared event loops, and sets up one channel as a direct HTTP/1.1
    /// connection is set up — NIO's socket channel, registered with a loop, with the
    /// connection's handlers — over a connected pair of Unix sockets (no network), then closes
    /// it. What that costs the first time is mostly the Swift runtime looking up protocol
    /// conformances and generic metadata: each first look-up of a conformance scans every
    /// conformance record of the program, about 9,000 in the statically linked `haul`, some
    /// 300,000 instructions a scan. A one-file `haul get` spent 74 % of its instructions on
    /// them (callgrind: 24.6 of 33.1 M), 27 of its 65 scans on the loop while it set up the
    /// first connection.
    ///
    /// The results are kept for the process, so a command-line tool calls this once, on a
    /// thread of its own, while its main thread parses the arguments: on a second core the two
    /// overlap. Safe from any thread but an event loop's, any number of times (later calls find
    /// everything looked up already); it blocks until the channel is closed again.
    package static func warmUp() {
        // The group's first loop, without advancing its round robin (engines take loops in turn).
        var loops = MultiThreadedEventLoopGroup.singleton.makeIterator()
        guard let loop = loops.next() else { return }
        var pair: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0 else { return }
        defer { close(pair[1]) }
        let channel = try? ClientBootstrap(group: loop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try HTTP1ConnectionPool.addHandlers(to: channel, idleTimeout: .seconds(30)) }
            }
            .withConnectedSocket(pair[0])
            .wait()
        // Once the channel exists it owns its socket (a failure closed it).
        try? channel?.close().wait()
    }
}
