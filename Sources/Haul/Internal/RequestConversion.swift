import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HaulCore
import HaulEngine

extension TransferRequest {
    /// Builds the engine's request from a `URLRequest`, adding the session's extra headers
    /// where the request does not set them.
    ///
    /// - Throws: `URLError(.unsupportedURL)` for schemes other than http and https,
    ///   `URLError(.badURL)` for a URL without a host.
    init(_ request: URLRequest, additionalHeaders: [String: String], isDownload: Bool, allowsAnyScheme: Bool = false) throws(URLError) {
        guard let url = request.url else { throw URLError(.badURL, userInfo: [NSLocalizedDescriptionKey: "the request has no URL"]) }
        let scheme = url.scheme?.lowercased()
        if allowsAnyScheme, scheme != "http", scheme != "https" {
            // Answered by a custom protocol class: the request goes to it as it is.
            var headers = HTTPHeaderFields()
            for (name, value) in (request.allHTTPHeaderFields ?? [:]).sorted(by: { $0.key < $1.key }) { headers.add(name: name, value: value) }
            self.init(url: url, method: request.httpMethod ?? "GET", headers: headers, body: request.httpBody.map { .data($0) } ?? .none)
            return
        }
        if scheme == "file" || scheme == "data" {
            // Answered locally by the engine (see TransferRun.loadLocally), as URLSession does.
            self.init(url: url, method: "GET")
            return
        }
        guard let scheme, scheme == "http" || scheme == "https" else {
            throw URLError(
                .unsupportedURL,
                userInfo: [NSLocalizedDescriptionKey: "unsupported URL \(url.absoluteString): only http, https, file and data", NSURLErrorFailingURLErrorKey: url]
            )
        }
        guard let host = url.host, !host.isEmpty else {
            throw URLError(.badURL, userInfo: [NSLocalizedDescriptionKey: "the URL \(url.absoluteString) has no host", NSURLErrorFailingURLErrorKey: url])
        }
        var headers = HTTPHeaderFields()
        for (name, value) in (request.allHTTPHeaderFields ?? [:]).sorted(by: { $0.key < $1.key }) {
            headers.add(name: name, value: value)
        }
        for (name, value) in additionalHeaders.sorted(by: { $0.key < $1.key }) where !headers.contains(name) {
            headers.add(name: name, value: value)
        }
        if !headers.contains("User-Agent") { headers.add(name: "User-Agent", value: HaulVersion.userAgent) }
        // A download saves the representation as the server stores it, like wget.
        if isDownload, !headers.contains("Accept-Encoding") { headers.add(name: "Accept-Encoding", value: "identity") }
        // A data task's body is decoded transparently (gzip, deflate), as URLSession does.
        if !isDownload, !headers.contains("Accept-Encoding") { headers.add(name: "Accept-Encoding", value: "gzip, deflate") }
        let body: TransferRequest.Body = request.httpBody.map { .data($0) } ?? .none
        self.init(url: url, method: request.httpMethod ?? "GET", headers: headers, body: body)
    }

    /// The `URLRequest` that describes this request.
    var urlRequest: URLRequest {
        var request = URLRequest(url: self.url)
        request.httpMethod = self.method
        for field in self.headers.fields { request.addValue(field.value, forHTTPHeaderField: field.name) }
        if case .data(let data) = self.body { request.httpBody = data }
        return request
    }
}

extension ResponseInfo {
    /// The Foundation response: an `HTTPURLResponse`, or a plain `URLResponse` (with MIME type,
    /// length, text encoding and suggested file name) for `file:` and `data:` URLs.
    var urlResponse: URLResponse {
        guard self.isLocal else { return self.httpURLResponse }
        let contentType = self.headers["Content-Type"] ?? "application/octet-stream"
        let parts = contentType.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
        let encoding = parts.dropFirst().first { $0.lowercased().hasPrefix("charset=") }.map { String($0.dropFirst(8)) }
        return URLResponse(
            url: self.url,
            mimeType: parts.first,
            expectedContentLength: Int(self.headers["Content-Length"] ?? "") ?? -1,
            textEncodingName: encoding
        )
    }

    /// The Foundation HTTP response for this head.
    var httpURLResponse: HTTPURLResponse {
        var fields: [String: String] = [:]
        for field in self.headers.fields {
            if let existing = fields[field.name] {
                fields[field.name] = existing + ", " + field.value
            } else {
                fields[field.name] = field.value
            }
        }
        return HTTPURLResponse(url: self.url, statusCode: self.statusCode, httpVersion: self.httpVersion, headerFields: fields)!
    }
}

/// Haul's version, as sent in `User-Agent`.
public enum HaulVersion {
    /// The version of this build.
    public static let string = HaulRelease.version
    /// The default `User-Agent` value.
    public static let userAgent = "Haul/\(string)"
}
