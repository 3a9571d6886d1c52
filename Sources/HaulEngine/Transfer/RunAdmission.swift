/// A slot a ``TransferRun`` takes before its first request (waiting for it if none is free) and
/// gives back when it ends: how hauld's core lets transfers it started ahead take a slot the
/// moment one frees, on the loop where it frees (``TransferRun/init(engine:request:destination:resourceTimeout:bandwidthLimiters:maximumConnections:mirrors:mirrorPolicy:opensUnnamedFile:admission:observer:)``).
package protocol RunAdmission: Sendable {
    /// Waits for the slot. Called once per run, from the run's task, before anything else.
    ///
    /// - Throws: `CancellationError` when the run's task is cancelled while waiting (the run
    ///   was stopped): the slot was not taken and ``leave()`` is not called.
    func enter() async throws

    /// Gives the slot back. Called once per run that entered, as the run ends (before its
    /// completion), on the run's loop.
    func leave()
}
