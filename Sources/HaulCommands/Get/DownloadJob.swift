import Foundation
import HaulCore
import HaulEngine

/// Where one URL of `haul get` is saved, and its checkpoint files:
/// `NAME.haul-part` (the bytes so far) and `NAME.haul-resume` (Haul resume data naming them).
struct DownloadJob: Sendable {
    let url: URL
    let directory: String
    /// The name the job is known by before the response (from `-o` or the URL).
    let baseName: String
    let explicitOutput: String?
    /// The name the URL suggests (before any number added to keep partial names apart).
    private let urlName: String?

    init(url: URL, options: GetCoordinator.Options, baseName: String? = nil, urlName: String? = nil) {
        self.url = url
        self.urlName = urlName
        if let output = options.outputPath {
            let absolute = (output as NSString).isAbsolutePath
                ? output
                : (FileManager.default.currentDirectoryPath as NSString).appendingPathComponent(output)
            self.explicitOutput = absolute
            self.directory = (absolute as NSString).deletingLastPathComponent
            self.baseName = (absolute as NSString).lastPathComponent
        } else {
            self.explicitOutput = nil
            self.directory = options.directory
            self.baseName = baseName ?? FileNaming.suggestedFilename(contentDisposition: nil, url: url)
        }
    }

    var displayName: String { self.baseName }
    var partialPath: String { FileNaming.path(of: self.baseName + ".haul-part", in: self.directory) }
    var checkpointPath: String { FileNaming.path(of: self.baseName + ".haul-resume", in: self.directory) }

    /// The destination, when a file is already there.
    var existingFinalFile: String? {
        let path = self.explicitOutput ?? FileNaming.path(of: self.baseName, in: self.directory)
        return FileManager.default.fileExists(atPath: path) ? path : nil
    }

    /// The resume data of an earlier run for this URL, if any is usable, continuing at the
    /// partial file's size: after a crash the file holds more than the checkpoint recorded (its
    /// bytes are a prefix of the entity, written in order), after a clean stop exactly as much.
    /// A checkpoint that cannot be used is removed (the download starts over).
    func loadCheckpoint(reporter: ProgressReporter) -> ResumeData? {
        guard let data = Self.readCheckpointFile(self.checkpointPath) else { return nil }
        if let usable = self.usableCheckpoint(data, reporter: reporter) { return usable }
        unlink(self.checkpointPath)
        return nil
    }

    private func usableCheckpoint(_ data: Data, reporter: ProgressReporter) -> ResumeData? {
        do {
            var decoded = try ResumeData.decode(data)
            guard let onDisk = fileSize(self.partialPath), onDisk > 0 else {
                reporter.note("\(self.checkpointPath) has no partial file left; starting over")
                return nil
            }
            if decoded.resumePoint.mapped != true {
                // Written in order: the file's size is how far it got.
                decoded.resumePoint.offset = min(onDisk, decoded.resumePoint.entityLength ?? onDisk)
            }
            guard decoded.originalURL == self.url || decoded.url == self.url else {
                reporter.note("\(self.checkpointPath) belongs to another URL; starting over")
                return nil
            }
            guard decoded.partialFilePath == self.partialPath else {
                reporter.note("\(self.checkpointPath) names another partial file; starting over")
                return nil
            }
            return decoded
        } catch {
            reporter.note("ignoring \(self.checkpointPath): \(error); starting over")
            return nil
        }
    }

    /// The bytes of a checkpoint file, or `nil` when there is none: usually there is none, and
    /// the failed `open` is all it costs (Foundation's reader builds an error for it).
    private static func readCheckpointFile(_ path: String) -> Data? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        // Resume data is small (at most ResumeData.maximumEncodedSize); read a little beyond it
        // so that an oversized file is refused by the decoder, not cut.
        while data.count <= ResumeData.maximumEncodedSize {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            data.append(contentsOf: buffer[0..<count])
        }
        return data
    }

    /// Records `resume` atomically (write then rename), so a crash never leaves it torn. A
    /// segmented download's map names bytes anywhere in the file: the file goes to the disk
    /// first, so a power cut never leaves a map claiming bytes that were lost. Blocks.
    func saveCheckpoint(_ resume: ResumeData) {
        if resume.resumePoint.mapped == true { PartialFile.syncData(atPath: self.partialPath) }
        let temporary = self.checkpointPath + ".tmp"
        if FileManager.default.createFile(atPath: temporary, contents: resume.encoded()) {
            _ = rename(temporary, self.checkpointPath)
        }
    }

    /// Removes the checkpoint and the partial file.
    func discardCheckpoint() {
        unlink(self.checkpointPath)
        unlink(self.partialPath)
    }

    /// Removes the checkpoint after a successful download (the partial file has become the
    /// final file already).
    func discardCheckpointFile() {
        unlink(self.checkpointPath)
    }

    /// Moves the finished file to its final name without overwriting anything. The name comes
    /// from `-o`, else the response's `Content-Disposition`, else the URL; a taken name gets a
    /// number: `name (1).ext`.
    func moveIntoPlace(_ source: String, response: ResponseInfo?) throws -> String {
        try self.place(response: response) { path in try NoOverwriteMove.move(source, to: path) } orChoosing: { directory, name in
            try NoOverwriteMove.moveChoosingFreeName(source, directory: directory, name: name)
        }
    }

    /// Names the finished, still unnamed `file` where ``moveIntoPlace(_:response:)`` would move
    /// a named one: one link, no partial name made and moved away.
    func linkIntoPlace(_ file: PartialFile, response: ResponseInfo?) throws -> String {
        try self.place(response: response) { path in try file.link(to: path) } orChoosing: { directory, name in
            try NoOverwriteMove.linkChoosingFreeName(file, directory: directory, name: name)
        }
    }

    private func place(
        response: ResponseInfo?,
        at place: (String) throws -> Void,
        orChoosing placeChoosing: (_ directory: String, _ name: String) throws -> String
    ) throws -> String {
        if let explicitOutput = self.explicitOutput {
            do {
                try place(explicitOutput)
                return explicitOutput
            } catch let failure as NoOverwriteMove.Failure where failure.isExists {
                return try placeChoosing(self.directory, self.baseName)
            }
        }
        let disposition = response?.headers["Content-Disposition"]
        let finalURL = response?.url ?? self.url
        // Without Content-Disposition or a redirect, the URL's name found before the request.
        let name = disposition == nil && finalURL == self.url && self.urlName != nil
            ? self.urlName!
            : FileNaming.suggestedFilename(contentDisposition: disposition, url: finalURL)
        return try placeChoosing(self.directory, name)
    }
}
