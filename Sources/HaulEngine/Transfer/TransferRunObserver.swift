import Foundation
import HaulCore
import NIOCore

/// Receives what a ``TransferRun`` sees while it runs.
///
/// All methods but ``transferRun(_:willRedirect:to:)`` are called on an event-loop thread, in
/// the order of the events, never concurrently for one run: they must return quickly and must
/// not block. For every final response, `didReceive response` comes once, before any body bytes
/// of that response; a run that starts over (server ignored the range) reports a new response.
package protocol TransferRunObserver: AnyObject, Sendable {
    /// A final (non-redirect) response head arrived and its body will be accepted.
    ///
    /// - Parameters:
    ///   - resumedAtOffset: for downloads that resumed, the offset the body continues at
    ///     (0 when the server sent the whole entity again); `nil` for fresh transfers.
    ///   - expectedTotal: the complete entity length, if the server announced it.
    func transferRun(
        _ run: TransferRun,
        didReceive response: ResponseInfo,
        resumedAtOffset: Int64?,
        expectedTotal: Int64?
    )

    /// Body bytes were written to the partial file (downloads). Called once per received chunk.
    func transferRun(_ run: TransferRun, didWrite byteCount: Int, totalOnDisk: Int64, expectedTotal: Int64?)

    /// Body bytes arrived (data transfers). Called once per received chunk.
    func transferRun(_ run: TransferRun, didReceive body: ByteBuffer)

    /// The window of body bytes handed over but not consumed yet; when it is full the run stops
    /// reading until it drains. `nil`: no limit.
    var bodyDeliveryWindow: DeliveryWindow? { get }

    /// A redirect is about to be followed. Return the request to send (possibly modified), or
    /// `nil` to stop and complete with the redirect response itself. Called on no particular
    /// thread; the run waits for the answer.
    func transferRun(_ run: TransferRun, willRedirect response: ResponseInfo, to request: TransferRequest) async
        -> TransferRequest?

    /// Request body bytes were written to the connection (uploads). Called once per chunk of
    /// at most 256 KiB, after the previous chunk's write completed; `totalSent` starts over when
    /// a body is sent again (after a redirect that keeps it).
    func transferRun(_ run: TransferRun, didSendBodyBytes byteCount: Int64, totalSent: Int64, expectedToSend: Int64)

    /// A data transfer's response is about to be stored in the session's cache. Return the
    /// entry to store (possibly changed) or `nil` to store nothing. Called once per storable
    /// response, after its last body bytes and before the run completes; the run waits.
    func transferRun(_ run: TransferRun, willStore response: StoredResponse) async -> StoredResponse?

    /// An `Authorization` value to send with `request` before any challenge (credentials the
    /// server accepted earlier for this area), or `nil`. Asked before each exchange whose
    /// request carries no `Authorization` yet; called on no particular thread.
    func transferRun(_ run: TransferRun, preemptiveAuthorizationFor request: TransferRequest) -> String?

    /// Whether 401 answers with `WWW-Authenticate` go to the challenge method below.
    var handlesAuthentication: Bool { get }

    /// A mirror of a segmented download was dropped and contributes nothing more (`reason`
    /// says why: another entity, no ranges, failures). At most once per mirror and run, on
    /// the engine's event loop: do not block.
    func transferRun(_ run: TransferRun, droppedMirror url: URL, reason: String)

    /// A 401 with `WWW-Authenticate` arrived for `request` (its body, at most 1 MiB, is held
    /// back); `previousFailureCount` counts the earlier 401s of this transfer. Called on no
    /// particular thread; the run waits for the answer.
    func transferRun(
        _ run: TransferRun,
        authenticationChallenge response: ResponseInfo,
        for request: TransferRequest,
        previousFailureCount: Int
    ) async -> AuthenticationAnswer
}

/// What to do about a 401 with `WWW-Authenticate`.
package enum AuthenticationAnswer: Sendable {
    /// Send the request again with this `Authorization` value.
    case authorize(String)
    /// Complete with the 401 response and its body.
    case proceedWithoutCredential
    /// Fail with this error (the user cancelled the challenge).
    case cancel(URLError)
}

extension TransferRunObserver {
    package func transferRun(_ run: TransferRun, droppedMirror url: URL, reason: String) {}

    package func transferRun(_ run: TransferRun, preemptiveAuthorizationFor request: TransferRequest) -> String? { nil }

    package var bodyDeliveryWindow: DeliveryWindow? { nil }

    package func transferRun(_ run: TransferRun, willStore response: StoredResponse) async -> StoredResponse? { response }

    package func transferRun(_ run: TransferRun, didSendBodyBytes byteCount: Int64, totalSent: Int64, expectedToSend: Int64) {}

    /// Whether 401 answers are brought to ``transferRun(_:authenticationChallenge:for:previousFailureCount:)``
    /// (else they complete like any response).
    package var handlesAuthentication: Bool { false }

    /// A 401 with `WWW-Authenticate` arrived for `request`; `previousFailureCount` counts the
    /// earlier 401s of this transfer. Called on no particular thread; the run waits.
    package func transferRun(
        _ run: TransferRun,
        authenticationChallenge response: ResponseInfo,
        for request: TransferRequest,
        previousFailureCount: Int
    ) async -> AuthenticationAnswer {
        .proceedWithoutCredential
    }
}
