// The README's URLSession example, as written for Apple's platforms.
import Foundation

final class Downloader: NSObject, URLSessionDownloadDelegate {
    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask,
                    didWriteData bytesWritten: Int64, totalBytesWritten: Int64,
                    totalBytesExpectedToWrite: Int64) {
        print("\(totalBytesWritten) / \(totalBytesExpectedToWrite)")
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask,
                    didFinishDownloadingTo location: URL) {
        // Move the file before returning: it is deleted afterwards.
        try? FileManager.default.moveItem(at: location, to: URL(fileURLWithPath: "big.iso"))
    }

    func urlSession(_ session: URLSession, task: URLSessionTask,
                    didCompleteWithError error: (any Error)?) {
        if let error = error as? URLError,
           let resumeData = error.userInfo[NSURLSessionDownloadTaskResumeData] as? Data {
            // The connection dropped: continue later from the bytes already on disk.
            session.downloadTask(withResumeData: resumeData).resume()
        }
    }
}

func readmeExample(url: URL) {
    let configuration = URLSessionConfiguration.default
    configuration.timeoutIntervalForRequest = 30
    let session = URLSession(configuration: configuration, delegate: Downloader(), delegateQueue: nil)

    let task = session.downloadTask(with: url)
    task.resume()

    // Pause, keeping what was downloaded…
    task.cancel { resumeData in
        // …and later continue exactly where it stopped.
        if let resumeData { session.downloadTask(withResumeData: resumeData).resume() }
    }
}

func readmeAsyncExample(url: URL, apiURL: URL) async throws {
    let (location, response) = try await URLSession.shared.download(from: url)
    let (data, _) = try await URLSession.shared.data(for: URLRequest(url: apiURL))
    print(location, response, data.count)

    let session = URLSession(configuration: .default)
    do {
        _ = try await session.download(from: url)
    } catch let error as URLError {
        if let resumeData = error.userInfo[NSURLSessionDownloadTaskResumeData] as? Data {
            _ = try await session.download(resumeFrom: resumeData)
        }
    }
}
