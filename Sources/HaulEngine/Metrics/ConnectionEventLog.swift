import Foundation
import Logging
import Synchronization

/// Learns when each connection of one HTTP client's pool was opened and established, from the
/// pool's trace log (AsyncHTTPClient has no other way to tell). One per client.
package final class ConnectionEventLog: Sendable {
    package struct Times: Sendable {
        package var opened: Date
        package var established: Date?
    }

    private struct State {
        var connections: [String: Times] = [:]
        var order: [String] = []
    }

    /// Connections remembered; older ones are forgotten (their requests are long done).
    private static let capacity = 512
    private let state = Mutex(State())

    package init() {}

    /// The logger to give the client as its background-activity logger.
    package var logger: Logger {
        Logger(label: "haul.connections") { _ in
            ConnectionIDLogHandler(sink: { message, id in
                if let id { self.record(message, connection: id, at: Date()) }
            }, logLevel: .trace)
        }
    }

    package func times(ofConnection id: String) -> Times? {
        self.state.withLock { $0.connections[id] }
    }

    /// The first connection opened within `start...end`, if any.
    package func connectionOpened(from start: Date, to end: Date) -> Times? {
        self.state.withLock { state in
            for id in state.order {
                if let times = state.connections[id], times.opened >= start, times.opened <= end { return times }
            }
            return nil
        }
    }

    private func record(_ message: String, connection id: String, at date: Date) {
        self.state.withLock { state in
            switch message {
            case "Opening fresh connection":
                state.connections[id] = Times(opened: date)
                state.order.append(id)
                if state.order.count > Self.capacity {
                    state.connections[state.order.removeFirst()] = nil
                }
            case "successfully created connection":
                state.connections[id]?.established = date
            default:
                break
            }
        }
    }
}

/// Hands AsyncHTTPClient's log messages, with the connection id they concern, to `sink`.
private struct ConnectionIDLogHandler: LogHandler {
    let sink: @Sendable (_ message: String, _ connectionID: String?) -> Void
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?
    var logLevel: Logger.Level

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.metadata[key] }
        set { self.metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let id = event.metadata?["ahc-connection-id"] ?? self.metadata["ahc-connection-id"]
        self.sink(event.message.description, id.map { "\($0)" })
    }
}

/// Catches, for one request, the moment AsyncHTTPClient put it on a connection and which one.
package final class ExchangeLogProbe: Sendable {
    private let state = Mutex<(scheduled: Date?, connection: String?)>((nil, nil))

    package init() {}

    package var logger: Logger {
        Logger(label: "haul.exchange") { _ in
            ConnectionIDLogHandler(sink: { message, id in
                if message == "Request was scheduled on connection" { self.scheduled(on: id, at: Date()) }
            }, logLevel: .debug)
        }
    }

    package var scheduled: Date? { self.state.withLock { $0.scheduled } }
    package var connection: String? { self.state.withLock { $0.connection } }

    private func scheduled(on connection: String?, at date: Date) {
        self.state.withLock { $0 = (date, connection) }
    }
}
