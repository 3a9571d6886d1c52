import Foundation
import HaulCore
import Testing

@Suite("HTTP cache rules (RFC 9111), without I/O")
struct HTTPCacheRulesTests {
    static let t0 = Date(timeIntervalSince1970: 1_800_000_000)

    static func stored(_ headers: [(String, String)], status: Int = 200, requestTime: Date = t0, responseTime: Date = t0) -> StoredResponse {
        StoredResponse(
            url: URL(string: "http://127.0.0.1/x")!,
            statusCode: status,
            headers: HTTPHeaderFields(headers),
            body: Data("x".utf8),
            requestTime: requestTime,
            responseTime: responseTime,
            varyingRequestHeaders: [:]
        )
    }

    @Test("Cache-Control parsing: case, quotes, arguments, Pragma")
    func parsing() {
        let control = CacheControl(HTTPHeaderFields([("Cache-Control", "Max-Age=\"30\", no-cache, private"), ("Cache-Control", "must-revalidate")]))
        #expect(control.maxAge == 30 && control.noCache && control.mustRevalidate && control.has("private"))
        #expect(!control.noStore)
        #expect(CacheControl(HTTPHeaderFields([("Pragma", "no-cache")])).noCache)
        #expect(CacheControl(HTTPHeaderFields([("Cache-Control", "max-age=-5")])).maxAge == nil)
    }

    @Test("Freshness lifetime: max-age over Expires, Expires minus Date, heuristic 10 % capped at a day")
    func freshnessLifetime() {
        let date = HTTPDate.format(Self.t0)
        #expect(HTTPCacheRules.freshnessLifetime(Self.stored([("Cache-Control", "max-age=120"), ("Expires", HTTPDate.format(Self.t0 + 10))])) == 120)
        #expect(HTTPCacheRules.freshnessLifetime(Self.stored([("Date", date), ("Expires", HTTPDate.format(Self.t0 + 300))])) == 300)
        #expect(HTTPCacheRules.freshnessLifetime(Self.stored([("Date", date), ("Expires", "0")])) == 0)
        #expect(HTTPCacheRules.freshnessLifetime(Self.stored([("Date", date), ("Last-Modified", HTTPDate.format(Self.t0 - 1000))])) == 100)
        #expect(HTTPCacheRules.freshnessLifetime(Self.stored([("Date", date), ("Last-Modified", HTTPDate.format(Self.t0 - 10_000_000))])) == 86_400)
        #expect(HTTPCacheRules.freshnessLifetime(Self.stored([("Date", date), ("Last-Modified", HTTPDate.format(Self.t0 - 1000))], status: 302)) == 0)
    }

    @Test("Age counts the Age header, the response delay and the time resident")
    func age() {
        let stored = Self.stored([("Date", HTTPDate.format(Self.t0)), ("Age", "30")], requestTime: Self.t0 - 2, responseTime: Self.t0)
        #expect(HTTPCacheRules.currentAge(stored, now: Self.t0 + 10) == 42)
        let skewed = Self.stored([("Date", HTTPDate.format(Self.t0 - 50))])
        #expect(HTTPCacheRules.currentAge(skewed, now: Self.t0) == 50)
    }

