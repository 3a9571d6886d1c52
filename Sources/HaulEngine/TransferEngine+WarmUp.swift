import NIOCore
import NIOEmbedded
import NIOPosix

extension TransferEngine {
    /// Does, ahead of the first transfer, the one-time work its first connection would do on
    /// the way: starts the shared event loops, and has the Swift runtime look up the protocol
    /// conformances a connection's handlers are checked for (a channel pipeline like a direct
    /// HTTP/1.1 connection's, on an `EmbeddedChannel`: no socket, no network).
    ///
    /// Each first look-up of a type's conformance scans every conformance record of the
    /// program — about 9,000 in the statically linked `haul`, some 300,000 instructions a scan —
    /// and a one-file `haul get` spent 74 % of its instructions on them (callgrind: 24.6 of
    /// 33.1 M), 27 of its 65 scans on the loop while it set up the first connection. The
    /// results are cached for the process, so a command-line tool calls this once, on a thread
    /// of its own, while its main thread parses the arguments: on a second core the two overlap.
    /// Safe from any thread, any number of times (later calls find everything cached).
    package static func warmUp() {
        _ = MultiThreadedEventLoopGroup.singleton
        let channel = EmbeddedChannel()
        try? HTTP1ConnectionPool.addHandlers(to: channel, idleTimeout: .seconds(30))
        _ = try? channel.finish(acceptAlreadyClosed: true)
    }
}
