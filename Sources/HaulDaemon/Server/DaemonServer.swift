import Foundation
import NIOCore
import NIOPosix

/// Listens on the daemon's Unix domain socket.
public final class DaemonServer: Sendable {
    private let channel: any Channel

    private init(channel: any Channel) {
        self.channel = channel
    }

    /// Binds `path` (replacing a stale socket file) and serves `daemon` on it, on the core's
    /// ``TransferCore/serviceLoop``.
    public static func start(path: String, daemon: TransferDaemon, queue: DownloadQueue, web: WebUIServer? = nil, rpc: Aria2RPCServer? = nil) async throws -> DaemonServer {
        let channel = try await ServerBootstrap(group: queue.core.serviceLoop)
            .serverChannelOption(.backlog, value: 64)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(JSONLineDecoder()))
                    try channel.pipeline.syncOperations.addHandler(DaemonConnectionHandler(daemon: daemon, queue: queue, web: web, rpc: rpc))
                }
            }
            .bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true)
            .get()
        chmod(path, 0o600)
        return DaemonServer(channel: channel)
    }

    /// Stops accepting connections.
    public func close() async {
        try? await self.channel.close()
    }
}
