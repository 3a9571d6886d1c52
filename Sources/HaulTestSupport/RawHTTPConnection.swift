import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One TCP connection to a loopback server, written and read as raw bytes: for tests of
/// pipelining and connection handling that HTTP client libraries hide. Blocking; call it off
/// the cooperative pool (or accept the short block in a test).
public final class RawHTTPConnection {
    /// One parsed answer.
    public struct Response: Sendable {
        public var status: Int
        /// Header names lowercased.
        public var headers: [String: String]
        public var body: [UInt8]
        public var text: String { String(decoding: self.body, as: UTF8.self) }
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    private let descriptor: Int32
    private var buffer: [UInt8] = []

    /// Connects to 127.0.0.1:`port`; reads give up after `timeoutSeconds`.
    public init(port: Int, timeoutSeconds: Int = 10) throws {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw Failure(description: "socket: errno \(errno)") }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            close(descriptor)
            throw Failure(description: "connect to 127.0.0.1:\(port): errno \(errno)")
        }
        self.descriptor = descriptor
    }

    deinit { close(self.descriptor) }

    /// Sends `bytes` as they are (several requests at once pipeline them).
    public func send(_ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes { write(self.descriptor, $0.baseAddress, $0.count) }
            guard count > 0 else { throw Failure(description: "write: errno \(errno)") }
            sent += count
        }
    }

    /// A request with a `Content-Length` body.
    public static func request(_ method: String, _ target: String, body: [UInt8] = [], headers: [String] = []) -> [UInt8] {
        var head = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        for header in headers { head += header + "\r\n" }
        if !body.isEmpty || method == "POST" { head += "Content-Length: \(body.count)\r\n" }
        return Array((head + "\r\n").utf8) + body
    }

    /// The next answer (its body framed by `Content-Length`; none for 1xx, 204 and 304).
    public func readResponse() throws -> Response {
        let headerEnd = try self.fill { buffer in
            buffer.indices.dropLast(3).first { buffer[$0] == 13 && buffer[$0 + 1] == 10 && buffer[$0 + 2] == 13 && buffer[$0 + 3] == 10 }
        }
        let lines = String(decoding: self.buffer[..<headerEnd], as: UTF8.self).components(separatedBy: "\r\n")
        let statusParts = lines[0].split(separator: " ")
        guard statusParts.count >= 2, let status = Int(statusParts[1]) else { throw Failure(description: "bad status line: \(lines[0])") }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        // An informational answer (101 Switching Protocols), 204 and 304 have no body.
        let bodiless = (100..<200).contains(status) || status == 204 || status == 304
        guard let length = headers["content-length"].flatMap(Int.init) ?? (bodiless ? 0 : nil) else {
            throw Failure(description: "no Content-Length: \(headers)")
        }
        let bodyStart = headerEnd + 4
        _ = try self.fill { $0.count >= bodyStart + length ? 0 : nil }
        let body = Array(self.buffer[bodyStart..<(bodyStart + length)])
        self.buffer.removeFirst(bodyStart + length)
        return Response(status: status, headers: headers, body: body)
    }

    /// Whether the server closed the connection (reads until end of file or the timeout).
    public func isClosedByServer() -> Bool {
        var byte: UInt8 = 0
        return read(self.descriptor, &byte, 1) == 0
    }

    /// Reads until `found` finds what it looks for in the buffer.
    private func fill(_ found: ([UInt8]) -> Int?) throws -> Int {
        while true {
            if let index = found(self.buffer) { return index }
            var chunk = [UInt8](repeating: 0, count: 65_536)
            let count = chunk.withUnsafeMutableBytes { read(self.descriptor, $0.baseAddress, $0.count) }
            guard count > 0 else { throw Failure(description: count == 0 ? "closed by the server" : "read: errno \(errno)") }
            self.buffer += chunk[..<count]
        }
    }
}
