import Foundation
import HTTPTypes
import Hummingbird

/// Protects the web UI: the daemon's queue is reachable only by someone holding the token, and
/// a page on another site cannot drive it.
///
/// - Every request must name this server in `Host` (`127.0.0.1:PORT`, `localhost:PORT`,
///   `[::1]:PORT`): a DNS-rebinding page cannot use a name of its own.
/// - `/api/…` requests carry the token in `Authorization: Bearer` (or `X-Haul-Token`). Only
///   the read-only event stream may carry it as `?token=` (`EventSource` cannot set headers).
/// - State-changing requests must use the header (a cross-site form or image cannot set one
///   without a CORS preflight, which is never granted) and, when the browser sends `Origin`,
///   come from this server's own origin.
struct WebGuardMiddleware<Context: RequestContext>: RouterMiddleware {
    let token: String
    let port: @Sendable () -> Int?

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        WorkingSetTrimmer.noteActivity()
        guard let port = self.port(), self.isOwnHost(request.head.authority, port: port) else {
            return Self.error(.misdirectedRequest, "unknown host")
        }
        guard request.uri.path.hasPrefix("/api/") else { return try await next(request, context) }
        let header = request.headers[.authorization].flatMap { value -> Substring? in
            value.hasPrefix("Bearer ") ? value.dropFirst(7) : nil
        } ?? request.headers[HTTPField.Name("X-Haul-Token")!].map { Substring($0) }
        let isRead = request.method == .get || request.method == .head
        let query = isRead && request.uri.path == "/api/events" ? request.uri.queryParameters.get("token").map { Substring($0) } : nil
        guard WebToken.matches(header ?? query, self.token) else {
            return Self.error(.unauthorized, "missing or wrong token; open the address 'haul ui' prints")
        }
        if !isRead, let origin = request.headers[.origin], !self.isOwnOrigin(origin, port: port) {
            return Self.error(.forbidden, "cross-site request refused")
        }
        return try await next(request, context)
    }

    private func isOwnHost(_ authority: String?, port: Int) -> Bool {
        guard let authority else { return false }
        return ["127.0.0.1:\(port)", "localhost:\(port)", "[::1]:\(port)"].contains(authority.lowercased())
    }

    private func isOwnOrigin(_ origin: String, port: Int) -> Bool {
        ["http://127.0.0.1:\(port)", "http://localhost:\(port)", "http://[::1]:\(port)"].contains(origin.lowercased())
    }

    static func error(_ status: HTTPResponse.Status, _ message: String) -> Response {
        WebJSON.response(["error": message], status: status)
    }
}

/// JSON responses with the same encoding the socket protocol uses (ISO 8601 dates).
enum WebJSON {
    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.withoutEscapingSlashes]
        return encoder
    }()

    static func response(_ value: some Encodable, status: HTTPResponse.Status = .ok) -> Response {
        self.response(raw: Array((try? self.encoder.encode(value)) ?? Data("{}".utf8)), status: status)
    }

    /// A JSON body already written.
    static func response(raw: [UInt8], status: HTTPResponse.Status = .ok) -> Response {
        Response(
            status: status,
            headers: [.contentType: "application/json", .cacheControl: "no-store"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: raw))
        )
    }

    static func string(_ value: some Encodable) -> String {
        String(decoding: (try? self.encoder.encode(value)) ?? Data("{}".utf8), as: UTF8.self)
    }
}
