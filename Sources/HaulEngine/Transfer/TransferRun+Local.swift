import Foundation
import HaulCore
import NIOCore

extension TransferRun {
    /// Answers a `file:` or `data:` URL without the network: the bytes go through the same
    /// observer calls (and into the same partial file) as a response body would, 1 MiB at a time.
    func loadLocally(_ url: URL) -> TransferOutcome {
        let mimeType: String
        var encoding: String?
        var source: LocalSource
        if url.scheme?.lowercased() == "data" {
            do {
                let parsed = try DataURL(parsing: url.absoluteString)
                mimeType = parsed.mimeType
                encoding = parsed.textEncodingName
                source = .memory(parsed.bytes)
            } catch {
                return self.failure(URLError(.badURL, userInfo: [NSLocalizedDescriptionKey: "\(error)", NSURLErrorFailingURLErrorKey: url]))
            }
        } else {
            let path = url.path
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue,
                let handle = FileHandle(forReadingAtPath: path)
            else {
                return self.failure(
                    URLError(.fileDoesNotExist, userInfo: [NSLocalizedDescriptionKey: "no readable file at \(path)", NSURLErrorFailingURLErrorKey: url])
                )
            }
            mimeType = MIMEType.forPathExtension(url.pathExtension)
            encoding = MIMEType.textEncodingName(for: mimeType)
            source = .file(handle, size: PartialFile.size(at: path) ?? 0)
        }
        defer { source.close() }
        var headers = HTTPHeaderFields()
        headers.add(name: "Content-Type", value: encoding.map { "\(mimeType); charset=\($0)" } ?? mimeType)
        headers.add(name: "Content-Length", value: "\(source.size)")
        let response = ResponseInfo(url: url, statusCode: 200, headers: headers, httpVersion: "", isLocal: true)
        self.state.withLock { $0.lastResponse = response }
        self.observer.transferRun(self, didReceive: response, resumedAtOffset: nil, expectedTotal: source.size)

        var file: PartialFile?
        if case .file(let path, _) = self.destination {
            do {
                file = try self.openFile(path: path)
                try file?.truncate(to: 0)
            } catch {
                return self.failure(error)
            }
        }
        var offset: Int64 = 0
        while let chunk = source.next() {
            if let stopped = self.stoppedOutcome() { return stopped }
            let buffer = ByteBuffer(bytes: chunk)
            if let file {
                do { try file.write(buffer, at: offset) } catch { return self.failure(error) }
                offset += Int64(chunk.count)
                self.observer.transferRun(self, didWrite: chunk.count, totalOnDisk: offset, expectedTotal: source.size)
            } else {
                offset += Int64(chunk.count)
                self.observer.transferRun(self, didReceive: buffer)
            }
        }
        return .completed(response: response, bytesOnDisk: file == nil ? 0 : offset)
    }
}

/// The bytes of a local answer, read in order.
enum LocalSource {
    case memory(Data)
    case file(FileHandle, size: Int64)

    var size: Int64 {
        switch self {
        case .memory(let data): Int64(data.count)
        case .file(_, let size): size
        }
    }

    mutating func next() -> Data? {
        switch self {
        case .memory(let data):
            guard !data.isEmpty else { return nil }
            let chunk = data.prefix(1 << 20)
            self = .memory(data.dropFirst(chunk.count))
            return Data(chunk)
        case .file(let handle, _):
            guard let chunk = try? handle.read(upToCount: 1 << 20), !chunk.isEmpty else { return nil }
            return chunk
        }
    }

    func close() {
        if case .file(let handle, _) = self { try? handle.close() }
    }
}
