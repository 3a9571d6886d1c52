import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Holds a session's delegate so it can be captured by the operations run on the delegate queue.
///
/// @unchecked Sendable: delegates are plain (often non-Sendable) objects, as in URLSession. Haul
/// only ever calls them from operations on the session's delegate queue, which runs one at a
/// time in order, so a delegate is never entered concurrently by Haul. `value` is written only
/// under `lock` and cleared once, after the session's last call.
final class DelegateBox: @unchecked Sendable {
    private let lock = NSLock()
    private var storedValue: (any TransferSessionDelegate)?

    init(_ value: (any TransferSessionDelegate)?) {
        self.storedValue = value
    }

    var value: (any TransferSessionDelegate)? {
        self.lock.lock()
        defer { self.lock.unlock() }
        return self.storedValue
    }

    func clear() {
        self.lock.lock()
        self.storedValue = nil
        self.lock.unlock()
    }
}

/// Lets a non-Sendable value cross into a `@Sendable` closure that runs on the delegate queue.
/// Used only for Foundation value-like objects handed to the delegate (URLRequest, responses)
/// that nothing mutates after hand-over.
struct UncheckedSendable<Value>: @unchecked Sendable {
    var value: Value
    init(_ value: Value) { self.value = value }
}
