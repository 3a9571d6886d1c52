import AsyncHTTPClient
import Foundation
import HaulCore
import NIOCore
import NIOHTTP1

/// One extra lane's exchange: checks the `206`, queues the bytes that belong to the lane for
/// the file (positioned writes through a ``FileBodyWriter`` of its own on the shared partial
/// file), honours the run's speed limits, and ends early once the lane has all it needs.
final class SegmentExchange: HTTPClientResponseDelegate, HTTP1ResponseSink, @unchecked Sendable {
    // @unchecked: AsyncHTTPClient calls a delegate on its event loop, one call at a time.
    typealias Response = Void

    enum Refusal: Error {
        case entityChanged(String)
        case notUsable(String)
        /// The lane's mirror may not contribute (`reason`).
        case mirrorDropped(String)
        /// The lane has what it needs (not a failure).
        case reachedEnd
    }

    let group: SegmentGroup
    let lane: Int
    let range: Range<Int64>
    private(set) var writer: FileBodyWriter?

    init(group: SegmentGroup, lane: Int, range: Range<Int64>) {
        self.group = group
        self.lane = lane
        self.range = range
    }

    func didReceiveHead(task: HTTPClient.Task<Void>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        self.receivedHead(head, on: task.eventLoop)
    }

    func receivedHead(_ head: HTTPResponseHead, on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        let headers = HTTPHeaderFields(head.headers.map { ($0.name, $0.value) })
        if let refusal = self.group.judge(lane: self.lane, status: Int(head.status.code), headers: headers, range: self.range) {
            return eventLoop.makeFailedFuture(refusal)
        }
        self.group.laneValidated(self.lane)
        let run = self.group.run
        let path = self.group.path
        let group = self.group
        let lane = self.lane
        self.writer = FileBodyWriter(
            open: { () throws(URLError) -> PartialFile in try run.openFile(path: path) },
            offset: self.range.lowerBound,
            eventLoop: group.eventLoop,
            pool: run.engine.fileIOPool,
            bufferLimit: group.laneBufferLimit
        ) { count in
            group.written(lane, count: count)
        }
        return eventLoop.makeSucceededVoidFuture()
    }

    func didReceiveBodyPart(task: HTTPClient.Task<Void>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        self.receivedBodyPart(buffer, on: task.eventLoop)
    }

    /// One of many connections of a download: NIO's usual reads (each lane would hold one).
    var readsInLargeBuffers: Bool { false }

    func receivedBodyPart(_ buffer: ByteBuffer, on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        guard let writer = self.writer else { return eventLoop.makeSucceededVoidFuture() }
        let allowed = self.group.received(self.lane, count: buffer.readableBytes)
        var room: EventLoopFuture<Void>?
        if allowed > 0 {
            room = writer.enqueue(allowed == buffer.readableBytes ? buffer : buffer.getSlice(at: buffer.readerIndex, length: allowed)!)
        }
        if self.group.hasReceivedAll(self.lane) {
            return eventLoop.makeFailedFuture(Refusal.reachedEnd)
        }
        return self.group.run.readOn(after: allowed, room: room, on: eventLoop)
    }

    func didFinishRequest(task: HTTPClient.Task<Void>) throws {
        try self.finishedResponse()
    }

    /// Checks the lane's exchange once its response ended.
    func finishedResponse() throws {
        guard self.writer != nil else { throw Refusal.notUsable("no answer") }
    }
}

