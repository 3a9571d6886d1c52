/// The decisions of one HTTP/1.1 client connection that carries one exchange at a time, as a
/// value type with no I/O: when a response part goes to the consumer ("sink"), when it waits,
/// when the channel may read, and whether the connection can carry the next exchange. The
/// channel handler reports events and runs the actions (AsyncHTTPClient's
/// `HTTP1ConnectionStateMachine` pattern).
///
/// The rules:
/// - parts go to the sink one at a time, in order: the next only once the sink has finished the
///   previous one (its future succeeded); parts that arrive meanwhile are held;
/// - while the sink is busy or parts are held, the channel's reads are held too (TCP
///   back-pressure); on an idle connection they flow, so that a server's close is noticed;
/// - the end of a response finishes the exchange; the connection is reused when the response
///   allowed it (keep-alive) and nothing followed the end, else closed;
/// - an exchange that fails before any part of its answer arrived, on a connection that had
///   carried one before, may be sent again on a new connection: the server closed the idle
///   connection as the request went out, and nothing reached the sink.
///
/// The machine sees only the kinds of the parts; the handler keeps the held parts themselves
/// (a queue, in the order the machine says to hold and take them), so that no part is copied
/// through an action.
struct HTTP1ConnectionStateMachine: Sendable {
    /// What kind of response part arrived.
    enum PartKind: Sendable, Equatable {
        /// The status line and fields; `keepsAlive`: the connection may carry another exchange.
        case head(keepsAlive: Bool)
        case body
        case end
    }

    /// What the handler does next.
    enum Action: Sendable, Equatable {
        case none
        /// Hand the part just received to the sink; report ``sinkFinished()`` (or
        /// ``exchangeFailed()``) when its future completes.
        case deliverReceived
        /// Keep the part just received, behind any held before it.
        case holdReceived
        /// Take the first held part and hand it to the sink, as for ``deliverReceived``.
        case deliverFirstHeld
        /// Ask the channel for more bytes (a read that was held, or one that may go on).
        case read
        /// The response ended (the part just received, or the first held one, which is then
        /// dropped): succeed the exchange; keep the connection when `reuse`, else close it.
        /// `thenRead`: a read was held and may go on now.
        case finishExchange(reuse: Bool, thenRead: Bool)
        /// Fail the exchange with the error at hand, drop any held parts and close the
        /// connection; `mayRetry`: it may be sent again on a new connection.
        case failExchange(mayRetry: Bool)
        /// Close the connection (bytes nobody asked for).
        case close
    }

    /// The current exchange.
    private struct Exchange: Sendable {
        var isSinkBusy = false
        var isReadHeld = false
        var keepsAlive = true
        var hasReceivedAnything = false
        /// The kinds of the held parts, in order.
        var held: [PartKind] = []
    }

    private enum State: Sendable {
        case idle
        case exchange(Exchange)
        case closed
        /// Only while the exchange is taken out to be changed (its held kinds then have one
        /// owner: appending does not copy them).
        case modifying
    }

    private var state = State.idle
    /// Exchanges this connection completed.
    private(set) var completedExchanges = 0

    init() {}

    /// Whether the connection is closed.
    var isClosed: Bool {
        if case .closed = self.state { return true }
        return false
    }

    /// Whether the sink has a part in hand or parts are held (time the sink takes does not
    /// count as the server's silence).
    var isWaitingForSink: Bool {
        guard case .exchange(let exchange) = self.state else { return false }
        return exchange.isSinkBusy || !exchange.held.isEmpty
    }

    /// Whether any part of the current exchange's answer arrived.
    var hasReceivedAnything: Bool {
        guard case .exchange(let exchange) = self.state else { return false }
        return exchange.hasReceivedAnything
    }

