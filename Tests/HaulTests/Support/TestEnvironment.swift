import Foundation
import Haul
import HaulTestSupport

/// One test's server, session, delegate and scratch directory, torn down by `finish()`.
struct TestEnvironment {
    let server: FaultInjectingHTTPServer
    let directory: URL
    let delegate: RecordingDelegate
    let session: TransferSession

    static func make(
        configure: (TransferSessionConfiguration) -> Void = { _ in }
    ) async throws -> TestEnvironment {
        let server = try await FaultInjectingHTTPServer.start()
        let directory = try makeTemporaryDirectory()
        let delegate = RecordingDelegate(keepDirectory: directory)
        let configuration = TransferSessionConfiguration.default
        configuration.temporaryDirectory = directory.appendingPathComponent("tmp")
        // No HTTP cache unless a test asks for one: tests count the requests servers receive
        // (and `.shared` would write under the user's ~/.cache).
        configuration.urlCache = nil
        configure(configuration)
        let session = TransferSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
        return TestEnvironment(server: server, directory: directory, delegate: delegate, session: session)
    }

    func finish() async throws {
        self.session.invalidateAndCancel()
        await self.delegate.invalidation()
        try await self.server.shutdown()
        try? FileManager.default.removeItem(at: self.directory)
    }

    /// Files left in the session's in-flight directory.
    var leftoverPartialFiles: [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: self.directory.appendingPathComponent("tmp").path)) ?? []
    }
}

extension RecordingDelegate {
    /// The SHA-256 of the single finished download, failing the test if there is none.
    var finishedDigests: [String] {
        self.events.compactMap { if case .finished(let sha, _) = $0 { sha } else { nil } }
    }

    var resumeOffsets: [Int64] {
        self.events.compactMap { if case .resumed(let offset, _) = $0 { offset } else { nil } }
    }
}

/// Polls `condition` every 10 ms until it holds or `timeout` passes; returns whether it held.
@discardableResult
func waitUntil(timeout: Duration = .seconds(10), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return condition()
}

/// The size of the file at `path`, or `nil` when there is none.
func fileSize(_ path: String) -> Int64? {
    (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.int64Value
}
