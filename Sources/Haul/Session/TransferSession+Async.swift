import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension TransferSession {
    /// Downloads `request` to a file and returns its URL and the response. The file is yours:
    /// move or delete it. Cancelling the calling task cancels the download; the thrown
    /// `URLError(.cancelled)` then carries resume data when the download can continue.
    public func download(for request: URLRequest) async throws -> (URL, URLResponse) {
        try await self.awaitDownload { self.makeDownloadTask(request: request, handsOverFile: true, completionHandler: $0) }
    }

    /// Downloads `url`; see ``download(for:)``.
    public func download(from url: URL) async throws -> (URL, URLResponse) {
        try await self.download(for: URLRequest(url: url))
    }

    /// Continues a download from resume data; see ``download(for:)``.
    public func download(resumeFrom resumeData: Data) async throws -> (URL, URLResponse) {
        try await self.awaitDownload {
            self.makeDownloadTask(resumeData: resumeData, handsOverFile: true, completionHandler: $0)
        }
    }

    /// Loads `request` and returns the body and the response.
    public func data(for request: URLRequest) async throws -> (Data, URLResponse) {
        try await self.awaitDataTask { self.makeDataTask(request: request, completionHandler: $0) }
    }

    /// Loads `url`; see ``data(for:)``.
    public func data(from url: URL) async throws -> (Data, URLResponse) {
        try await self.data(for: URLRequest(url: url))
    }

    /// Sends `bodyData` with `request` and returns the response body and the response.
    public func upload(for request: URLRequest, from bodyData: Data) async throws -> (Data, URLResponse) {
        var request = request
        if request.httpMethod == nil || request.httpMethod == "GET" { request.httpMethod = "POST" }
        request.httpBody = bodyData
        return try await self.data(for: request)
    }

    /// Sends the file at `fileURL` with `request` and returns the response body and response.
    public func upload(for request: URLRequest, fromFile fileURL: URL) async throws -> (Data, URLResponse) {
        try await self.awaitDataTask { self.makeUploadTask(request: request, fileURL: fileURL, completionHandler: $0) }
    }

    /// Runs the task `makeTask` creates with a completion handler, and returns its result;
    /// cancelling the calling task cancels it.
    private func awaitDataTask(
        _ makeTask: (@escaping TransferSessionDataTask.CompletionHandler) -> TransferSessionDataTask
    ) async throws -> (Data, URLResponse) {
        let box = TaskBox<TransferSessionDataTask>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let task = makeTask { data, response, error in
                    if let error {
                        continuation.resume(throwing: error)
                    } else {
                        continuation.resume(returning: (data ?? Data(), response!))
                    }
                }
                box.set(task)
                task.resume()
            }
        } onCancel: {
            box.task?.cancel()
        }
    }

    private func awaitDownload(
        _ makeTask: (@escaping TransferSessionDownloadTask.CompletionHandler) -> TransferSessionDownloadTask
    ) async throws -> (URL, URLResponse) {
        let box = TaskBox<TransferSessionDownloadTask>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let task = makeTask { url, response, error in
                    if let error {
                        continuation.resume(throwing: error)
                    } else {
                        continuation.resume(returning: (url!, response!))
                    }
                }
                box.set(task)
                task.resume()
            }
        } onCancel: {
            box.task?.cancel(byProducingResumeData: { _ in })
        }
    }
}

/// Holds a task for a cancellation handler that may run before the task exists.
final class TaskBox<T: TransferSessionTask>: Sendable {
    private let storage = Mutex<T?>(nil)
    func set(_ task: T) { self.storage.withLock { $0 = task } }
    var task: T? { self.storage.withLock { $0 } }
}

import Synchronization
