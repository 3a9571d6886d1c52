import Foundation
import HaulCore

/// One kind of durable transfer that ``TransferCore`` runs: the tasks of background sessions
/// (``TransferDaemon``) or the downloads of the queue (``DownloadQueue``).
///
/// The core calls the first three methods from its decision queue, in the order the scheduler
/// decided them; an owner hops to its own serial queue and must not block the caller. The
/// other three come from a ``TrackedTransfer`` of the owner's, on an event-loop thread: they
/// must return at once.
protocol TransferOwner: AnyObject, Sendable {
    /// Start these transfers now: the entries one decision of the scheduler started, in its
    /// order (one hop for all of them), each as it was enqueued (its host). Every start is
    /// answered with exactly one ``TransferCore/ended(_:)``: when its run has ended, or at once
    /// when it cannot start after all (paused or removed meanwhile).
    func startTransfers(_ entries: [TransferScheduler.Entry])

    /// Stop the running transfer `number`, keeping its bytes, and make it ready again once it
    /// stopped (``TransferCore/ended(_:)`` then ``TransferCore/enqueue(_:)``). A limit went down, or
    /// a non-discretionary transfer needs the slot of this discretionary one, or a better-ranked
    /// one the place of this one started ahead.
    ///
    /// `onlyIfWaiting` (a transfer started ahead): only if its run still waits for its slot
    /// (``TransferRun/stopUnlessAdmitted(_:)``); one that has its slot runs on untouched, and the
    /// owner tells ``TransferCore/yieldRefused(_:)``.
    func yieldTransfer(_ number: Int64, onlyIfWaiting: Bool)

    /// The daemon is stopping: stop every running transfer, keeping its checkpoint.
    func stopForShutdown()

    /// Returns once the owner has recorded the end of every transfer whose slot it gave back
    /// (an owner may give a slot back before it has saved how the run ended). Called once by
    /// the core's shutdown, after the last transfer ended.
    func settle() async

    /// A final response arrived; `resumedAtOffset` is set when the body continues earlier bytes
    /// (0: the server sent the whole entity again).
    func transferResponded(_ transfer: TrackedTransfer, resumedAtOffset: Int64?, expectedTotal: Int64?)

    /// A checkpoint is due: take it with ``TrackedTransfer/takeCheckpoint()`` (on the owner's
    /// queue, after syncing the file). At most one is outstanding per transfer.
    func transferCheckpointDue(_ transfer: TrackedTransfer)

    /// Live progress is due (at most once per progress interval per transfer).
    func transferProgressed(_ transfer: TrackedTransfer)

    /// A mirror of the segmented transfer contributes nothing more (once per mirror and run,
    /// on an event loop: do not block).
    func transfer(_ transfer: TrackedTransfer, droppedMirror url: URL, reason: String)
}

extension TransferOwner {
    func transfer(_ transfer: TrackedTransfer, droppedMirror url: URL, reason: String) {}
}
