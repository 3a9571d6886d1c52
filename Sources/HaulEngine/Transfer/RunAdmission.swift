/// A slot a ``TransferRun`` takes before its first request (waiting for it if none is free) and
/// gives back when it ends: how hauld's core lets transfers it started ahead take a slot the
/// moment one frees, on the loop where it frees (``TransferRun/init(engine:request:destination:resourceTimeout:bandwidthLimiters:maximumConnections:mirrors:mirrorPolicy:opensUnnamedFile:admission:observer:)``).
package protocol RunAdmission: Sendable {
    /// Waits for the slot. Called once per run, from the run's task, before anything else.
    ///
    /// - Throws: `CancellationError` when the run's task is cancelled while waiting (the run
    ///   was stopped), or when it was withdrawn (``withdraw(stopping:)``): the slot was not
    ///   taken and ``leave()`` is not called.
    func enter() async throws

    /// Takes the run out of the line unless it holds its slot already; `stop` runs at once when
    /// it is taken out, atomically with that (no admission can come between). A run taken out
    /// never gets the slot: its ``enter()`` throws, now if it waits, when called otherwise.
    ///
    /// - Returns: whether the run was taken out (`false`: it holds its slot and may be fetching).
    func withdraw(stopping stop: () -> Void) -> Bool

    /// Gives the slot back. Called once per run that entered, as the run ends (right after its
    /// completion: whoever the completion tells hears of the end before of a run admitted in
    /// the slot), on the run's loop.
    func leave()
}
