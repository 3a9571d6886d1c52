// The download tool of the seed articles ("使用 NSTransferSession 开发一个支持后台下载和断点续传的下载工具"),
// in today's Swift: a TaskManager with a background session, a persisted task list, progress,
// pause with resume data, continuation, and finished files moved to a destination.
import Haul

struct DownloadRecord: Codable {
    var url: URL
    var taskIdentifier: Int
    var finished: Bool
    var resumeData: Data?
}

final class TaskManager: NSObject, TransferSessionDownloadDelegate {
    static let shared = TaskManager()

    private var session: TransferSession!
    private var records: [DownloadRecord] = []
    private let listFile = FileManager.default.temporaryDirectory.appendingPathComponent("tasks.json")
    var progressHandler: ((Int, Double) -> Void)?
    var backgroundCompletionHandler: (() -> Void)?

    override init() {
        super.init()
        let config = TransferSessionConfiguration.background(withIdentifier: "downloadSession")
        config.sessionSendsLaunchEvents = true
        config.isDiscretionary = false
        self.session = TransferSession(configuration: config, delegate: self, delegateQueue: OperationQueue.main)
        if let data = try? Data(contentsOf: listFile) {
            records = (try? JSONDecoder().decode([DownloadRecord].self, from: data)) ?? []
        }
    }

    private func save() {
        if let data = try? JSONEncoder().encode(records) { try? data.write(to: listFile) }
    }

    func newTask(_ url: URL) {
        let downloadTask = session.downloadTask(with: url)
        downloadTask.resume()
        records.append(DownloadRecord(url: url, taskIdentifier: downloadTask.taskIdentifier, finished: false))
        save()
    }

    func unFinishedTask() -> [DownloadRecord] { records.filter { !$0.finished } }
    func finishedTask() -> [DownloadRecord] { records.filter { $0.finished } }

    func pause(_ taskIdentifier: Int) {
        session.getTasksWithCompletionHandler { _, _, downloadTasks in
            for task in downloadTasks where task.taskIdentifier == taskIdentifier {
                task.cancel(byProducingResumeData: { resumeData in
                    if let index = self.records.firstIndex(where: { $0.taskIdentifier == taskIdentifier }) {
                        self.records[index].resumeData = resumeData
                        self.save()
                    }
                })
            }
        }
    }

    func resume(_ taskIdentifier: Int) {
        guard let index = records.firstIndex(where: { $0.taskIdentifier == taskIdentifier }) else { return }
        let task: TransferSessionDownloadTask
        if let resumeData = records[index].resumeData {
            task = session.downloadTask(withResumeData: resumeData)
        } else {
            task = session.downloadTask(with: records[index].url)
        }
        records[index].taskIdentifier = task.taskIdentifier
        records[index].resumeData = nil
        save()
        task.resume()
    }

    func urlSession(_ session: TransferSession, downloadTask: TransferSessionDownloadTask, didFinishDownloadingTo location: URL) {
        let name = downloadTask.originalRequest?.url?.lastPathComponent ?? "download"
        let destination = FileManager.default.temporaryDirectory.appendingPathComponent(name)
        try? FileManager.default.removeItem(at: destination)
        try? FileManager.default.moveItem(at: location, to: destination)
        if let index = records.firstIndex(where: { $0.taskIdentifier == downloadTask.taskIdentifier }) {
            records[index].finished = true
            save()
        }
    }

    func urlSession(_ session: TransferSession, downloadTask: TransferSessionDownloadTask, didResumeAtOffset fileOffset: Int64, expectedTotalBytes: Int64) {
        print("resumed \(downloadTask.taskIdentifier) at \(fileOffset)")
    }

    func urlSession(_ session: TransferSession, downloadTask: TransferSessionDownloadTask, didWriteData bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        guard totalBytesExpectedToWrite != TransferSessionTransferSizeUnknown else { return }
        progressHandler?(downloadTask.taskIdentifier, Double(totalBytesWritten) / Double(totalBytesExpectedToWrite))
    }

    func urlSession(_ session: TransferSession, task: TransferSessionTask, didCompleteWithError error: Error?) {
        guard let error = error as NSError? else { return }
        if let resumeData = error.userInfo[TransferSessionDownloadTaskResumeData] as? Data,
           let index = records.firstIndex(where: { $0.taskIdentifier == task.taskIdentifier }) {
            records[index].resumeData = resumeData
            save()
        }
    }

    func urlSessionDidFinishEvents(forBackgroundTransferSession session: TransferSession) {
        DispatchQueue.main.async {
            self.backgroundCompletionHandler?()
            self.backgroundCompletionHandler = nil
        }
    }
}
