import Foundation
import HaulCore

/// Where a session's engine keeps and finds HTTP responses for data transfers (a URLCache).
/// Implementations are thread-safe; every call returns promptly.
package protocol TransferResponseCache: Sendable {
    /// The entry stored for GET `url`, if any (the run checks `Vary` and freshness itself).
    func storedResponse(for url: URL) -> StoredResponse?
    /// Keeps `response` for GET `response.url`, replacing any entry. May decline (too large).
    func store(_ response: StoredResponse)
    /// Drops the entry for `url`.
    func removeStoredResponse(for url: URL)
    /// The largest body worth collecting for an entry; larger bodies are not stored.
    var maximumEntryBytes: Int { get }
}
