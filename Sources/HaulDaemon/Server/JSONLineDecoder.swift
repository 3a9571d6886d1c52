import HaulCore
import HaulDaemonClient
import NIOCore


/// Splits the byte stream into lines (without the newline), refusing lines longer than
/// ``DaemonProtocol/maximumLineLength`` so that garbage without newlines cannot grow memory.
struct JSONLineDecoder: ByteToMessageDecoder {
    typealias InboundOut = ByteBuffer

    private var scanner = LineScanner(maximumLength: DaemonProtocol.maximumLineLength)

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let line = try self.scanner.nextLine(in: &buffer) else { return .needMoreData }
        context.fireChannelRead(self.wrapInboundOut(line))
        return .continue
    }
}
