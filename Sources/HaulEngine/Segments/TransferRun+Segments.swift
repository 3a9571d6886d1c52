import AsyncHTTPClient
import Foundation
import HaulCore
import NIOCore
import NIOSSL

extension TransferRun {
    /// A ``SegmentGroup`` for the body the run's exchange is about to write into the file, when
    /// the engine may use several connections per download and the response allows it: a GET
    /// answered `200`/`206` with a strong validator and byte ranges, of a known identity-encoded
    /// length, with at least two segments' worth of bytes missing. `nil` otherwise (one
    /// connection, as before).
    func makeSegmentGroup(response: ResponseInfo, request: TransferRequest, fileOffset: Int64, path: String, tlsConfiguration: TLSConfiguration?) -> SegmentGroup? {
        let configuration = self.engine.configuration
        let budget = self.maximumConnections ?? configuration.maximumConnectionsPerDownload
        guard budget > 1 || !self.mirrors.isEmpty, request.method.caseInsensitiveEquals("GET") else { return nil }
        let entity = self.state.withLock { state in (state.machine.entity, state.machine.expectedTotal) }
        guard let (validators, isResumable, segments) = entity.0, isResumable, let length = entity.1 else { return nil }
        var done = segments ?? ByteRangeSet()
        done.insert(0..<fileOffset)
        // The cheap test first: most small files stop here, before their headers are read again.
        guard length - done.byteCount >= 2 * configuration.minimumSegmentBytes,
            RangeResumeRules.contentLength(of: response.headers) != nil || response.statusCode == 206,
            validators.ifRangeValue != nil
        else { return nil }
        let dropped = self.state.withLock { $0.droppedMirrors }
        let group = SegmentGroup(
            run: self,
            url: response.url,
            requestHeaders: request.headers,
            validators: validators,
            length: length,
            done: done,
            primaryOffset: fileOffset,
            path: path,
            budget: budget,
            minimumSegment: configuration.minimumSegmentBytes,
            tlsConfiguration: tlsConfiguration,
            mirrors: self.mirrors.map { ($0, dropped[$0]) },
            mirrorPolicy: self.mirrorPolicy
        )
        self.state.withLock { $0.segments = group }
        return group
    }

    /// A mirror may not contribute to this run any more (told to the observer once).
    func mirrorDropped(_ url: URL, reason: String) {
        let first = self.state.withLock { state -> Bool in
            guard state.droppedMirrors[url] == nil else { return false }
            state.droppedMirrors[url] = reason
            return true
        }
        if first { self.observer.transferRun(self, droppedMirror: url, reason: reason) }
    }

    /// Ends the run's current exchange without stopping the run (its lane is done).
    func cancelCurrentExchange() {
        self.state.withLock { $0.currentTask }?.cancel()
    }

    /// The run's exchange ended; waits for the other lanes and says how the download ended.
    func finishSegments(_ group: SegmentGroup, result: ExchangeResult) async -> ExchangeResult {
        let laneDone: Bool
        switch result {
        case .completed: laneDone = true
        default: laneDone = false
        }
        if self.state.withLock({ $0.stopReason != nil }) { group.stop() }
        try? await self.eventLoop.flatSubmit {
            group.primaryEnded(laneDone: laneDone)
            return group.finished()
        }.get()
        let reports = group.sourceReports
        self.state.withLock { $0.lastSourceReports = reports }
        if let changed = group.entityChanged {
            // A lane was answered with another entity (or a length that is not this one's).
            // Every byte in the map is of the entity the run validated, so the run asks again
            // with it: `If-Range` decides whether the server still has that entity (continue
            // with the map) or not (200: start over). Twice at most, then it fails.
            let restart = self.state.withLock { state -> Bool in
                guard state.stopReason == nil, state.segmentRestarts < 2 else { return false }
                state.segmentRestarts += 1
                state.machine = DownloadStateMachine(method: self.initialRequest.method, resume: group.mapPoint)
                state.segments = nil
                return true
            }
            return restart ? .requestAgainWithoutRange : .failed(changed)
        }
        if group.isComplete, let response = self.state.withLock({ $0.lastResponse }) {
            return .completed(response, total: group.length)
        }
        if case .failed = result, !group.primaryLaneDone { return result }
        let missing = group.length - group.doneBytes
        return .failed(
            URLError(
                .networkConnectionLost,
                userInfo: [NSLocalizedDescriptionKey: "\(missing) bytes are still missing\(group.refusal.map { ": \($0)" } ?? "")"]
            )
        )
    }
}
