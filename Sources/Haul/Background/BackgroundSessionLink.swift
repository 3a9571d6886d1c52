import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HaulCore
import HaulDaemonClient
import Synchronization

/// Ties a background ``TransferSession`` to `hauld`: attaches under the session identifier,
/// turns the daemon's events into delegate calls on the session's queue (acknowledging each
/// durable one after its delegate call returned), and reconnects if the daemon restarts.
final class BackgroundSessionLink: Sendable {
    let identifier: String
    private let paths: DaemonPaths
    private let launchCommand: [String]?
    private unowned let session: TransferSession

    private struct State {
        var client: BackgroundDaemonClient?
        /// Durable events already handed to the delegate (a reconnect may resend them).
        var deliveredEvents: Set<Int64> = []
        var isClosed = false
    }

    private let state = Mutex(State())

    init(session: TransferSession, identifier: String, launchCommand: [String]?) {
        self.session = session
        self.identifier = identifier
        self.paths = DaemonPaths.fromEnvironment()
        self.launchCommand = launchCommand
    }

    /// Connects and attaches. Throws when the daemon cannot be reached or refuses the identifier.
    func attach() throws {
        let client = try BackgroundDaemonClient.connect(paths: self.paths)
        client.onEvent { [weak self] event in self?.handle(event) }
        client.onClose { [weak self] in self?.connectionLost() }
        let request = DaemonRequest(.attach(.init(session: self.identifier, launchCommand: self.launchCommand)))
        // Recorded before the attach: the backlog follows its answer at once, and handling it
        // needs the connection to acknowledge events.
        self.state.withLock { $0.client = client }
        let response: DaemonResponse
        do {
            response = try client.call(request)
        } catch {
            self.state.withLock { $0.client = nil }
            client.close()
            throw error
        }
        for snapshot in response.tasks ?? [] {
            let task = self.session.remoteTask(id: snapshot.taskID, url: snapshot.originalURL, isUpload: snapshot.isUpload ?? false)
            task.adoptSnapshot(snapshot)
        }
    }

    /// Sends a request on behalf of a task, blocking until the daemon answered. `command`
    /// is given this session's identifier.
    func call(_ command: (_ session: String) -> DaemonRequest.Command) throws -> DaemonResponse {
        guard let client = self.state.withLock({ $0.client }) else {
            throw BackgroundDaemonClient.Failure(description: "not connected to hauld")
        }
        return try client.call(DaemonRequest(command(self.identifier)))
    }

    /// Stops reconnecting from now on; the connection itself stays until ``close()``.
    func stopReconnecting() {
        self.state.withLock { $0.isClosed = true }
    }

    func close() {
        let client = self.state.withLock { state -> BackgroundDaemonClient? in
            state.isClosed = true
            return state.client
        }
        client?.close()
    }

    private func connectionLost() {
        let shouldReconnect = self.state.withLock { state -> Bool in
            state.client = nil
            return !state.isClosed
        }
        guard shouldReconnect else { return }
        DispatchQueue.global().async {
            var delay = 0.2
            for _ in 0..<30 {
                if self.state.withLock({ $0.isClosed }) { return }
                if (try? self.attach()) != nil { return }
                Thread.sleep(forTimeInterval: delay)
                delay = min(delay * 2, 2)
            }
        }
    }

    // MARK: - Events

    private func handle(_ event: DaemonEvent) {
        let session = self.session
        switch event.kind {
        case .downloadChanged, .downloadRemoved, .settingsChanged:
            return  // download-manager events; a session never subscribes to them
        case .eventsDrained:
            session.enqueueDelegateCall { delegate in delegate?.urlSessionDidFinishEvents(forBackgroundURLSession: session) }
        case .progress:
            guard let id = event.taskID, let task = session.existingRemoteTask(id: id) else { return }
            task.remoteProgress(total: event.bytesOnDisk ?? 0, expected: event.expectedTotal)
        case .resumed:
            guard let id = event.taskID, let task = session.existingRemoteTask(id: id) else { return }
            task.remoteResumed(offset: event.offset ?? 0, expected: event.expectedTotal)
        case .finishedDownloading, .completed:
            guard let id = event.taskID, let eventID = event.eventID else { return }
            let isNew = self.state.withLock { $0.deliveredEvents.insert(eventID).inserted }
            guard isNew else { return }
            let task = session.remoteTask(
                id: id,
                url: event.responseURL ?? event.originalURL ?? URL(string: "http://unknown")!,
                isUpload: event.responseBody != nil
            )
            if let status = event.statusCode, let url = event.responseURL {
                task.setRemoteResponse(status: status, headers: event.responseHeaders ?? HTTPHeaderFields(), url: url)
            }
            let acknowledge: @Sendable () -> Void = { [weak self] in
                _ = try? self?.call { .acknowledge(.init(session: $0, eventID: eventID)) }
            }
            if event.kind == .finishedDownloading, let held = event.heldFilePath {
                task.remoteFinished(heldFile: URL(fileURLWithPath: held), acknowledge: acknowledge)
            } else {
                task.remoteCompleted(error: Self.error(from: event), responseBody: event.responseBody, acknowledge: acknowledge)
            }
        }
    }

    private static func error(from event: DaemonEvent) -> URLError? {
        guard let code = event.errorCode else { return nil }
        var userInfo: [String: Any] = [NSLocalizedDescriptionKey: event.errorMessage ?? "transfer failed"]
        if let url = event.responseURL { userInfo[NSURLErrorFailingURLErrorKey] = url }
        if let data = event.resumeData { userInfo[TransferSessionDownloadTaskResumeData] = data }
        return URLError(URLError.Code(rawValue: code) ?? .unknown, userInfo: userInfo)
    }
}
