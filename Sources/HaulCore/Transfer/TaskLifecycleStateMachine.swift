/// The life of one task as URLSession defines it (suspended → running → canceling → completed),
/// including a pause that takes effect asynchronously: `suspend()` asks the transfer to stop,
/// and only its report that it stopped makes the pause final.
///
/// Pure value type. The owner calls one event method under its lock and runs the returned action
/// after releasing it.
public struct TaskLifecycleStateMachine: Sendable {
    /// The task state visible to API users, as `URLSessionTask.State`.
    public enum PublicState: Int, Sendable, Hashable {
        case running = 0
        case suspended = 1
        case canceling = 2
        case completed = 3
    }

    /// What the owner must do after an event.
    public enum Action: Sendable, Hashable {
        case none
        /// Start (or continue, after a pause) the transfer.
        case startTransfer
        /// Ask the running transfer to stop, keeping its bytes for a later `startTransfer`.
        case pauseTransfer
        /// Ask the running transfer to stop for good; it will report `transferStopped()`.
        case cancelTransfer
        /// No transfer is running: complete the task as cancelled now.
        case completeAsCancelled
        /// Deliver the transfer's own result (success or error) as the task's completion.
        case deliverResult
    }

    private enum State: Sendable, Hashable {
        case initial
        case running
        case pausing(resumeRequested: Bool)
        case paused
        case canceling
        case completed
    }

    private var state: State = .initial

    public init() {}

    /// The state as `URLSessionTask.state` reports it.
    public var publicState: PublicState {
        switch self.state {
        case .initial, .paused, .pausing(resumeRequested: false): .suspended
        case .running, .pausing(resumeRequested: true): .running
        case .canceling: .canceling
        case .completed: .completed
        }
    }

    /// Whether the transfer has ever been started.
    public var hasStarted: Bool { self.state != .initial }

    /// `resume()` was called.
    public mutating func resumeCalled() -> Action {
        switch self.state {
        case .initial, .paused:
            self.state = .running
            return .startTransfer
        case .pausing:
            self.state = .pausing(resumeRequested: true)
            return .none
        case .running, .canceling, .completed:
            return .none
        }
    }

    /// `suspend()` was called.
    public mutating func suspendCalled() -> Action {
        switch self.state {
        case .running:
            self.state = .pausing(resumeRequested: false)
            return .pauseTransfer
        case .pausing:
            self.state = .pausing(resumeRequested: false)
            return .none
        case .initial, .paused, .canceling, .completed:
            return .none
        }
    }

    /// `cancel()` or `cancel(byProducingResumeData:)` was called.
    public mutating func cancelCalled() -> Action {
        switch self.state {
        case .initial, .paused:
            self.state = .completed
            return .completeAsCancelled
        case .running:
            self.state = .canceling
            return .cancelTransfer
        case .pausing:
            // The transfer is already stopping; its report completes the task as cancelled.
            self.state = .canceling
            return .none
        case .canceling, .completed:
            return .none
        }
    }

    /// The transfer stopped because it was asked to (pause or cancel).
    public mutating func transferStopped() -> Action {
        switch self.state {
        case .pausing(resumeRequested: false):
            self.state = .paused
            return .none
        case .pausing(resumeRequested: true):
            self.state = .running
            return .startTransfer
        case .canceling:
            self.state = .completed
            return .completeAsCancelled
        case .initial, .running, .paused, .completed:
            return .none
        }
    }

    /// The transfer ended on its own, with success or an error.
    public mutating func transferFinished() -> Action {
        switch self.state {
        case .running, .pausing:
            self.state = .completed
            return .deliverResult
        case .canceling:
            // cancel() was called first: the user asked for cancellation, so that is what they get.
            self.state = .completed
            return .completeAsCancelled
        case .initial, .paused, .completed:
            return .none
        }
    }
}
