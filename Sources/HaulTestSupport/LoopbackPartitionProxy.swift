import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// A TCP relay on 127.0.0.1 to another loopback port, with a switch that partitions it: while
/// ``partition()`` holds, connections stay open (and new ones are accepted) but no byte passes
/// in either direction, as when a network drops packets; ``heal()`` lets the held bytes through
/// and traffic flows again. Tests put it between a daemon and its database.
public final class LoopbackPartitionProxy: Sendable {
    private let channel: any Channel
    public let port: Int
    let state: Mutex<State>

    struct State {
        var partitioned = false
        /// Relays waiting for the partition to heal.
        var held: [ObjectIdentifier: @Sendable () -> Void] = [:]
    }

    private init(channel: any Channel) {
        self.channel = channel
        self.port = channel.localAddress?.port ?? 0
        self.state = Mutex(State())
    }

    /// Starts relaying to `127.0.0.1:targetPort`.
    public static func start(targetPort: Int) async throws -> LoopbackPartitionProxy {
        let box = Mutex<LoopbackPartitionProxy?>(nil)
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.autoRead, value: true)
            .childChannelInitializer { inbound in
                let proxy = box.withLock { $0 }!
                let toTarget = RelayHandler(proxy: proxy)
                return ClientBootstrap(group: inbound.eventLoop)
                    .connect(host: "127.0.0.1", port: targetPort)
                    .flatMapThrowing { outbound in
                        let back = RelayHandler(proxy: proxy)
                        toTarget.peer = outbound
                        back.peer = inbound
                        try outbound.pipeline.syncOperations.addHandler(back)
                        try inbound.pipeline.syncOperations.addHandler(toTarget)
                    }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        let proxy = LoopbackPartitionProxy(channel: channel)
        box.withLock { $0 = proxy }
        return proxy
    }

    /// From now on no byte passes (connections stay open).
    public func partition() {
        self.state.withLock { $0.partitioned = true }
    }

    /// Bytes flow again, the held ones first.
    public func heal() {
        let waiting = self.state.withLock { state in
            state.partitioned = false
            defer { state.held = [:] }
            return Array(state.held.values)
        }
        for resume in waiting { resume() }
    }

    var isPartitioned: Bool { self.state.withLock { $0.partitioned } }

    public func shutdown() async throws {
        try await self.channel.close()
    }
}

/// Copies what one side reads to the other side, holding it while the proxy is partitioned.
private final class RelayHandler: ChannelInboundHandler, @unchecked Sendable {
    // @unchecked: used on its channel's event loop only (`peer` is set before it is added).
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let proxy: LoopbackPartitionProxy
    var peer: (any Channel)?
    private var held: [ByteBuffer] = []
    private var context: ChannelHandlerContext?

    init(proxy: LoopbackPartitionProxy) {
        self.proxy = proxy
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = self.unwrapInboundIn(data)
        if self.proxy.isPartitioned || !self.held.isEmpty {
            self.held.append(buffer)
            let loop = context.eventLoop
            let registered = self.proxy.state.withLock { state -> Bool in
                guard state.partitioned else { return false }
                state.held[ObjectIdentifier(self)] = { loop.execute { self.release() } }
                return true
            }
            if !registered { self.release() }
            return
        }
        self.peer?.writeAndFlush(buffer, promise: nil)
    }

    private func release() {
        let buffers = self.held
        self.held = []
        for buffer in buffers { self.peer?.write(buffer, promise: nil) }
        self.peer?.flush()
    }

    func channelInactive(context: ChannelHandlerContext) {
        // A close crosses a partition no more than data does: the other side learns of it
        // when the partition heals.
        let loop = context.eventLoop
        let registered = self.proxy.state.withLock { state -> Bool in
            guard state.partitioned else { return false }
            state.held[ObjectIdentifier(self)] = {
                loop.execute {
                    self.release()
                    self.peer?.close(promise: nil)
                }
            }
            return true
        }
        if !registered {
            self.release()
            self.peer?.close(promise: nil)
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