    /// An exchange's request is about to be sent. `started` is `false` when the connection
    /// cannot take it (closed), with whether it may go again on a new connection.
    mutating func exchangeStarted() -> (started: Bool, mayRetry: Bool) {
        switch self.state {
        case .idle:
            self.state = .exchange(Exchange())
            return (true, false)
        case .closed:
            return (false, self.completedExchanges > 0)
        case .exchange, .modifying:
            preconditionFailure("one exchange at a time on an HTTP/1.1 connection")
        }
    }

    /// A response part of `kind` arrived.
    mutating func partReceived(_ kind: PartKind) -> Action {
        switch self.state {
        case .idle:
            return .close
        case .closed, .modifying:
            return .none
        case .exchange(var exchange):
            exchange.hasReceivedAnything = true
            if exchange.isSinkBusy || !exchange.held.isEmpty {
                self.state = .modifying
                exchange.held.append(kind)
                self.state = .exchange(exchange)
                return .holdReceived
            }
            return self.next(kind, exchange, received: true)
        }
    }

    /// The sink finished the part it was given: the next held part, the end, or a read.
    mutating func sinkFinished() -> Action {
        guard case .exchange(var exchange) = self.state else { return .none }
        exchange.isSinkBusy = false
        guard !exchange.held.isEmpty else {
            if exchange.isReadHeld {
                exchange.isReadHeld = false
                self.state = .exchange(exchange)
                return .read
            }
            self.state = .exchange(exchange)
            return .none
        }
        self.state = .modifying
        let kind = exchange.held.removeFirst()
        return self.next(kind, exchange, received: false)
    }

    /// The channel wants to read: it may, unless the sink is behind.
    mutating func readRequested() -> Action {
        guard case .exchange(var exchange) = self.state, exchange.isSinkBusy || !exchange.held.isEmpty else {
            return .read
        }
        exchange.isReadHeld = true
        self.state = .exchange(exchange)
        return .none
    }

    /// The exchange failed (the sink refused a part, the server stalled, the user cancelled, an
    /// error on the channel): fail it and close. `.none` when no exchange is under way.
    mutating func exchangeFailed() -> Action {
        guard case .exchange(let exchange) = self.state else { return .none }
        self.state = .closed
        return .failExchange(mayRetry: self.completedExchanges > 0 && !exchange.hasReceivedAnything)
    }

    /// The channel closed (the server, or the handler's own close).
    ///
    /// A response that arrived whole before the close (its end is held while the sink catches
    /// up: a server that closes after each answer, an HTTP/1.0 body that ends at the close) is
    /// not failed: its held parts still go to the sink, and its end finishes the exchange
    /// without reusing the connection.
    mutating func channelClosed() -> Action {
        if case .exchange(var exchange) = self.state, exchange.held.last == .end {
            exchange.keepsAlive = false
            exchange.isReadHeld = false
            self.state = .exchange(exchange)
            return .none
        }
        return self.closing()
    }

    /// The handler closes the connection itself (a cancel): the exchange under way fails,
    /// whatever of its answer arrived.
    mutating func closing() -> Action {
        let action = self.exchangeFailed()
        self.state = .closed
        return action
    }

    /// What to do with a part of `kind` whose turn it is (`received`: the one just received,
    /// else the first held).
    private mutating func next(_ kind: PartKind, _ exchange: Exchange, received: Bool) -> Action {
        var exchange = exchange
        switch kind {
        case .head(let keepsAlive):
            exchange.keepsAlive = keepsAlive
        case .body:
            break
        case .end:
            self.completedExchanges += 1
            // Parts after the end: an answer nobody asked for follows; the connection is not
            // trusted with another request.
            let reuse = exchange.keepsAlive && exchange.held.isEmpty
            self.state = reuse ? .idle : .closed
            return .finishExchange(reuse: reuse, thenRead: reuse && exchange.isReadHeld)
        }
        exchange.isSinkBusy = true
        self.state = .exchange(exchange)
        return received ? .deliverReceived : .deliverFirstHeld
    }
}
