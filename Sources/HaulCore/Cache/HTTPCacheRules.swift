import Foundation

/// How a request may use a cache, as `URLRequest.CachePolicy`.
public enum CachePolicy: Sendable, Hashable {
    /// HTTP's own rules: fresh entries are used, stale ones revalidated.
    case useProtocolCachePolicy
    /// Always the network; the response may still be stored.
    case reloadIgnoringLocalCacheData
    /// A stored entry however old, else the network.
    case returnCacheDataElseLoad
    /// A stored entry however old, else fail: never the network.
    case returnCacheDataDontLoad
    /// Always ask the server, with validators when an entry has them.
    case reloadRevalidatingCacheData
}

/// A response kept by a cache, with what is needed to judge its age.
public struct StoredResponse: Sendable, Hashable {
    public var url: URL
    public var statusCode: Int
    public var headers: HTTPHeaderFields
    public var body: Data
    /// When the request that got it was sent, and when its head arrived.
    public var requestTime: Date
    public var responseTime: Date
    /// The request's values of the header fields the response's `Vary` names (lowercased
    /// names; `nil` for a field the request did not send).
    public var varyingRequestHeaders: [String: String?]
    /// Kept in memory only, never written to disk (`URLCache.StoragePolicy.allowedInMemoryOnly`).
    public var isMemoryOnly: Bool

    public init(
        url: URL,
        statusCode: Int,
        headers: HTTPHeaderFields,
        body: Data,
        requestTime: Date,
        responseTime: Date,
        varyingRequestHeaders: [String: String?],
        isMemoryOnly: Bool = false
    ) {
        self.isMemoryOnly = isMemoryOnly
        self.url = url
        self.statusCode = statusCode
        self.headers = headers
        self.body = body
        self.requestTime = requestTime
        self.responseTime = responseTime
        self.varyingRequestHeaders = varyingRequestHeaders
    }
}

/// HTTP caching rules for a private cache (RFC 9111), as pure functions: what may be stored,
/// how old an entry is, whether a request may use it, and how a 304 refreshes it.
public enum HTTPCacheRules {
    /// What to do with a request given the cache's entry for it.
    public enum Decision: Sendable, Hashable {
        /// Answer from the entry, no network.
        case useStored
        /// Ask the server with these conditional headers; a 304 means the entry is current.
        case revalidate(conditionalHeaders: [(String, String)])
        /// Ask the server as if there were no entry.
        case fetch
        /// No entry and the policy forbids the network.
        case unavailable

        public static func == (lhs: Decision, rhs: Decision) -> Bool {
            switch (lhs, rhs) {
            case (.useStored, .useStored), (.fetch, .fetch), (.unavailable, .unavailable): true
            case (.revalidate(let a), .revalidate(let b)): a.map { "\($0.0):\($0.1)" } == b.map { "\($0.0):\($0.1)" }
            default: false
            }
        }

        public func hash(into hasher: inout Hasher) {
            switch self {
            case .useStored: hasher.combine(0)
            case .fetch: hasher.combine(1)
            case .unavailable: hasher.combine(2)
            case .revalidate(let headers):
                hasher.combine(3)
                for (name, value) in headers { hasher.combine(name); hasher.combine(value) }
            }
        }
    }

    /// Statuses a cache may store and reuse without explicit freshness (RFC 9110 §15.1).
    static let heuristicallyCacheable: Set<Int> = [200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501]

    /// The longest heuristic freshness given to a response with only `Last-Modified`.
    static let maximumHeuristicLifetime: TimeInterval = 24 * 3600

    /// Whether a cache may consult entries at all for a request with this method and headers.
    public static func requestCanUseCache(method: String, headers: HTTPHeaderFields) -> Bool {
        method == "GET" && !CacheControl(headers).noStore
    }

    /// Whether a response to a GET may be stored (RFC 9111 §3): a final status the cache
    /// understands, no `no-store`, no `Vary: *`, and either explicit freshness, a status
    /// cacheable by default, or validators to revalidate with later.
    public static func isStorable(method: String, requestHeaders: HTTPHeaderFields, statusCode: Int, responseHeaders: HTTPHeaderFields) -> Bool {
        guard method == "GET", (200..<600).contains(statusCode), statusCode != 206, statusCode != 304 else { return false }
        if CacheControl(requestHeaders).noStore { return false }
        let control = CacheControl(responseHeaders)
        if control.noStore { return false }
        if self.varyNames(responseHeaders).contains("*") { return false }
        let explicit = control.maxAge != nil || responseHeaders["Expires"] != nil
        return explicit || self.heuristicallyCacheable.contains(statusCode)
    }

    /// The lowercased field names of `Vary`.
    public static func varyNames(_ headers: HTTPHeaderFields) -> [String] {
        headers.values(for: "Vary").flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            .filter { !$0.isEmpty }
    }

    /// The request's values for the response's `Vary` fields, to store with the entry.
    public static func varyingRequestHeaders(request: HTTPHeaderFields, response: HTTPHeaderFields) -> [String: String?] {
        var values: [String: String?] = [:]
        for name in self.varyNames(response) { values[name] = request.values(for: name).isEmpty ? nil : request.values(for: name).joined(separator: ", ") }
        return values
    }

    /// Whether a stored entry was made for a request like this one (same `Vary` field values).
    public static func varyMatches(_ stored: StoredResponse, request: HTTPHeaderFields) -> Bool {
        for (name, value) in stored.varyingRequestHeaders {
            let current = request.values(for: name)
            let now: String? = current.isEmpty ? nil : current.joined(separator: ", ")
            if now != value { return false }
        }
        return true
    }