    @Test("Decisions per policy: fresh, stale with and without validators, request no-cache and max-age")
    func decisions() {
        let fresh = Self.stored([("Cache-Control", "max-age=60"), ("ETag", "\"a\"")])
        let stale = Self.stored([("Cache-Control", "max-age=60"), ("ETag", "\"a\""), ("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT")])
        let staleBare = Self.stored([("Cache-Control", "max-age=60")])
        let none = HTTPHeaderFields()
        let later = Self.t0 + 120
        #expect(HTTPCacheRules.decide(policy: .useProtocolCachePolicy, stored: fresh, requestHeaders: none, now: Self.t0 + 10) == .useStored)
        #expect(
            HTTPCacheRules.decide(policy: .useProtocolCachePolicy, stored: stale, requestHeaders: none, now: later)
                == .revalidate(conditionalHeaders: [("If-None-Match", "\"a\""), ("If-Modified-Since", "Mon, 01 Jan 2024 00:00:00 GMT")])
        )
        #expect(HTTPCacheRules.decide(policy: .useProtocolCachePolicy, stored: staleBare, requestHeaders: none, now: later) == .fetch)
        #expect(HTTPCacheRules.decide(policy: .useProtocolCachePolicy, stored: nil, requestHeaders: none, now: later) == .fetch)
        let noCache = HTTPHeaderFields([("Cache-Control", "no-cache")])
        #expect(HTTPCacheRules.decide(policy: .useProtocolCachePolicy, stored: fresh, requestHeaders: noCache, now: Self.t0) == .revalidate(conditionalHeaders: [("If-None-Match", "\"a\"")]))
        let maxAge = HTTPHeaderFields([("Cache-Control", "max-age=5")])
        #expect(HTTPCacheRules.decide(policy: .useProtocolCachePolicy, stored: fresh, requestHeaders: maxAge, now: Self.t0 + 10) != .useStored)
        #expect(HTTPCacheRules.decide(policy: .returnCacheDataElseLoad, stored: stale, requestHeaders: none, now: later) == .useStored)
        #expect(HTTPCacheRules.decide(policy: .returnCacheDataDontLoad, stored: nil, requestHeaders: none, now: later) == .unavailable)
        #expect(HTTPCacheRules.decide(policy: .reloadIgnoringLocalCacheData, stored: fresh, requestHeaders: none, now: Self.t0) == .fetch)
        #expect(HTTPCacheRules.decide(policy: .reloadRevalidatingCacheData, stored: fresh, requestHeaders: none, now: Self.t0) == .revalidate(conditionalHeaders: [("If-None-Match", "\"a\"")]))
    }

    @Test("What may be stored: method, status, no-store, Vary: *")
    func storable() {
        let none = HTTPHeaderFields()
        let maxAge = HTTPHeaderFields([("Cache-Control", "max-age=60")])
        #expect(HTTPCacheRules.isStorable(method: "GET", requestHeaders: none, statusCode: 200, responseHeaders: none))
        #expect(HTTPCacheRules.isStorable(method: "GET", requestHeaders: none, statusCode: 302, responseHeaders: maxAge))
        #expect(!HTTPCacheRules.isStorable(method: "GET", requestHeaders: none, statusCode: 302, responseHeaders: none))
        #expect(!HTTPCacheRules.isStorable(method: "POST", requestHeaders: none, statusCode: 200, responseHeaders: maxAge))
        #expect(!HTTPCacheRules.isStorable(method: "GET", requestHeaders: none, statusCode: 206, responseHeaders: maxAge))
        #expect(!HTTPCacheRules.isStorable(method: "GET", requestHeaders: none, statusCode: 200, responseHeaders: HTTPHeaderFields([("Cache-Control", "no-store")])))
        #expect(!HTTPCacheRules.isStorable(method: "GET", requestHeaders: HTTPHeaderFields([("Cache-Control", "no-store")]), statusCode: 200, responseHeaders: maxAge))
        #expect(!HTTPCacheRules.isStorable(method: "GET", requestHeaders: none, statusCode: 200, responseHeaders: HTTPHeaderFields([("Vary", "*")])))
        #expect(HTTPCacheRules.invalidatesStoredResponse(method: "DELETE", statusCode: 204))
        #expect(!HTTPCacheRules.invalidatesStoredResponse(method: "POST", statusCode: 500))
        #expect(!HTTPCacheRules.invalidatesStoredResponse(method: "GET", statusCode: 200))
    }

    @Test("A 304 refreshes headers but keeps the framing fields; Vary values must match")
    func refreshAndVary() {
        let stored = Self.stored([("ETag", "\"a\""), ("Content-Length", "1"), ("Cache-Control", "max-age=1"), ("Vary", "Accept-Language")])
        let refreshed = HTTPCacheRules.refreshed(
            stored,
            with: HTTPHeaderFields([("Cache-Control", "max-age=99"), ("Content-Length", "0"), ("X-New", "1")]),
            requestTime: Self.t0 + 5,
            responseTime: Self.t0 + 6
        )
        #expect(refreshed.headers["Cache-Control"] == "max-age=99" && refreshed.headers.values(for: "Cache-Control").count == 1)
        #expect(refreshed.headers["Content-Length"] == "1" && refreshed.headers["X-New"] == "1" && refreshed.body == stored.body)
        #expect(refreshed.responseTime == Self.t0 + 6)

        var varying = stored
        varying.varyingRequestHeaders = HTTPCacheRules.varyingRequestHeaders(
            request: HTTPHeaderFields([("accept-language", "en")]),
            response: stored.headers
        )
        #expect(HTTPCacheRules.varyMatches(varying, request: HTTPHeaderFields([("Accept-Language", "en")])))
        #expect(!HTTPCacheRules.varyMatches(varying, request: HTTPHeaderFields([("Accept-Language", "fr")])))
        #expect(!HTTPCacheRules.varyMatches(varying, request: HTTPHeaderFields()))
    }
}
