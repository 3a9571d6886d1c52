import Crypto
import Foundation
import HaulCore
import NIOCore
import NIOHTTP1
import NIOPosix

/// One connection of ``FaultInjectingHTTPServer``: parses the route and options of each request
/// and streams the response with the faults asked for.
final class FaultInjectingHTTPHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let server: FaultInjectingHTTPServer
    private var head: HTTPRequestHead?
    private var body = ByteBuffer()
    private var isActive = true
    private var isSendingBody = false
    /// The counter key of the `/file` response being sent (for the per-key count of
    /// responses in flight), until it ends.
    private var responseKey: String?

    init(server: FaultInjectingHTTPServer) {
        self.server = server
    }

    func channelActive(context: ChannelHandlerContext) {
        self.server.connectionOpened()
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.isActive = false
        self.endResponse()
        self.server.connectionClosed()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            self.body.clear()
        case .body(var buffer):
            self.body.writeBuffer(&buffer)
        case .end:
            guard let head = self.head else { return }
            self.head = nil
            self.server.record(
                .init(method: head.method.rawValue, uri: head.uri, headers: head.headers.map { ($0.name, $0.value) })
            )
            self.route(context: context, head: head)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    // MARK: - Routing

    private func route(context: ChannelHandlerContext, head: HTTPRequestHead) {
        // As a forward proxy: CONNECT tunnels are refused; absolute-form requests
        // (`GET http://origin/path`) are answered as if this server were the origin.
        if head.method == .CONNECT {
            self.respond(context: context, status: .forbidden, headers: [], body: "no tunnels here\n")
            return
        }
        var target = head.uri
        if let parsed = URLComponents(string: head.uri), parsed.scheme != nil, parsed.host != nil {
            target = (parsed.percentEncodedPath.isEmpty ? "/" : parsed.percentEncodedPath) + (parsed.percentEncodedQuery.map { "?" + $0 } ?? "")
        }
        let components = URLComponents(string: "http://127.0.0.1" + target)
        let path = components?.path ?? "/"
        var query: [String: String] = [:]
        for item in components?.queryItems ?? [] { query[item.name] = item.value ?? "" }
        let segments = path.split(separator: "/").map(String.init)

        switch segments.first {
        case "file" where segments.count >= 2:
            self.serveFile(context: context, head: head, name: segments[1], query: query)
        case "redirect" where segments.count == 2:
            let remaining = Int(segments[1]) ?? 0
            let status = HTTPResponseStatus(statusCode: Int(query["status"] ?? "302") ?? 302)
            let target = query["to"] ?? "/file/redirected"
            let encodedTarget = target.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? target
            let location =
                remaining > 1
                ? "/redirect/\(remaining - 1)?status=\(status.code)&to=\(encodedTarget)"
                : target
            self.respond(context: context, status: status, headers: [("Location", location)], body: "redirect\n")
        case "loop" where segments.count == 2:
            let next = segments[1] == "a" ? "/loop/b" : "/loop/a"
            self.respond(context: context, status: .found, headers: [("Location", next)], body: "loop\n")
        case "status" where segments.count == 2:
            let code = Int(segments[1]) ?? 500
            var headers: [(String, String)] = []
            if let retryAfter = query["retryAfter"] { headers.append(("Retry-After", retryAfter)) }
            self.respond(context: context, status: HTTPResponseStatus(statusCode: code), headers: headers, body: "status \(code)\n")
        case "cache" where segments.count == 2:
            self.serveCacheable(context: context, head: head, name: segments[1], query: query)
        case "auth" where segments.count == 2:
            self.authenticate(context: context, head: head, scheme: segments[1], query: query)
        case "setcookie":
            // Each `c` query item is one Set-Cookie value; with `to`, the answer is a 302 there.
            var headers = (components?.queryItems ?? []).filter { $0.name == "c" }.map { ("Set-Cookie", $0.value ?? "") }
            if let target = query["to"] {
                headers.append(("Location", target))
                self.respond(context: context, status: .found, headers: headers, body: "cookies\n")
            } else {
                self.respond(context: context, status: .ok, headers: headers, body: "cookies\n")
            }
        case "stats":
            let stats = self.server.bodyBytesPerKey
            let body = "{" + stats.sorted { $0.key < $1.key }.map { "\"\($0.key)\":\($0.value)" }.joined(separator: ",") + "}"
            self.respond(context: context, status: .ok, headers: [], body: body)
        case "headers":
            // The request's header lines as the body (`Name: value` each), to check what a
            // client sent.
            let body = head.headers.map { "\($0.name): \($0.value)\n" }.joined()
            self.respond(context: context, status: .ok, headers: [], body: body)
        case "echo":
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: "application/octet-stream")
            headers.add(name: "Content-Length", value: "\(self.body.readableBytes)")
            headers.add(name: "X-Echo-Method", value: head.method.rawValue)
            headers.add(name: "X-Echo-Length", value: "\(self.body.readableBytes)")
            context.write(self.wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: .ok, headers: headers))), promise: nil)
            context.write(self.wrapOutboundOut(.body(.byteBuffer(self.body))), promise: nil)
            context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
        default:
            self.respond(context: context, status: .notFound, headers: [], body: "not found\n")
        }
    }

    /// `/auth/basic`, `/auth/digest` or `/auth/both` with `user`, `pass`, `realm`,
    /// `algorithm` (MD5 or SHA-256): 200 "hello USER" with the right credentials, else 401
    /// with the challenge(s).
    private func authenticate(context: ChannelHandlerContext, head: HTTPRequestHead, scheme: String, query: [String: String]) {
        let user = query["user"] ?? "user"
        let password = query["pass"] ?? "secret"
        let realm = query["realm"] ?? "haul-test"
        let algorithm = query["algorithm"] ?? "MD5"
        let nonce = "n0nce-\(realm)"
        let authorization = head.headers.first(name: "Authorization") ?? ""
        var accepted = false
        if authorization.hasPrefix("Basic "), scheme != "digest" {
            let decoded = Data(base64Encoded: String(authorization.dropFirst(6))).map { String(decoding: $0, as: UTF8.self) }
            accepted = decoded == "\(user):\(password)"
        } else if authorization.hasPrefix("Digest "), scheme != "basic",
            let answer = AuthenticationChallenge.parse([authorization]).first
        {
            let p = answer.parameters
            func hash(_ text: String) -> String {
                let data = Data(text.utf8)
                let digest: [UInt8] = algorithm == "SHA-256" ? Array(SHA256.hash(data: data)) : Array(Insecure.MD5.hash(data: data))
                return digest.hexString
            }
            let ha1 = hash("\(user):\(realm):\(password)")
            let ha2 = hash("\(head.method.rawValue):\(p["uri"] ?? "")")
            let expected = hash("\(ha1):\(nonce):\(p["nc"] ?? ""):\(p["cnonce"] ?? ""):auth:\(ha2)")
            accepted = p["username"] == user && p["nonce"] == nonce && p["realm"] == realm && p["qop"] == "auth"
                && p["response"] == expected && p["uri"] == head.uri && p["opaque"] == "0paque"
        }
        if accepted {
            self.respond(context: context, status: .ok, headers: [], body: "hello \(user)\n")
            return
        }
        var headers: [(String, String)] = []
        if scheme != "basic" {
            headers.append(("WWW-Authenticate", "Digest realm=\"\(realm)\", qop=\"auth\", nonce=\"\(nonce)\", opaque=\"0paque\", algorithm=\(algorithm)"))
        }
        if scheme != "digest" { headers.append(("WWW-Authenticate", "Basic realm=\"\(realm)\"")) }
        self.respond(context: context, status: .unauthorized, headers: headers, body: "who are you?\n")
    }

    /// `/cache/NAME`: "NAME version V" (V from ``FaultInjectingHTTPServer/bumpVersion(of:)``)
    /// with `Cache-Control: cc`, `ETag` (`etag=1`), `Last-Modified` (`lastModified=1`),
    /// `Expires` now + `expires` seconds, `Vary: vary` (the body then names the request's
    /// value of that header). A matching `If-None-Match` or `If-Modified-Since` gets a 304 with
    /// the validators and `X-Revalidated: V`.
    private func serveCacheable(context: ChannelHandlerContext, head: HTTPRequestHead, name: String, query: [String: String]) {
        _ = self.server.nextRequestNumber(forKey: "cache-" + name)
        let version = self.server.version(of: name)
        let etag = "\"\(name)-\(version)\""
        let lastModified = HaulCore.HTTPDate.format(Date(timeIntervalSince1970: 1_767_225_600 + Double(version) * 86_400))
        var headers: [(String, String)] = [("Date", HaulCore.HTTPDate.format(Date()))]
        if let cc = query["cc"] { headers.append(("Cache-Control", cc)) }
        if query["etag"] == "1" { headers.append(("ETag", etag)) }
        if query["lastModified"] == "1" { headers.append(("Last-Modified", lastModified)) }
        if let seconds = Double(query["expires"] ?? "") { headers.append(("Expires", HaulCore.HTTPDate.format(Date().addingTimeInterval(seconds)))) }
        var body = "\(name) version \(version)"
        if let vary = query["vary"] {
            headers.append(("Vary", vary))
            body += " for \(head.headers.first(name: vary) ?? "-")"
        }
        let notModified =
            (query["etag"] == "1" && head.headers.first(name: "If-None-Match") == etag)
            || (query["lastModified"] == "1" && head.headers.first(name: "If-None-Match") == nil
                && head.headers.first(name: "If-Modified-Since").flatMap(HaulCore.HTTPDate.parse).map {
                    $0 >= HaulCore.HTTPDate.parse(lastModified)!
                } == true)
        if notModified {
            headers.append(("X-Revalidated", "\(version)"))
            context.write(
                self.wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .notModified, headers: HTTPHeaders(headers)))),
                promise: nil
            )
            context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
            return
        }
        self.respond(context: context, status: .ok, headers: headers, body: body + "\n")
    }

    private func respond(
        context: ChannelHandlerContext,
        status: HTTPResponseStatus,
        headers extra: [(String, String)],
        body: String
    ) {
        var headers = HTTPHeaders(extra)
        headers.add(name: "Content-Length", value: "\(body.utf8.count)")
        headers.add(name: "Content-Type", value: "text/plain")
        context.write(self.wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        context.write(self.wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: body)))), promise: nil)
        context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
    }

    // MARK: - Files

    private struct BodyPlan {
        var key: String
        var seed: UInt64
        var start: Int64
        var end: Int64  // exclusive
        var stopAfter: Int64?  // body bytes after which the fault strikes
        var stopByReset = true
        var stall = false
        var closeAtEnd = false
        var bytesPerSecond: Double?
        /// A gate (``FaultInjectingHTTPServer/openGate(_:)``) the body waits for after `holdAfter` bytes.
        var gate: String?
        var holdAfter: Int64 = 0
    }

    private func serveFile(context: ChannelHandlerContext, head: HTTPRequestHead, name: String, query: [String: String]) {
        let key = query["key"] ?? name
        let number = self.server.nextRequestNumber(forKey: key)
        let size = Int64(query["size"] ?? "") ?? 1 << 20
        let changeAfter = Int(query["changeAfter"] ?? "")
        let version: UInt64 = (changeAfter.map { number >= $0 } ?? false) ? 1 : 0
        // A segment request (`bytes=N-M`) may get a fault of its own.
        let requestedRange = head.headers.first(name: "Range").flatMap(Self.parseRange)
        var rangeFault: String?
        if let requestedRange, requestedRange.end != nil, let fault = query["rangeFault"] {
            let rangeNumber = self.server.nextRangeRequestNumber(forKey: key)
            if rangeNumber <= Int(query["rangeFaultTimes"] ?? "1") ?? 1 { rangeFault = fault }
        }
        let otherVersion: UInt64 = rangeFault == "otherEntity" ? 7 : 0
        let seed = (UInt64(query["seed"] ?? "") ?? 1) &+ (version + otherVersion) &* 1_000_003
        let etagMode = query["etag"] ?? "strong"
        let tag = "\"\(name)-\(size)-\(seed)\""
        let lastModified = HTTPDate.format(Date(timeIntervalSince1970: 1_600_000_000 + Double(version) * 86_400))

        if let failures = Int(query["fail503"] ?? ""), number <= failures {
            var headers: [(String, String)] = []
            if let retryAfter = query["retryAfter"] { headers.append(("Retry-After", retryAfter)) }
            self.respond(context: context, status: .serviceUnavailable, headers: headers, body: "busy\n")
            return
        }

        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/octet-stream")
        switch etagMode {
        case "strong": headers.add(name: "ETag", value: tag)
        case "weak": headers.add(name: "ETag", value: "W/" + tag)
        default: break
        }
        if query["lastModified"] != "0" { headers.add(name: "Last-Modified", value: lastModified) }
        let supportsRanges = query["ranges"] != "0"
        if supportsRanges { headers.add(name: "Accept-Ranges", value: "bytes") }
        if let disposition = query["disposition"] { headers.add(name: "Content-Disposition", value: disposition) }

        var status = HTTPResponseStatus.ok
        var start: Int64 = 0
        var end = size
        if supportsRanges, query["ignoreRange"] != "1", rangeFault != "200", let (requestedStart, requestedEnd) = requestedRange {
            var honour = true
            if let ifRange = head.headers.first(name: "If-Range") {
                honour = ifRange == tag || (etagMode != "strong" && ifRange == lastModified && query["lastModified"] != "0")
            }
            if honour {
                if query["range416"] == "1" || requestedStart >= size {
                    headers.add(name: "Content-Range", value: "bytes */\(size)")
                    headers.add(name: "Content-Length", value: "0")
                    context.write(self.wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .rangeNotSatisfiable, headers: headers))), promise: nil)
                    context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
                    return
                }
                status = .partialContent
                start = requestedStart
                if let requestedEnd { end = min(size, requestedEnd + 1) }
                if query["partialRange"] == "1" { end = min(end, start + 16) }
                let shown = query["badContentRange"] == "1" || rangeFault == "badContentRange" ? start + 1 : start
                let shownSize = rangeFault == "length" ? size + 1 : size
                headers.add(name: "Content-Range", value: "bytes \(shown)-\(end - 1)/\(shownSize)")
            }
        }

        var plan = BodyPlan(key: key, seed: seed, start: start, end: end)
        if query["chunked"] == "1" {
            // No Content-Length: the encoder falls back to chunked transfer coding.
        } else if query["gzip"] == "1" {
            headers.add(name: "x-test-compress", value: "1")
        } else if let lie = Int64(query["lieLength"] ?? "") {
            headers.add(name: "Content-Length", value: "\(lie)")
            plan.closeAtEnd = true
        } else {
            headers.add(name: "Content-Length", value: "\(end - start)")
            // As an HTTP/1.0 server does (Python's http.server): the whole answer, then a close.
            if query["closeAtEnd"] == "1" { plan.closeAtEnd = true }
        }
        if let cutAfter = Int64(query["cutAfter"] ?? ""), number <= Int(query["cutTimes"] ?? "1") ?? 1 {
            plan.stopAfter = cutAfter
            plan.stopByReset = query["cutMode"] != "close"
        } else if let stallAfter = Int64(query["stallAfter"] ?? ""), number <= Int(query["stallTimes"] ?? "1") ?? 1 {
            plan.stopAfter = stallAfter
            plan.stall = true
        }
        plan.bytesPerSecond = Double(query["rate"] ?? "")
        plan.gate = query["gate"]
        plan.holdAfter = Int64(query["holdAfter"] ?? "") ?? 0
        switch rangeFault {
        case "cut"?:
            plan.stopAfter = Int64(query["rangeFaultAfter"] ?? "") ?? 65_536
            plan.stopByReset = true
        case "stall"?:
            plan.stopAfter = Int64(query["rangeFaultAfter"] ?? "") ?? 65_536
            plan.stall = true
        case "slow"?:
            plan.bytesPerSecond = Double(query["rangeFaultRate"] ?? "") ?? 262_144
        default:
            break
        }

        context.writeAndFlush(self.wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        if head.method == .HEAD {
            context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
            return
        }
        self.endResponse()
        self.responseKey = key
        self.server.responseStarted(forKey: key)
        self.sendBody(context: context, plan: plan, position: start, sent: 0)
    }

    /// The `/file` response in flight ended (sent, cut or its connection gone).
    private func endResponse() {
        guard let key = self.responseKey else { return }
        self.responseKey = nil
        self.server.responseEnded(forKey: key)
    }

    private static let chunkSize: Int64 = 64 * 1024

    private func sendBody(context: ChannelHandlerContext, plan: BodyPlan, position: Int64, sent: Int64) {
        guard self.isActive else { return }
        if let stopAfter = plan.stopAfter, sent >= stopAfter {
            if plan.stall { return }  // hold the connection open, send nothing more
            self.endResponse()
            if plan.stopByReset, let provider = context.channel as? any SocketOptionProvider {
                // SO_LINGER 0 turns close() into a TCP reset, as a crashed server or middlebox sends.
                let closing = provider.setSoLinger(linger(l_onoff: 1, l_linger: 0))
                closing.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
            } else {
                context.close(promise: nil)
            }
            return
        }
        if let gate = plan.gate, sent >= plan.holdAfter, !self.server.isGateOpen(gate) {
            // Held: look again shortly (a test opens the gate once it has seen what it wanted).
            context.eventLoop.assumeIsolated().scheduleTask(in: .milliseconds(5)) {
                self.sendBody(context: context, plan: plan, position: position, sent: sent)
            }
            return
        }
        if position >= plan.end {
            self.endResponse()
            if plan.closeAtEnd {
                context.close(promise: nil)
            } else {
                context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
            }
            return
        }
        var count = min(Self.chunkSize, plan.end - position)
        if let stopAfter = plan.stopAfter { count = min(count, stopAfter - sent) }
        if plan.gate != nil, sent < plan.holdAfter { count = min(count, plan.holdAfter - sent) }
        if let rate = plan.bytesPerSecond { count = min(count, max(1, Int64(rate / 20))) }
        var buffer = context.channel.allocator.buffer(capacity: Int(count))
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: Int(count)) { pointer in
            TestContent.fill(UnsafeMutableRawBufferPointer(rebasing: pointer[0..<Int(count)]), offset: position, seed: plan.seed)
            return Int(count)
        }
        self.server.addBodyBytes(Int(count), forKey: plan.key)
        let written = context.writeAndFlush(self.wrapOutboundOut(.body(.byteBuffer(buffer))))
        let loop = context.eventLoop.assumeIsolated()
        written.assumeIsolated().whenComplete { result in
            guard case .success = result else { return }
            if let rate = plan.bytesPerSecond {
                let delay = TimeAmount.nanoseconds(Int64(Double(count) / rate * 1e9))
                loop.scheduleTask(in: delay) {
                    self.sendBody(context: context, plan: plan, position: position + count, sent: sent + count)
                }
            } else {
                // Not from inside the completion: a write that completes at once (a fast
                // reader) would recurse once per chunk and overflow the stack on a big body.
                loop.execute {
                    self.sendBody(context: context, plan: plan, position: position + count, sent: sent + count)
                }
            }
        }
    }

    /// Parses `bytes=N-` and `bytes=N-M` (the forms Haul sends); `nil` for anything else.
    static func parseRange(_ value: String) -> (start: Int64, end: Int64?)? {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        guard trimmed.hasPrefix("bytes=") else { return nil }
        let parts = trimmed.dropFirst(6).split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, let start = Int64(parts[0]) else { return nil }
        if parts[1].isEmpty { return (start, nil) }
        guard let end = Int64(parts[1]), end >= start else { return nil }
        return (start, end)
    }
}

enum HTTPDate {
    static func format(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: date)
    }
}
