import HaulCore
import NIOCore

/// Splits the byte stream into lines (without the newline), refusing lines longer than
/// ``DaemonProtocol/maximumLineLength`` so that garbage without newlines cannot grow memory.
struct JSONLineDecoder: ByteToMessageDecoder {
    typealias InboundOut = ByteBuffer

    struct LineTooLong: Error {}

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let newline = buffer.readableBytesView.firstIndex(of: UInt8(ascii: "\n")) else {
            if buffer.readableBytes > DaemonProtocol.maximumLineLength { throw LineTooLong() }
            return .needMoreData
        }
        let length = newline - buffer.readerIndex
        // A long line whose end came in the same read as the rest is refused as well (the check
        // above sees only lines still without their newline: up to a read longer got through).
        if length > DaemonProtocol.maximumLineLength { throw LineTooLong() }
        let line = buffer.readSlice(length: length)!
        buffer.moveReaderIndex(forwardBy: 1)
        context.fireChannelRead(self.wrapInboundOut(line))
        return .continue
    }
}
