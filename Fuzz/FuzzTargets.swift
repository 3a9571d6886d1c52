// libFuzzer targets for the parsers of HaulCore that read untrusted bytes. Compiled into the
// HaulCore module itself by scripts/fuzz (swiftc -sanitize=fuzzer,address), so that nothing but
// the parsers is built with the sanitizers. The target is chosen by HAUL_FUZZ_TARGET; each one
// also checks the invariants its callers rely on and traps when one breaks, which libFuzzer
// reports as a crash with the input.
import Foundation

enum FuzzTarget: String, CaseIterable {
    case contentRange = "content-range"
    case contentDisposition = "content-disposition"
    case setCookie = "set-cookie"
    case cacheHeaders = "cache-headers"
    case authenticate = "www-authenticate"
    case dataURL = "data-url"
    case resumeData = "resume-data"
    case daemonLine = "daemon-line"
    case jsonRPC = "json-rpc"

    static let selected: FuzzTarget = {
        let name = ProcessInfo.processInfo.environment["HAUL_FUZZ_TARGET"] ?? ""
        guard let target = FuzzTarget(rawValue: name) else {
            FileHandle.standardError.write(Data("HAUL_FUZZ_TARGET must be one of: \(FuzzTarget.allCases.map(\.rawValue).joined(separator: ", "))\n".utf8))
            exit(2)
        }
        return target
    }()

    func run(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        switch self {
        case .contentRange:
            if case .satisfied(let first, let last, let complete)? = ContentRange(headerValue: text) {
                precondition(first >= 0 && last >= first, "a range that ends before it starts: \(text)")
                if let complete { precondition(last < complete, "a range past its complete length: \(text)") }
            }
        case .contentDisposition:
            if let name = FileNaming.filename(fromContentDisposition: text), let safe = FileNaming.sanitize(name) {
                Self.checkPlainName(safe, input: text)
            }
            let suggested = FileNaming.suggestedFilename(contentDisposition: text, url: URL(string: "http://127.0.0.1/a/b.bin")!)
            Self.checkPlainName(suggested, input: text)
        case .setCookie:
            if let cookie = CookieRules.parse(setCookie: text, from: URL(string: "https://www.example.test/dir/page")!, now: Date(timeIntervalSince1970: 1_700_000_000)) {
                precondition(!cookie.name.contains(";") && !cookie.domain.isEmpty, "a cookie that could not have been parsed: \(text)")
                _ = cookie.matches(URL(string: "https://www.example.test/dir/x")!)
            }
        case .cacheHeaders:
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
            let headers = HTTPHeaderFields([
                ("Cache-Control", lines.first.map(String.init) ?? ""),
                ("Expires", lines.dropFirst().first.map(String.init) ?? ""),
                ("Vary", lines.dropFirst(2).first.map(String.init) ?? ""),
                ("Date", lines.dropFirst(3).first.map(String.init) ?? ""),
            ])
            let control = CacheControl(headers)
            _ = control.seconds("max-age")
            _ = control.seconds("s-maxage")
            _ = HTTPCacheRules.varyNames(headers)
            _ = HTTPCacheRules.isStorable(method: "GET", requestHeaders: HTTPHeaderFields(), statusCode: 200, responseHeaders: headers)
            if let date = HTTPDate.parse(text) { _ = HTTPDate.format(date) }
        case .authenticate:
            for challenge in AuthenticationChallenge.parse(text.split(separator: "\n").map(String.init)) {
                precondition(!challenge.scheme.isEmpty, "a challenge without a scheme: \(text)")
            }
        case .dataURL:
            if let url = try? DataURL(parsing: text) { _ = url.bytes.count }
        case .resumeData:
            if let decoded = try? ResumeData.decode(Data(bytes)) {
                // What decodes must encode and decode to the same.
                if let again = try? ResumeData.decode(decoded.encoded()) {
                    precondition(again == decoded, "resume data changed in a round trip")
                }
            }
        case .daemonLine:
            // As a client reads an answer: the fast reader of download lists takes a line only as
            // JSONDecoder reads it — but projections (an answer or a change asked with
            // `fields`), which only it reads: of those JSONDecoder reads the ids, or nothing.
            if let fast = DaemonServerLine.downloadList(line: bytes) {
                let decoder = JSONDecoder()
                decoder.dateDecodingStrategy = .iso8601
                let slow = try? decoder.decode(DaemonServerLine.self, from: Data(bytes), maximumNesting: JSONNesting.limit)
                if fast.response?.downloadFields != nil {
                    var ids = fast
                    ids.response?.downloads = nil
                    ids.response?.downloadFields = nil
                    precondition(slow == nil || slow == ids, "the download-list reader and JSONDecoder disagree on a projection: \(text)")
                } else {
                    precondition(fast == slow, "the download-list reader and JSONDecoder disagree: \(text)")
                }
            }
            if let fast = DaemonServerLine.downloadChange(line: bytes) {
                let decoder = JSONDecoder()
                decoder.dateDecodingStrategy = .iso8601
                let slow = try? decoder.decode(DaemonServerLine.self, from: Data(bytes), maximumNesting: JSONNesting.limit)
                if fast.event?.downloadFields != nil {
                    precondition(slow == nil, "JSONDecoder read a projected download as whole: \(text)")
                } else {
                    precondition(fast == slow, "the download-change reader and JSONDecoder disagree: \(text)")
                }
            }
            // As the daemon reads a line (depth guard, fast batch reader, JSONDecoder).
            guard let request = try? DaemonRequest.decode(line: bytes) else { return }
            let encoded = (try? JSONEncoder().encode(request)) ?? Data()
            let again = try? JSONDecoder().decode(DaemonRequest.self, from: encoded)
            precondition(again?.method == request.method, "a request line changed method in a round trip")
            // The fast reader of batches to add takes a line only as JSONDecoder reads it.
            if let fast = DaemonRequest.batchAdd(line: bytes) {
                let slow = try? JSONDecoder().decode(DaemonRequest.self, from: Data(bytes), maximumNesting: JSONNesting.limit)
                precondition(fast == slow, "the batch reader and JSONDecoder disagree: \(text)")
                // As a client writes a batch: read back by both readers as the same request.
                if let line = try? fast.encodedLine() {
                    let body = Array(line.dropLast())
                    precondition(DaemonRequest.batchAdd(line: body) == fast, "a batch written by the client is not what it was: \(text)")
                    precondition((try? JSONDecoder().decode(DaemonRequest.self, from: Data(body))) == fast, "JSONDecoder reads a client's batch otherwise: \(text)")
                }
            }
        case .jsonRPC:
            if let value = try? JSONValue(parsing: bytes) {
                precondition((try? JSONValue(parsing: value.bytes)) == value, "JSON changed in a round trip: \(text)")
            }
            _ = Aria2Envelope.parse(bytes)
        }
    }

    static func checkPlainName(_ name: String, input: String) {
        precondition(!name.isEmpty && !name.contains("/") && name != "." && name != ".." && !name.hasPrefix("."),
                     "an unsafe file name '\(name)' from: \(input)")
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func haulFuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzTarget.selected.run(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}
