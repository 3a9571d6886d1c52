// Delegate patterns from Apple's TransferSession documentation ("Handling an authentication
// challenge", "Fetching website data into memory", redirects, uploads, metrics), as written
// for Apple's platforms.
import Haul

final class PatternDelegate: NSObject, TransferSessionDataDelegate, TransferSessionDownloadDelegate {
    private var receivedData: Data?
    let credential = URLCredential(user: "user", password: "secret", persistence: .forSession)

    // Authentication: answer Basic/Digest with a credential, everything else by default.
    func urlSession(_ session: TransferSession, task: TransferSessionTask,
                    didReceive challenge: URLAuthenticationChallenge,
                    completionHandler: @escaping (TransferSession.AuthChallengeDisposition, URLCredential?) -> Void) {
        let method = challenge.protectionSpace.authenticationMethod
        guard method == NSURLAuthenticationMethodHTTPBasic || method == NSURLAuthenticationMethodHTTPDigest else {
            completionHandler(.performDefaultHandling, nil)
            return
        }
        if challenge.previousFailureCount > 0 {
            completionHandler(.cancelAuthenticationChallenge, nil)
        } else {
            completionHandler(.useCredential, credential)
        }
    }

    // Session-level challenges (server trust).
    func urlSession(_ session: TransferSession, didReceive challenge: URLAuthenticationChallenge,
                    completionHandler: @escaping (TransferSession.AuthChallengeDisposition, URLCredential?) -> Void) {
        completionHandler(.performDefaultHandling, nil)
    }

    // "Fetching website data into memory": check the response, then collect the body.
    func urlSession(_ session: TransferSession, dataTask: TransferSessionDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping (TransferSession.ResponseDisposition) -> Void) {
        guard let response = response as? HTTPURLResponse,
              (200...299).contains(response.statusCode),
              let mimeType = response.mimeType,
              mimeType == "text/html" else {
            completionHandler(.cancel)
            return
        }
        receivedData = Data()
        completionHandler(.allow)
    }

    func urlSession(_ session: TransferSession, dataTask: TransferSessionDataTask, didReceive data: Data) {
        receivedData?.append(data)
    }

    func urlSession(_ session: TransferSession, dataTask: TransferSessionDataTask, didBecome downloadTask: TransferSessionDownloadTask) {
        print("became \(downloadTask.taskIdentifier)")
    }

    func urlSession(_ session: TransferSession, task: TransferSessionTask, didCompleteWithError error: Error?) {
        if let error = error {
            print("failed: \(error.localizedDescription)")
        } else if let receivedData, let string = String(data: receivedData, encoding: .utf8) {
            print(string.count)
        }
    }

    // Redirects: follow only to https.
    func urlSession(_ session: TransferSession, task: TransferSessionTask,
                    willPerformHTTPRedirection response: HTTPURLResponse, newRequest request: URLRequest,
                    completionHandler: @escaping (URLRequest?) -> Void) {
        completionHandler(request.url?.scheme == "https" ? request : nil)
    }

    // Upload progress.
    func urlSession(_ session: TransferSession, task: TransferSessionTask, didSendBodyData bytesSent: Int64,
                    totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        let fraction = totalBytesExpectedToSend > 0 ? Double(totalBytesSent) / Double(totalBytesExpectedToSend) : 0
        print(fraction)
    }

    // A streamed upload asks for its body again.
    func urlSession(_ session: TransferSession, task: TransferSessionTask,
                    needNewBodyStream completionHandler: @escaping (InputStream?) -> Void) {
        completionHandler(InputStream(data: Data("body".utf8)))
    }

    // Metrics.
    func urlSession(_ session: TransferSession, task: TransferSessionTask, didFinishCollecting metrics: TransferSessionTaskMetrics) {
        for transaction in metrics.transactionMetrics {
            print(transaction.networkProtocolName ?? "-", transaction.isReusedConnection,
                  transaction.fetchStartDate ?? Date(), transaction.responseEndDate ?? Date())
        }
        print(metrics.taskInterval.duration, metrics.redirectCount)
    }

    // Downloads.
    func urlSession(_ session: TransferSession, downloadTask: TransferSessionDownloadTask, didFinishDownloadingTo location: URL) {
        let destination = FileManager.default.temporaryDirectory.appendingPathComponent(location.lastPathComponent)
        try? FileManager.default.moveItem(at: location, to: destination)
    }

    func urlSession(_ session: TransferSession, downloadTask: TransferSessionDownloadTask,
                    didResumeAtOffset fileOffset: Int64, expectedTotalBytes: Int64) {
        print("resumed at \(fileOffset) of \(expectedTotalBytes)")
    }

    func urlSession(_ session: TransferSession, didBecomeInvalidWithError error: Error?) {
        print("invalid: \(String(describing: error))")
    }
}

func patternTasks(url: URL) {
    let session = TransferSession(configuration: .ephemeral, delegate: PatternDelegate(), delegateQueue: OperationQueue())
    var request = URLRequest(url: url)
    request.httpMethod = "POST"
    request.setValue("application/json", forHTTPHeaderField: "Content-Type")
    let upload = session.uploadTask(with: request, from: Data("{}".utf8))
    upload.priority = TransferSessionTask.highPriority
    upload.resume()
    let data = session.dataTask(with: url)
    data.resume()
    if data.state == .running { data.suspend() }
    let state: TransferSessionTask.State = data.state
    print(state == .suspended)
    session.getAllTasks { tasks in print(tasks.count) }
    session.finishTasksAndInvalidate()
}
