import Foundation
import HaulCore
import NIOHTTP1
import NIOSSL

/// One server a segmented download fetches from: the primary URL (whose answer defined the
/// entity) or a mirror. Owned by its ``SegmentGroup`` on the engine's event loop.
struct SegmentSource {
    enum Stage {
        /// Not asked yet (a mirror).
        case untried
        /// The mirror's first request is out; no other lane starts on it until it answered.
        case probing
        /// Its answers name the entity: any number of lanes (up to the budget).
        case accepted
        /// It contributes nothing more (`reason`).
        case dropped(String)
    }

    enum TLS {
        case unresolved
        case resolving
        case ready(TLSConfiguration?)
    }

    let url: URL
    let host: String
    let isPrimary: Bool
    /// The request headers for this source (no `Range`/`If-Range`; credentials only for the
    /// primary's origin).
    var headers: HTTPHeaders
    /// What to send as `If-Range` (`nil`: nothing, a mirror's first request).
    var ifRange: String?
    /// The validators its accepted answers carry.
    var validators: EntityValidators
    var stage: Stage
    var tls: TLS
    /// Lanes running on it now.
    var lanes = 0
    /// Bytes of the file written from it.
    var bytes: Int64 = 0
    var consecutiveFailures = 0
    /// Bytes per second per connection, as last measured (`nil` before it ran).
    var speed: Double?

    var isDropped: Bool {
        if case .dropped = self.stage { return true }
        return false
    }

    /// Whether another lane may start on it now.
    var canTakeLane: Bool {
        switch self.stage {
        case .untried, .accepted:
            if case .ready = self.tls { return true }
            return false
        case .probing, .dropped:
            return false
        }
    }

    var report: SegmentSourceReport {
        var dropped: String?
        if case .dropped(let reason) = self.stage { dropped = reason }
        return SegmentSourceReport(url: self.url, isPrimary: self.isPrimary, bytes: self.bytes, connections: self.lanes, dropped: dropped)
    }

    /// Whether `a` and `b` share scheme, host and port (credentials go only to the origin they
    /// were meant for).
    static func sameOrigin(_ a: URL, _ b: URL) -> Bool {
        TransferRun.hostKey(a).lowercased() == TransferRun.hostKey(b).lowercased()
    }
}
