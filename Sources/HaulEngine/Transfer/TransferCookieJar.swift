import Foundation

/// Where an engine's transfers get and put cookies (a session's cookie storage).
///
/// `cookieHeader` is called once per request sent (redirected requests included); `store` once
/// per response head that carries `Set-Cookie` (redirect responses included), before the next
/// request of the same transfer is built.
package protocol TransferCookieJar: Sendable {
    func cookieHeader(for url: URL) -> String?
    func store(setCookie values: [String], from url: URL)
}
