import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Session-level events, as `URLSessionDelegate`.
///
/// All delegate methods of one session are called one at a time on the session's delegate
/// queue, in the order the events happened. Delegates are held strongly until the session is
/// invalidated, as URLSession does.
public protocol TransferSessionDelegate: AnyObject {
    /// The session became invalid: after ``TransferSession/finishTasksAndInvalidate()`` once its
    /// last task completed, or after ``TransferSession/invalidateAndCancel()``. Called once,
    /// last of all the session's delegate calls; `error` is `nil` for an explicit invalidation.
    func urlSession(_ session: TransferSession, didBecomeInvalidWithError error: (any Error)?)

    /// A background session delivered every event that was waiting for it when it connected
    /// to `hauld` (the Linux form of `handleEventsForBackgroundURLSession`'s completion).
    /// Called once per connection, after those events' `didFinishDownloadingTo` and
    /// `didCompleteWithError` calls.
    func urlSessionDidFinishEvents(forBackgroundURLSession session: TransferSession)

    /// A server's certificate chain is to be judged (``TransferAuthenticationMethodServerTrust``;
    /// the chain is `challenge.protectionSpace.transferServerTrust`). Called once per https
    /// host and port per session, before the first request to it; the request waits for
    /// `completionHandler`, which must be called once.
    ///
    /// - `.useCredential` (any credential, or `nil`: Linux has no `URLCredential(trust:)`):
    ///   trust this chain. Requests to the server then trust exactly it (pinning), unless it
    ///   also passes default verification.
    /// - `.performDefaultHandling`, `.rejectProtectionSpace`: default verification (the
    ///   system's trust roots and the host name); an untrusted server fails the request with
    ///   `URLError(.serverCertificateUntrusted)`. The default implementation answers this.
    /// - `.cancelAuthenticationChallenge`: requests fail with `URLError(.cancelled)`, and the
    ///   next request to the server asks again.
    func urlSession(
        _ session: TransferSession,
        didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    )
}

/// Task-level events, as `URLSessionTaskDelegate`.
public protocol TransferSessionTaskDelegate: TransferSessionDelegate {
    /// A redirect is about to be followed. Call `completionHandler` once, with the request to
    /// send (possibly modified) or `nil` to refuse: the task then completes with the redirect
    /// response itself. The task waits until it is called. Called once per redirect, before
    /// any other call for the redirected request.
    func urlSession(
        _ session: TransferSession,
        task: TransferSessionTask,
        willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest,
        completionHandler: @escaping @Sendable (URLRequest?) -> Void
    )

    /// The server asked for credentials (401 with a Basic or Digest challenge). Call
    /// `completionHandler` once; the task waits. Called once per challenge, Digest before
    /// Basic when a server offers both; `previousFailureCount` counts refused attempts. The
    /// default implementation answers `.performDefaultHandling` (the credential storage's
    /// default credential for the protection space, else the URL's user and password, once).
    func urlSession(
        _ session: TransferSession,
        task: TransferSessionTask,
        didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    )

    /// A streamed upload (``TransferSession/uploadTask(withStreamedRequest:)``) needs a new
    /// stream with the whole body: for its first sending when the request has no
    /// `httpBodyStream`, and each time the body must be sent again (a 307/308 redirect, an
    /// authentication retry). Call `completionHandler` once; `nil` fails the task with
    /// `URLError(.requestBodyStreamExhausted)`. The default implementation gives `nil`.
    func urlSession(
        _ session: TransferSession,
        task: TransferSessionTask,
        needNewBodyStream completionHandler: @escaping @Sendable (InputStream?) -> Void
    )

    /// The task's metrics are complete. Called once per in-process task, right before
    /// `didCompleteWithError` (also for tasks with a completion handler).
    func urlSession(_ session: TransferSession, task: TransferSessionTask, didFinishCollecting metrics: TransferSessionTaskMetrics)

    /// Request body bytes were sent (uploads, and data tasks with a body): once per chunk of at
    /// most 256 KiB, in order, before the response's callbacks. `totalBytesSent` starts over
    /// when the body is sent again (a 307/308 redirect).
    func urlSession(
        _ session: TransferSession,
        task: TransferSessionTask,
        didSendBodyData bytesSent: Int64,
        totalBytesSent: Int64,
        totalBytesExpectedToSend: Int64
    )

    /// The task completed: with `nil` on success (any HTTP status counts as success, as in
    /// URLSession), or with a `URLError`. Called exactly once per task, as its last call.
    /// A download that can continue carries resume data in the error's `userInfo` under
    /// ``TransferSessionDownloadTaskResumeData``.
    func urlSession(_ session: TransferSession, task: TransferSessionTask, didCompleteWithError error: (any Error)?)
}

/// Data-task events, as `URLSessionDataDelegate`.
public protocol TransferSessionDataDelegate: TransferSessionTaskDelegate {
    /// The final response head arrived. Call `completionHandler` once with `.allow` to receive
    /// the body or `.cancel` to cancel the task; no data is delivered before it is called.
    /// Called at most once per task, before any `didReceive data`.
    func urlSession(
        _ session: TransferSession,
        dataTask: TransferSessionDataTask,
        didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    )

    /// Body bytes arrived. Called zero or more times, in order; the pieces concatenated are
    /// the body.
    func urlSession(_ session: TransferSession, dataTask: TransferSessionDataTask, didReceive data: Data)

