import Foundation
import HaulCore
import NIOCore

/// The session's HTTP cache around a data transfer: answered from the cache, revalidated with
/// conditional headers (a 304 refreshes the entry and delivers it), or fetched and stored after
/// the observer's `willStore` decision. Downloads never touch the cache.
extension TransferRun {
    /// Consults the cache before the first request. Returns the outcome when the cache answers
    /// (or the policy forbids the network); otherwise may add conditional headers to `request`.
    func consultCache(_ request: inout TransferRequest) -> TransferOutcome? {
        guard case .observer = self.destination, let cache = self.engine.responseCache,
            HTTPCacheRules.requestCanUseCache(method: request.method, headers: request.headers),
            // The caller's own conditional or range request is theirs to interpret.
            !request.headers.contains("If-None-Match"), !request.headers.contains("If-Modified-Since"),
            !request.headers.contains("Range")
        else { return nil }
        let stored = cache.storedResponse(for: request.url).flatMap {
            HTTPCacheRules.varyMatches($0, request: request.headers) ? $0 : nil
        }
        let decision = HTTPCacheRules.decide(policy: request.cachePolicy, stored: stored, requestHeaders: request.headers, now: Date())
        switch decision {
        case .useStored:
            guard let stored else { return nil }
            let outcome = self.deliverStored(stored)
            self.recordLocalTransaction(request, response: self.state.withLock { $0.lastResponse }, bodyBytes: Int64(stored.body.count), fetchType: .localCache, start: Date())
            return outcome
        case .unavailable:
            return self.failure(
                URLError(
                    .resourceUnavailable,
                    userInfo: [
                        NSLocalizedDescriptionKey: "no cached response for \(request.url.absoluteString) and the cache policy forbids loading",
                        NSURLErrorFailingURLErrorKey: request.url,
                    ]
                )
            )
        case .revalidate(let conditionalHeaders):
            for (name, value) in conditionalHeaders { request.headers.replaceOrAdd(name: name, value: value) }
            self.state.withLock { $0.revalidating = stored }
            return nil
        case .fetch:
            return nil
        }
    }

    /// Whether a 304 now answers this run's own revalidation.
    var isRevalidating: Bool { self.state.withLock { $0.revalidating != nil } }

    /// A redirect ends a revalidation: the conditional headers were for the first URL.
    func abandonRevalidation(_ request: inout TransferRequest) {
        guard self.state.withLock({ state -> Bool in
            defer { state.revalidating = nil }
            return state.revalidating != nil
        }) else { return }
        request.headers.remove(name: "If-None-Match")
        request.headers.remove(name: "If-Modified-Since")
    }

    /// Hands a stored response to the observer as if it had just arrived.
    func deliverStored(_ stored: StoredResponse) -> TransferOutcome {
        let response = ResponseInfo(url: stored.url, statusCode: stored.statusCode, headers: stored.headers, httpVersion: "HTTP/1.1")
        self.state.withLock { $0.lastResponse = response }
        self.observer.transferRun(self, didReceive: response, resumedAtOffset: nil, expectedTotal: Int64(stored.body.count))
        if !stored.body.isEmpty { self.observer.transferRun(self, didReceive: ByteBuffer(bytes: stored.body)) }
        return .completed(response: response, bytesOnDisk: 0)
    }

    /// A 304 answered the revalidation: refresh the entry's headers and times, store it and
    /// deliver it.
    func completeRevalidation(_ notModified: ResponseInfo, requestTime: Date) -> TransferOutcome {
        guard let stored = self.state.withLock({ $0.revalidating }) else {
            return self.failure(URLError(.badServerResponse, userInfo: [NSLocalizedDescriptionKey: "an unexpected 304"]))
        }
        let refreshed = HTTPCacheRules.refreshed(stored, with: notModified.headers, requestTime: requestTime, responseTime: Date())
        self.engine.responseCache?.store(refreshed)
        return self.deliverStored(refreshed)
    }

    /// After a completed exchange: drops the entry an unsafe method invalidated, and stores the
    /// response collected for the cache once the observer agreed.
    func finishCaching(request: TransferRequest, response: ResponseInfo) async {
        guard let cache = self.engine.responseCache else { return }
        if HTTPCacheRules.invalidatesStoredResponse(method: request.method, statusCode: response.statusCode) {
            cache.removeStoredResponse(for: request.url)
            if response.url != request.url { cache.removeStoredResponse(for: response.url) }
            return
        }
        let candidate = self.state.withLock { state -> StoredResponse? in
            defer { state.cacheCandidate = nil }
            return state.cacheCandidate
        }
        guard let candidate, let accepted = await self.observer.transferRun(self, willStore: candidate) else { return }
        cache.store(accepted)
    }
}
