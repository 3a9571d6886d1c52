import NIOCore
import NIOHTTP1

/// Receives one response carried by a direct HTTP/1.1 connection (``HTTP1ConnectionPool``): the
/// calls AsyncHTTPClient makes to a response delegate, in the same order and on the same loop,
/// so one type can serve both paths.
///
/// ``receivedHead(_:on:)`` comes once, first (informational `1xx` answers are not passed on);
/// then ``receivedBodyPart(_:on:)`` once per network read of body bytes, each only after the
/// future the previous call returned has succeeded: until then the connection reads nothing
/// more, which is what slows the sender down. A failed future ends the exchange with its error
/// and closes the connection. Every call comes on the connection's event loop.
protocol HTTP1ResponseSink: AnyObject {
    /// The response's status line and header fields.
    func receivedHead(_ head: HTTPResponseHead, on eventLoop: any EventLoop) -> EventLoopFuture<Void>
    /// Body bytes, in order, without a copy.
    func receivedBodyPart(_ buffer: ByteBuffer, on eventLoop: any EventLoop) -> EventLoopFuture<Void>
    /// Whether a large body is read in large buffers (``HTTP1ConnectionHandler/largeReads``):
    /// `true` for a download's own connection, `false` for one of many (a segment's).
    var readsInLargeBuffers: Bool { get }
}
