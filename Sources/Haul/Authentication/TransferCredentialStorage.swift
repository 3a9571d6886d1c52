import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization

/// Credentials by protection space, as `URLCredentialStorage`: one per configuration.
/// `.default` configurations share ``shared`` (for the life of the process: Linux has no
/// keychain, so nothing is written to disk); `.ephemeral` ones get a private store.
public final class TransferCredentialStorage: Sendable {
    private struct Entry {
        var credentials: [String: URLCredential] = [:]
        var defaultUser: String?
    }

    private let entries = Mutex<[String: UncheckedSendable<Entry>]>([:])

    /// The store of `.default` configurations.
    public static let shared = TransferCredentialStorage()

    public init() {}

    /// The credentials of `space` by user name.
    public func credentials(for space: URLProtectionSpace) -> [String: URLCredential]? {
        self.entries.withLock { $0[Self.key(space)]?.value.credentials }
    }

    /// The credential used first for `space`.
    public func defaultCredential(for space: URLProtectionSpace) -> URLCredential? {
        self.entries.withLock { entries in
            guard let entry = entries[Self.key(space)]?.value else { return nil }
            return entry.defaultUser.flatMap { entry.credentials[$0] } ?? entry.credentials.values.first
        }
    }

    /// Stores `credential` for `space` (credentials with `.none` persistence are not kept).
    public func set(_ credential: URLCredential, for space: URLProtectionSpace) {
        guard credential.persistence != .none, let user = credential.user else { return }
        self.entries.withLock { entries in
            var entry = entries[Self.key(space)]?.value ?? Entry()
            entry.credentials[user] = credential
            entries[Self.key(space)] = UncheckedSendable(entry)
        }
    }

    /// Stores `credential` and makes it the one used first for `space`.
    public func setDefaultCredential(_ credential: URLCredential, for space: URLProtectionSpace) {
        self.set(credential, for: space)
        self.entries.withLock { entries in
            guard var entry = entries[Self.key(space)]?.value else { return }
            entry.defaultUser = credential.user
            entries[Self.key(space)] = UncheckedSendable(entry)
        }
    }

    public func remove(_ credential: URLCredential, for space: URLProtectionSpace) {
        guard let user = credential.user else { return }
        self.entries.withLock { entries in
            guard var entry = entries[Self.key(space)]?.value else { return }
            entry.credentials[user] = nil
            if entry.defaultUser == user { entry.defaultUser = nil }
            entries[Self.key(space)] = UncheckedSendable(entry)
        }
    }

    static func key(_ space: URLProtectionSpace) -> String {
        "\(space.protocol ?? "")://\(space.host.lowercased()):\(space.port)/\(space.realm ?? "")#\(space.authenticationMethod)"
    }
}
