import NIOSSL

/// Carries a verification callback to the event loop that installs it.
struct VerificationCallbackBox: @unchecked Sendable {
    // @unchecked: the callback is handed over once and called by NIOSSL on the channel's loop.
    var callback: NIOSSLCustomVerificationCallback?
}