    /// How long the entry is fresh from its origin (RFC 9111 §4.2.1): `max-age`, else
    /// `Expires` − `Date`, else 10 % of the time since `Last-Modified` (at most a day) for
    /// statuses cacheable by default, else 0.
    public static func freshnessLifetime(_ stored: StoredResponse) -> TimeInterval {
        let control = CacheControl(stored.headers)
        if let maxAge = control.maxAge { return TimeInterval(maxAge) }
        let date = stored.headers["Date"].flatMap(HTTPDate.parse) ?? stored.responseTime
        if let expiresText = stored.headers["Expires"] {
            // An invalid Expires (such as "0") means already expired.
            guard let expires = HTTPDate.parse(expiresText) else { return 0 }
            return max(0, expires.timeIntervalSince(date))
        }
        if self.heuristicallyCacheable.contains(stored.statusCode),
            let lastModified = stored.headers["Last-Modified"].flatMap(HTTPDate.parse)
        {
            return min(self.maximumHeuristicLifetime, max(0, date.timeIntervalSince(lastModified) / 10))
        }
        return 0
    }

    /// The entry's age now (RFC 9111 §4.2.3).
    public static func currentAge(_ stored: StoredResponse, now: Date) -> TimeInterval {
        let date = stored.headers["Date"].flatMap(HTTPDate.parse) ?? stored.responseTime
        let apparentAge = max(0, stored.responseTime.timeIntervalSince(date))
        let ageValue = stored.headers["Age"].flatMap { TimeInterval($0.trimmingCharacters(in: .whitespaces)) } ?? 0
        let responseDelay = max(0, stored.responseTime.timeIntervalSince(stored.requestTime))
        let correctedInitialAge = max(apparentAge, ageValue + responseDelay)
        return correctedInitialAge + max(0, now.timeIntervalSince(stored.responseTime))
    }

    /// Whether the entry may be used without asking the server.
    public static func isFresh(_ stored: StoredResponse, requestHeaders: HTTPHeaderFields, now: Date) -> Bool {
        let responseControl = CacheControl(stored.headers)
        let requestControl = CacheControl(requestHeaders)
        if responseControl.noCache || requestControl.noCache { return false }
        let age = self.currentAge(stored, now: now)
        if let maxAge = requestControl.maxAge, age > TimeInterval(maxAge) { return false }
        return self.freshnessLifetime(stored) > age
    }

    /// The conditional headers that revalidate the entry: `If-None-Match` with its `ETag`,
    /// `If-Modified-Since` with its `Last-Modified`. Empty when it has neither.
    public static func conditionalHeaders(for stored: StoredResponse) -> [(String, String)] {
        var headers: [(String, String)] = []
        if let etag = stored.headers["ETag"] { headers.append(("If-None-Match", etag)) }
        if let lastModified = stored.headers["Last-Modified"] { headers.append(("If-Modified-Since", lastModified)) }
        return headers
    }

    /// What to do with a request under `policy` given the cache's matching entry, if any.
    public static func decide(policy: CachePolicy, stored: StoredResponse?, requestHeaders: HTTPHeaderFields, now: Date) -> Decision {
        switch policy {
        case .reloadIgnoringLocalCacheData:
            return .fetch
        case .returnCacheDataElseLoad:
            return stored == nil ? .fetch : .useStored
        case .returnCacheDataDontLoad:
            return stored == nil ? .unavailable : .useStored
        case .reloadRevalidatingCacheData:
            guard let stored else { return .fetch }
            let conditional = self.conditionalHeaders(for: stored)
            return conditional.isEmpty ? .fetch : .revalidate(conditionalHeaders: conditional)
        case .useProtocolCachePolicy:
            guard let stored else { return .fetch }
            if self.isFresh(stored, requestHeaders: requestHeaders, now: now) { return .useStored }
            let conditional = self.conditionalHeaders(for: stored)
            return conditional.isEmpty ? .fetch : .revalidate(conditionalHeaders: conditional)
        }
    }

    /// The entry refreshed by a 304 (RFC 9111 §4.3.4): the 304's header fields replace the
    /// stored ones of the same name (except the framing fields), and its times become the
    /// entry's.
    public static func refreshed(_ stored: StoredResponse, with notModified: HTTPHeaderFields, requestTime: Date, responseTime: Date) -> StoredResponse {
        var refreshed = stored
        let kept: Set<String> = ["content-length", "content-encoding", "transfer-encoding", "content-range"]
        var replaced = Set<String>()
        for field in notModified.fields where !kept.contains(field.name.lowercased()) {
            let name = field.name.lowercased()
            if !replaced.contains(name) {
                refreshed.headers.remove(name: field.name)
                replaced.insert(name)
            }
            refreshed.headers.add(name: field.name, value: field.value)
        }
        refreshed.requestTime = requestTime
        refreshed.responseTime = responseTime
        return refreshed
    }

    /// Whether a response to `method` invalidates the cache's entry for its URL (RFC 9111
    /// §4.4: an unsafe method that succeeded).
    public static func invalidatesStoredResponse(method: String, statusCode: Int) -> Bool {
        !["GET", "HEAD", "OPTIONS", "TRACE"].contains(method) && (200..<400).contains(statusCode)
    }
}
