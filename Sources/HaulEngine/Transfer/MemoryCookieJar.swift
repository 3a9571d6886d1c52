import Foundation
import HaulCore
import Synchronization

/// Cookies held in memory for one program run and never written anywhere, as curl's `-b ''`
/// keeps them: a server that sets a cookie on a redirect gets it back on the next request.
package final class MemoryCookieJar: TransferCookieJar {
    private let cookies = Mutex<[String: Cookie]>([:])

    package init() {}

    package func cookieHeader(for url: URL) -> String? {
        let now = Date()
        let matching = self.cookies.withLock { Array($0.values) }.filter { !$0.isExpired(at: now) && $0.matches(url) }
        return matching.isEmpty ? nil : CookieRules.cookieHeader(matching)
    }

    package func store(setCookie values: [String], from url: URL) {
        let now = Date()
        let parsed = values.compactMap { CookieRules.parse(setCookie: $0, from: url, now: now) }
        guard !parsed.isEmpty else { return }
        self.cookies.withLock { stored in
            for cookie in parsed {
                if cookie.isExpired(at: now) {
                    stored.removeValue(forKey: cookie.identity)
                } else {
                    stored[cookie.identity] = cookie
                }
            }
        }
    }
}