    /// The data task became a download (`didReceive response` answered `.becomeDownload`).
    /// Called once, before any call for `downloadTask`; the data task gets no further calls,
    /// and the download continues with `didWriteData`, `didFinishDownloadingTo` and
    /// `didCompleteWithError`.
    func urlSession(_ session: TransferSession, dataTask: TransferSessionDataTask, didBecome downloadTask: TransferSessionDownloadTask)

    /// The response is about to be stored in the session's ``TransferURLCache``. Call
    /// `completionHandler` once with the response to store (possibly another one, or with
    /// another `storagePolicy`) or `nil` to store nothing. Called at most once per task, after
    /// the last `didReceive data` and before `didCompleteWithError`, only for responses HTTP
    /// allows to be stored; the task waits. Not called for tasks with a completion handler
    /// (their responses are stored as they are).
    func urlSession(
        _ session: TransferSession,
        dataTask: TransferSessionDataTask,
        willCacheResponse proposedResponse: CachedURLResponse,
        completionHandler: @escaping @Sendable (CachedURLResponse?) -> Void
    )
}

/// Download-task events, as `URLSessionDownloadDelegate`.
public protocol TransferSessionDownloadDelegate: TransferSessionTaskDelegate {
    /// The download finished and its file is at `location`. Move or open the file before
    /// returning: Haul deletes it afterwards. Called once per successful download, before
    /// `didCompleteWithError(nil)`.
    func urlSession(_ session: TransferSession, downloadTask: TransferSessionDownloadTask, didFinishDownloadingTo location: URL)

    /// Bytes were written to the download's file. Called zero or more times between
    /// `didResumeAtOffset` (if any) and `didFinishDownloadingTo`; consecutive network reads
    /// may be reported together, so `bytesWritten` is the sum since the previous call.
    /// `totalBytesExpectedToWrite` is `NSURLSessionTransferSizeUnknown` (-1) when unknown.
    func urlSession(
        _ session: TransferSession,
        downloadTask: TransferSessionDownloadTask,
        didWriteData bytesWritten: Int64,
        totalBytesWritten: Int64,
        totalBytesExpectedToWrite: Int64
    )

    /// A resumed download continues at `fileOffset` (0 when the server sent the whole entity
    /// again and the earlier bytes were discarded). Called once per resumed request, before
    /// its `didWriteData` calls.
    func urlSession(
        _ session: TransferSession,
        downloadTask: TransferSessionDownloadTask,
        didResumeAtOffset fileOffset: Int64,
        expectedTotalBytes: Int64
    )
}

extension TransferSessionDelegate {
    public func urlSession(_ session: TransferSession, didBecomeInvalidWithError error: (any Error)?) {}

    public func urlSessionDidFinishEvents(forBackgroundURLSession session: TransferSession) {}

    public func urlSession(
        _ session: TransferSession,
        didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        completionHandler(.performDefaultHandling, nil)
    }
}

extension TransferSessionTaskDelegate {
    public func urlSession(
        _ session: TransferSession,
        task: TransferSessionTask,
        willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest,
        completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        completionHandler(request)
    }

    public func urlSession(
        _ session: TransferSession,
        task: TransferSessionTask,
        didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        completionHandler(.performDefaultHandling, nil)
    }

    public func urlSession(
        _ session: TransferSession,
        task: TransferSessionTask,
        didSendBodyData bytesSent: Int64,
        totalBytesSent: Int64,
        totalBytesExpectedToSend: Int64
    ) {}

    public func urlSession(_ session: TransferSession, task: TransferSessionTask, didCompleteWithError error: (any Error)?) {}

    public func urlSession(_ session: TransferSession, task: TransferSessionTask, didFinishCollecting metrics: TransferSessionTaskMetrics) {}

    public func urlSession(
        _ session: TransferSession,
        task: TransferSessionTask,
        needNewBodyStream completionHandler: @escaping @Sendable (InputStream?) -> Void
    ) {
        completionHandler(nil)
    }
}

extension TransferSessionDataDelegate {
    public func urlSession(
        _ session: TransferSession,
        dataTask: TransferSessionDataTask,
        didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        completionHandler(.allow)
    }

    public func urlSession(_ session: TransferSession, dataTask: TransferSessionDataTask, didReceive data: Data) {}

    public func urlSession(_ session: TransferSession, dataTask: TransferSessionDataTask, didBecome downloadTask: TransferSessionDownloadTask) {}

    public func urlSession(
        _ session: TransferSession,
        dataTask: TransferSessionDataTask,
        willCacheResponse proposedResponse: CachedURLResponse,
        completionHandler: @escaping @Sendable (CachedURLResponse?) -> Void
    ) {
        completionHandler(proposedResponse)
    }
}

extension TransferSessionDownloadDelegate {
    public func urlSession(
        _ session: TransferSession,
        downloadTask: TransferSessionDownloadTask,
        didWriteData bytesWritten: Int64,
        totalBytesWritten: Int64,
        totalBytesExpectedToWrite: Int64
    ) {}

    public func urlSession(
        _ session: TransferSession,
        downloadTask: TransferSessionDownloadTask,
        didResumeAtOffset fileOffset: Int64,
        expectedTotalBytes: Int64
    ) {}
}

/// The `userInfo` key of a failed or cancelled download's error under which its resume data
/// is found; the same string Foundation uses for `NSURLSessionDownloadTaskResumeData`.
public let TransferSessionDownloadTaskResumeData = "NSURLSessionDownloadTaskResumeData"

/// `totalBytesExpectedToWrite` when the length is unknown, as `NSURLSessionTransferSizeUnknown`.
public let TransferSessionTransferSizeUnknown: Int64 = -1
