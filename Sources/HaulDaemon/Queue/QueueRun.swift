import HaulEngine

/// What runs a queued download: one file's ``TransferRun``, or a list download's ``ListRun``.
enum QueueRun: Sendable {
    case file(TransferRun)
    case list(ListRun)

    /// The loop the run is launched from (a list's first engine; its files spread over all).
    var engine: TransferEngine {
        switch self {
        case .file(let run): run.engine
        case .list(let run): run.setup.engines[0]
        }
    }

    /// The run of one file; `nil` for a list.
    var file: TransferRun? {
        if case .file(let run) = self { run } else { nil }
    }

    /// Starts the run; `completion` is called once, when it has ended.
    func start(completion: @escaping @Sendable (TransferOutcome) -> Void) {
        switch self {
        case .file(let run): run.start(completion: completion)
        case .list(let run): run.start(completion: completion)
        }
    }

    func stop(_ reason: TransferRun.StopReason) {
        switch self {
        case .file(let run): run.stop(reason)
        case .list(let run): run.stop(reason)
        }
    }

    /// Stops the run only while it still waits for its slot at the core's gate.
    func stopUnlessAdmitted(_ reason: TransferRun.StopReason) -> Bool {
        switch self {
        case .file(let run): run.stopUnlessAdmitted(reason)
        case .list(let run): run.stopUnlessAdmitted(reason)
        }
    }
}
