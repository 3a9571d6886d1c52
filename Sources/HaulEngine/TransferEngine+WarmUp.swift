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
    /// The results are kept for the process, so a command-line tool calls this once, off the
    /// thread that parses its arguments (`haul get`: on a Dispatch worker), and on a second core
    /// the two overlap. Safe from any thread but an event loop's, any number of times (later
    /// calls find everything looked up already); it blocks until the channel is closed again.
    ///
    /// Measured (`haul get`, 25 alternating rounds against the build without it): the first
    /// request 7.08 -> 5.45 ms after the program's start on 500 files of 256 KiB, 7.41 -> 5.45
    /// ms on 1,000 of 16 KiB; peak RSS 0.3-1 MB higher (1,000 × 16 KiB: 17.9 -> 18.4-19.1 MB;
    /// a 1 GiB file: 20.7 -> 21.2-21.7 MB).
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
        // The channel owns its socket and closes it. If NIO refused the socket (not seen on a
        // fresh pair), it is not closed here: whether NIO closed it is not known, and a second
        // close could hit a descriptor opened since; one stays open until the process exits.
        try? channel?.close().wait()
    }
}
