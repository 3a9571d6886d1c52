import HaulCore
import Testing

@Suite("TaskLifecycleStateMachine")
struct TaskLifecycleStateMachineTests {
    @Test func startsSuspendedAndRunsOnResume() {
        var machine = TaskLifecycleStateMachine()
        #expect(machine.publicState == .suspended)
        #expect(machine.resumeCalled() == .startTransfer)
        #expect(machine.publicState == .running)
        #expect(machine.resumeCalled() == .none, "a second resume does nothing")
    }

    @Test func pauseTakesEffectWhenTheTransferStops() {
        var machine = TaskLifecycleStateMachine()
        _ = machine.resumeCalled()
        #expect(machine.suspendCalled() == .pauseTransfer)
        #expect(machine.publicState == .suspended)
        #expect(machine.transferStopped() == .none)
        #expect(machine.resumeCalled() == .startTransfer)
    }

    @Test func resumeDuringPauseRestartsAfterStop() {
        var machine = TaskLifecycleStateMachine()
        _ = machine.resumeCalled()
        _ = machine.suspendCalled()
        #expect(machine.resumeCalled() == .none)
        #expect(machine.publicState == .running)
        #expect(machine.transferStopped() == .startTransfer)
    }

    @Test func cancelOfRunningTaskWaitsForTheStop() {
        var machine = TaskLifecycleStateMachine()
        _ = machine.resumeCalled()
        #expect(machine.cancelCalled() == .cancelTransfer)
        #expect(machine.publicState == .canceling)
        #expect(machine.cancelCalled() == .none)
        #expect(machine.transferStopped() == .completeAsCancelled)
        #expect(machine.publicState == .completed)
    }

    @Test func cancelOfSuspendedTaskCompletesAtOnce() {
        var machine = TaskLifecycleStateMachine()
        #expect(machine.cancelCalled() == .completeAsCancelled)
        #expect(machine.resumeCalled() == .none)
    }

    @Test func cancelWhilePausingCompletesOnStop() {
        var machine = TaskLifecycleStateMachine()
        _ = machine.resumeCalled()
        _ = machine.suspendCalled()
        #expect(machine.cancelCalled() == .none)
        #expect(machine.transferStopped() == .completeAsCancelled)
    }

    @Test func finishedTransferDeliversItsResultUnlessCancelled() {
        var running = TaskLifecycleStateMachine()
        _ = running.resumeCalled()
        #expect(running.transferFinished() == .deliverResult)
        #expect(running.publicState == .completed)

        var cancelled = TaskLifecycleStateMachine()
        _ = cancelled.resumeCalled()
        _ = cancelled.cancelCalled()
        #expect(cancelled.transferFinished() == .completeAsCancelled)
    }
}
