// The README's TransferSession example, as written for Apple's platforms.
import Haul

final class Downloader: NSObject, TransferSessionDownloadDelegate {
    func urlSession(_ session: TransferSession, downloadTask: TransferSessionDownloadTask,
                    didWriteData bytesWritten: Int64, totalBytesWritten: Int64,
                    totalBytesExpectedToWrite: Int64) {
        print("\(totalBytesWritten) / \(totalBytesExpectedToWrite)")
    }

    func urlSession(_ session: TransferSession, downloadTask: TransferSessionDownloadTask,
                    didFinishDownloadingTo location: URL) {
        // Move the file before returning: it is deleted afterwards.
        try? FileManager.default.moveItem(at: location, to: URL(fileURLWithPath: "big.iso"))
    }

    func urlSession(_ session: TransferSession, task: TransferSessionTask,
                    didCompleteWithError error: (any Error)?) {
        if let error = error as? URLError,
           let resumeData = error.userInfo[TransferSessionDownloadTaskResumeData] as? Data {
            // The connection dropped: continue later from the bytes already on disk.
            session.downloadTask(withResumeData: resumeData).resume()
        }
    }
}

func readmeExample(url: URL) {
    let configuration = TransferSessionConfiguration.default
    configuration.timeoutIntervalForRequest = 30
    let session = TransferSession(configuration: configuration, delegate: Downloader(), delegateQueue: nil)

    let task = session.downloadTask(with: url)
    task.resume()

    // Pause, keeping what was downloaded…
    task.cancel { resumeData in
        // …and later continue exactly where it stopped.
        if let resumeData { session.downloadTask(withResumeData: resumeData).resume() }
    }
}

func readmeAsyncExample(url: URL, apiURL: URL) async throws {
    let (location, response) = try await TransferSession.shared.download(from: url)
    let (data, _) = try await TransferSession.shared.data(for: URLRequest(url: apiURL))
    print(location, response, data.count)

    let session = TransferSession(configuration: .default)
    do {
        _ = try await session.download(from: url)
    } catch let error as URLError {
        if let resumeData = error.userInfo[TransferSessionDownloadTaskResumeData] as? Data {
            _ = try await session.download(resumeFrom: resumeData)
        }
    }
}
