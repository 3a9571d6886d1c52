import HaulEngine

/// What runs a queued download: one file's ``TransferRun``, a list download's ``ListRun``, or
/// one file's run carried by its host's ``HostRun``.
enum QueueRun: Sendable {
    case file(TransferRun)
    case list(ListRun)
    case member(HostRun.Member, HostRun)

    /// The loop the run is launched from (a list's first engine; its files spread over all).
    var engine: TransferEngine {
        switch self {
        case .file(let run): run.engine
        case .list(let run): run.setup.engines[0]
        case .member(let member, _): member.run.engine
        }
    }

    /// The run of one file; `nil` for a list.
    var file: TransferRun? {
        switch self {
        case .file(let run): run
        case .member(let member, _): member.run
        case .list: nil
        }
    }

    /// Starts the run; `completion` is called once, when it has ended.
    func start(completion: @escaping @Sendable (TransferOutcome) -> Void) {
        switch self {
        case .file(let run): run.start(completion: completion)
        case .list(let run): run.start(completion: completion)
        // Started by its host run (``HostRun/handOver(_:)``), which tells the queue of its end.
        case .member(let member, let host): host.handOver([member])
        }
    }

    func stop(_ reason: TransferRun.StopReason) {
        switch self {
        case .file(let run): run.stop(reason)
        case .list(let run): run.stop(reason)
        case .member(let member, let host):
            // Not started yet: it ends now, stopped; else its run stops as any.
            if !host.withdraw(member.id, stopping: { member.run.stop(reason) }) { member.run.stop(reason) }
        }
    }

    /// Stops the run only while it still waits for its slot at the core's gate.
    func stopUnlessAdmitted(_ reason: TransferRun.StopReason) -> Bool {
        switch self {
        case .file(let run): run.stopUnlessAdmitted(reason)
        case .list(let run): run.stopUnlessAdmitted(reason)
        case .member(let member, let host):
            // Only while it waits in its host run's line (stopped before it could start).
            host.withdraw(member.id) { member.run.stop(reason) }
        }
    }
}
