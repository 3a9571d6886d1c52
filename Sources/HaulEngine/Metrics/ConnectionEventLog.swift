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
        Logger(label: "haul.connections") { _ in ConnectionLogHandler(log: self) }
    }

    package func times(ofConnection id: String) -> Times? {
        self.state.withLock { $0.connections[id] }
    }

    fileprivate func record(_ message: String, connection id: String, at date: Date) {
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

private struct ConnectionLogHandler: LogHandler {
    let log: ConnectionEventLog
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.metadata[key] }
        set { self.metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        guard let id = event.metadata?["ahc-connection-id"] ?? self.metadata["ahc-connection-id"] else { return }
        self.log.record(event.message.description, connection: "\(id)", at: Date())
    }
}

/// Catches, for one request, the moment AsyncHTTPClient put it on a connection and which one.
package final class ExchangeLogProbe: Sendable {
    private let state = Mutex<(scheduled: Date?, connection: String?)>((nil, nil))

    package init() {}

    package var logger: Logger {
        var logger = Logger(label: "haul.exchange") { _ in ExchangeLogHandler(probe: self) }
        logger.logLevel = .debug
        return logger
    }

    package var scheduled: Date? { self.state.withLock { $0.scheduled } }
    package var connection: String? { self.state.withLock { $0.connection } }

    fileprivate func scheduled(on connection: String?, at date: Date) {
        self.state.withLock { $0 = (date, connection) }
    }
}

private struct ExchangeLogHandler: LogHandler {
    let probe: ExchangeLogProbe
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?
    var logLevel: Logger.Level = .debug

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.metadata[key] }
        set { self.metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        guard event.message.description == "Request was scheduled on connection" else { return }
        let id = event.metadata?["ahc-connection-id"] ?? self.metadata["ahc-connection-id"]
        self.probe.scheduled(on: id.map { "\($0)" }, at: Date())
    }
}
