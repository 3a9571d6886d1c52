// async/await and completion-handler forms, as TransferSession code writes them.
import Haul

struct Release: Decodable { var name: String }

func fetchRelease(from url: URL) async throws -> Release {
    let (data, response) = try await TransferSession.shared.data(from: url)
    guard let http = response as? HTTPURLResponse, http.statusCode == 200 else { throw URLError(.badServerResponse) }
    return try JSONDecoder().decode(Release.self, from: data)
}

func countLines(at url: URL) async throws -> Int {
    let (bytes, _) = try await TransferSession.shared.bytes(from: url)
    var count = 0
    for try await _ in bytes.lines { count += 1 }
    return count
}

func firstBytes(at url: URL) async throws -> [UInt8] {
    let (bytes, _): (TransferSession.AsyncBytes, URLResponse) = try await TransferSession.shared.bytes(for: URLRequest(url: url))
    var collected: [UInt8] = []
    for try await byte in bytes {
        collected.append(byte)
        if collected.count == 16 { break }
    }
    return collected
}

func upload(_ body: Data, to url: URL) async throws -> Int {
    var request = URLRequest(url: url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: 30)
    request.httpMethod = "PUT"
    let (_, response) = try await TransferSession.shared.upload(for: request, from: body)
    return (response as? HTTPURLResponse)?.statusCode ?? 0
}

func completionHandlers(url: URL, file: URL) {
    let configuration = TransferSessionConfiguration.ephemeral
    configuration.httpAdditionalHeaders = ["User-Agent": "Port/1.0"]
    configuration.timeoutIntervalForResource = 60
    configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
    let session = TransferSession(configuration: configuration)
    session.dataTask(with: url) { data, response, error in
        print(data?.count ?? 0, (response as? HTTPURLResponse)?.statusCode ?? 0, error == nil)
    }.resume()
    session.downloadTask(with: URLRequest(url: url)) { location, response, error in
        if let location { try? FileManager.default.removeItem(at: location) }
        print(response?.expectedContentLength ?? -1, error.map { "\($0)" } ?? "ok")
    }.resume()
    session.uploadTask(with: URLRequest(url: url), fromFile: file) { data, _, _ in
        print(data?.count ?? 0)
    }.resume()
    session.invalidateAndCancel()
}
