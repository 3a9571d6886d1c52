import Foundation
import HaulCore

/// A daemon's hold on one download of a shared queue: which daemon holds it, and the claim's
/// generation — the fencing token. Every claim of a download bumps its generation, so a write
/// made under an older claim (a daemon that was cut off while another took the download over)
/// is refused by the store, however late it arrives.
public struct QueueLease: Sendable, Hashable, Codable, CustomStringConvertible {
    public var daemon: String
    public var generation: Int64

    public init(daemon: String, generation: Int64) {
        self.daemon = daemon
        self.generation = generation
    }

    public var description: String { "\(self.daemon)#\(self.generation)" }
}

/// The store refused a write made under a lease that is no longer current: another daemon
/// claimed the download (or its lease expired and it went back to waiting).
public struct QueueLeaseLost: Error, CustomStringConvertible {
    public var downloadID: Int64
    public var lease: QueueLease
    /// Who holds it now, when someone does.
    public var holder: String?

    public init(downloadID: Int64, lease: QueueLease, holder: String?) {
        self.downloadID = downloadID
        self.lease = lease
        self.holder = holder
    }

    public var description: String {
        "download \(self.downloadID): lease \(self.lease) is no longer current" + (self.holder.map { " (held by \($0))" } ?? "")
    }
}

/// What a daemon asks for when it wants to start a waiting download.
public struct QueueClaim: Sendable {
    public var downloadID: Int64
    public var daemon: String
    /// How long the lease lasts unless renewed (measured on the store's clock).
    public var leaseSeconds: Double
    /// The host the download fetches from (the fleet's per-host budget is counted per host).
    public var host: String
    /// Connections the download would like; the answer may grant fewer.
    public var connections: Int
    /// Connections to `host` the whole fleet may hold; 0: no fleet-wide limit.
    public var maximumPerHost: Int
    /// Other downloads of `host` the daemon would start next, in its order: when
    /// `downloadID` is held by another daemon (or waits no more), the first of these that waits
    /// and no daemon holds is claimed instead, by the same call. A fleet's daemons walk
    /// one list in one order, and each claim of the one another daemon had just taken was a
    /// round trip for nothing (two daemons: ~0.9 a file). A store of one daemon ignores them.
    public var alternatives: [Int64]

    public init(downloadID: Int64, daemon: String, leaseSeconds: Double, host: String, connections: Int, maximumPerHost: Int, alternatives: [Int64] = []) {
        self.downloadID = downloadID
        self.daemon = daemon
        self.leaseSeconds = leaseSeconds
        self.host = host
        self.connections = connections
        self.maximumPerHost = maximumPerHost
        self.alternatives = alternatives
    }
}

/// The store's answer to a ``QueueClaim``.
public enum QueueClaimOutcome: Sendable {
    /// The download is this daemon's until the lease expires: the row as changed by the claim
    /// (``QueueClaim/downloadID``'s, or one of ``QueueClaim/alternatives``: its id says), the
    /// lease, and how many connections to its host it may use.
    case claimed(StoredDownload, QueueLease, connections: Int)
    /// It does not wait any more (paused, removed, finished) or is gone: the row as the claim
    /// read it, when it read one (`nil`: gone, or not read).
    case notWaiting(StoredDownload?)
    /// Another daemon holds it (its name), or is claiming it right now (`nil`), and the row as
    /// the claim read it when it could (a collision of two daemons costs no read more).
    case heldElsewhere(String?, StoredDownload?)
    /// The fleet already uses every connection to the host that its limit allows.
    case hostBusy
}

/// What another daemon changed in a shared store (delivered by ``QueueStore/observeChanges(_:)``).
public enum QueueStoreChange: Sendable, Hashable {
    /// Download `id` changed, was added or deleted: read it again.
    case download(Int64)
    /// The settings changed.
    case settings
    /// Changes may have been missed (the listening connection was lost and is back): read
    /// everything again.
    case resync
}

/// A subscription to ``QueueStoreChange``s; ``cancel()`` ends it.
public protocol QueueStoreObservation: Sendable {
    func cancel()
}
