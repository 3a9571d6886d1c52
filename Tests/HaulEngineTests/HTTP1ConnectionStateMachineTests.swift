import Testing

@testable import HaulEngine

@Suite("HTTP1ConnectionStateMachine: one exchange at a time, in order, with back-pressure")
struct HTTP1ConnectionStateMachineTests {
    typealias Machine = HTTP1ConnectionStateMachine

    @Test("Parts go to the sink one at a time; reads wait while it is busy; keep-alive reuses the connection")
    func deliveryInOrder() {
        var machine = Machine()
        #expect(machine.exchangeStarted().started)
        #expect(machine.partReceived(.head(keepsAlive: true)) == .deliverReceived)
        // The sink is busy with the head: the next parts are held, and so are reads.
        #expect(machine.partReceived(.body) == .holdReceived)
        #expect(machine.partReceived(.body) == .holdReceived)
        #expect(machine.readRequested() == .none)
        #expect(machine.isWaitingForSink)
        #expect(machine.sinkFinished() == .deliverFirstHeld)
        #expect(machine.partReceived(.end) == .holdReceived)
        #expect(machine.sinkFinished() == .deliverFirstHeld)
        // The held end finishes the exchange, and the held read goes on (an idle connection reads).
        #expect(machine.sinkFinished() == .finishExchange(reuse: true, thenRead: true))
        #expect(machine.completedExchanges == 1)
        #expect(!machine.isWaitingForSink)
        #expect(machine.readRequested() == .read)
        #expect(machine.exchangeStarted().started, "the connection carries the next exchange")
    }

    @Test("A server that closes right after a whole answer: the held parts and the end still reach the sink, the connection is not reused")
    func closeAfterWholeAnswer() {
        var machine = Machine()
        _ = machine.exchangeStarted()
        #expect(machine.partReceived(.head(keepsAlive: false)) == .deliverReceived)
        #expect(machine.partReceived(.body) == .holdReceived)
        #expect(machine.partReceived(.end) == .holdReceived)
        #expect(machine.channelClosed() == .none, "the whole answer is here: not a failure")
        #expect(machine.sinkFinished() == .deliverFirstHeld)
        #expect(machine.sinkFinished() == .finishExchange(reuse: false, thenRead: false))
        #expect(machine.isClosed)
        #expect(machine.completedExchanges == 1)

        // A close before the end is still a failure, with the parts held dropped.
        var cut = Machine()
        _ = cut.exchangeStarted()
        _ = cut.partReceived(.head(keepsAlive: false))
        _ = cut.partReceived(.body)
        #expect(cut.channelClosed() == .failExchange(mayRetry: false))
        #expect(cut.isClosed)
    }

    @Test("A read while the sink keeps up goes on at once; a held read goes on when it caught up")
    func readsFollowTheSink() {
        var machine = Machine()
        _ = machine.exchangeStarted()
        #expect(machine.readRequested() == .read)
        #expect(machine.partReceived(.head(keepsAlive: true)) == .deliverReceived)
        #expect(machine.readRequested() == .none)
        #expect(machine.sinkFinished() == .read)
        #expect(machine.partReceived(.body) == .deliverReceived)
        #expect(machine.sinkFinished() == .none, "no read was held: nothing to release")
        #expect(machine.partReceived(.end) == .finishExchange(reuse: true, thenRead: false))
    }

    @Test("A response that does not keep the connection alive closes it; so do parts after an end")
    func noReuse() {
        var machine = Machine()
        _ = machine.exchangeStarted()
        _ = machine.partReceived(.head(keepsAlive: false))
        _ = machine.sinkFinished()
        #expect(machine.partReceived(.end) == .finishExchange(reuse: false, thenRead: false))
        #expect(machine.isClosed)
        #expect(machine.exchangeStarted() == (false, true), "a closed connection refuses; the request may go on a new one")

        var second = Machine()
        _ = second.exchangeStarted()
        _ = second.partReceived(.head(keepsAlive: true))
        #expect(second.partReceived(.end) == .holdReceived)
        #expect(second.partReceived(.head(keepsAlive: true)) == .holdReceived)
        #expect(second.sinkFinished() == .finishExchange(reuse: false, thenRead: false), "bytes after the end: not reused")
        #expect(second.isClosed)
    }

    @Test("Bytes on an idle connection close it")
    func strayBytes() {
        var machine = Machine()
        #expect(machine.partReceived(.head(keepsAlive: true)) == .close)
    }

    /// A connection that completed one kept-alive exchange and started the next.
    private static func secondExchangeStarted() -> Machine {
        var machine = Machine()
        _ = machine.exchangeStarted()
        _ = machine.partReceived(.head(keepsAlive: true))
        _ = machine.sinkFinished()
        _ = machine.partReceived(.end)
        _ = machine.exchangeStarted()
        return machine
    }

    @Test("A failure may be retried only on a reused connection before any answer")
    func retryRules() {
        var fresh = Machine()
        _ = fresh.exchangeStarted()
        #expect(fresh.channelClosed() == .failExchange(mayRetry: false), "a new connection's failure is the server's answer")

        var reused = Self.secondExchangeStarted()
        #expect(reused.channelClosed() == .failExchange(mayRetry: true), "closed as the request went out: send it again")
        #expect(reused.channelClosed() == .none, "nothing left to fail")

        var answered = Self.secondExchangeStarted()
        _ = answered.partReceived(.head(keepsAlive: true))
        #expect(answered.hasReceivedAnything)
        #expect(answered.exchangeFailed() == .failExchange(mayRetry: false), "part of the answer came: never sent twice")
        #expect(answered.isClosed)
        #expect(answered.partReceived(.body) == .none, "after a failure nothing more is delivered")
    }
}
