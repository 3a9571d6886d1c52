import Crypto
import Foundation
import Haul
import HaulTestSupport
import Testing

@Suite("file: and data: URLs")
struct LocalURLTests {
    @Test("A data task reads a file: URL with its MIME type, length and suggested name")
    func fileDataTask() async throws {
        let env = try await TestEnvironment.make()
        let file = env.directory.appendingPathComponent("notes.txt")
        try Data("local bytes\n".utf8).write(to: file)
        let (data, response) = try await env.session.data(from: file)
        #expect(String(decoding: data, as: UTF8.self) == "local bytes\n")
        #expect(!(response is HTTPURLResponse), "a file: answer is a plain URLResponse")
        #expect(response.mimeType == "text/plain")
        #expect(response.textEncodingName == "utf-8")
        #expect(response.expectedContentLength == 12)
        #expect(response.suggestedFilename == "notes.txt")
        #expect(response.url == file)
        try await env.finish()
    }

    @Test("A download of a file: URL copies it through the delegate, with progress")
    func fileDownload() async throws {
        let env = try await TestEnvironment.make()
        let file = env.directory.appendingPathComponent("picture.png")
        let bytes = Data(TestContent.bytes(0..<3_000_000, seed: 9))
        try bytes.write(to: file)
        let task = env.session.downloadTask(with: file)
        task.resume()
        #expect(await env.delegate.completion(of: task) == nil)
        #expect(env.delegate.finishedDigests == [TestContent.sha256Hex(size: 3_000_000, seed: 9)])
        #expect(task.response?.mimeType == "image/png")
        #expect(task.response?.suggestedFilename == "picture.png")
        #expect(task.countOfBytesReceived == 3_000_000)
        #expect(env.leftoverPartialFiles.isEmpty)
        try await env.finish()
    }

    @Test("data: URLs decode base64 and percent-encoding, with their media type and charset")
    func dataURLs() async throws {
        let env = try await TestEnvironment.make()
        let (text, textResponse) = try await env.session.data(from: URL(string: "data:text/html;charset=utf-8,%3Cb%3Ehi%3C%2Fb%3E")!)
        #expect(String(decoding: text, as: UTF8.self) == "<b>hi</b>")
        #expect(textResponse.mimeType == "text/html")
        #expect(textResponse.textEncodingName == "utf-8")
        let (plain, plainResponse) = try await env.session.data(from: URL(string: "data:;base64,SGVsbG8=")!)
        #expect(String(decoding: plain, as: UTF8.self) == "Hello")
        #expect(plainResponse.mimeType == "text/plain")
        #expect(plainResponse.textEncodingName == "US-ASCII")
        let (location, _) = try await env.session.download(from: URL(string: "data:application/octet-stream;base64,AAEC")!)
        #expect(try Data(contentsOf: location) == Data([0, 1, 2]))
        try await env.finish()
    }

    @Test("Missing files, malformed data: URLs and other schemes fail with clear URLErrors")
    func errors() async throws {
        let env = try await TestEnvironment.make()
        func code(_ body: () async throws -> Void) async -> URLError.Code? {
            do {
                try await body()
                return nil
            } catch {
                return (error as? URLError)?.code
            }
        }
        #expect(await code { _ = try await env.session.data(from: env.directory.appendingPathComponent("absent.txt")) } == .fileDoesNotExist)
        #expect(await code { _ = try await env.session.data(from: env.directory) } == .fileDoesNotExist, "a directory is not a file")
        #expect(await code { _ = try await env.session.data(from: URL(string: "data:text/plain;base64,@@@@")!) } == .badURL)
        #expect(await code { _ = try await env.session.data(from: URL(string: "ftp://127.0.0.1/file")!) } == .unsupportedURL)
        try await env.finish()
    }
}

@Suite("Multipart form data")
struct MultipartFormDataTests {
    @Test("Fields and files are framed by the boundary with names, file names and MIME types")
    func encoding() throws {
        var form = MultipartFormData(boundary: "XyZ")
        form.append("Ada \"the\" Countess", named: "author")
        form.append(Data([0xFF, 0x00]), named: "blob", filename: "raw.bin")
        form.append(Data("{}".utf8), named: "meta", filename: "meta.json")
        let body = try form.encoded()
        let expected = Data("""
            --XyZ\r
            Content-Disposition: form-data; name="author"\r
            \r
            Ada "the" Countess\r
            --XyZ\r
            Content-Disposition: form-data; name="blob"; filename="raw.bin"\r
            Content-Type: application/octet-stream\r
            \r

            """.utf8) + Data([0xFF, 0x00]) + Data("""
            \r
            --XyZ\r
            Content-Disposition: form-data; name="meta"; filename="meta.json"\r
            Content-Type: application/json\r
            \r
            {}\r
            --XyZ--\r

            """.utf8)
        #expect(body == expected)
        #expect(try form.contentLength() == Int64(body.count))
        #expect(form.contentType == "multipart/form-data; boundary=XyZ")
    }

    @Test("A file part is streamed from disk; a name with quotes is escaped; a missing file is refused")
    func filesOnDisk() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("multipart-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let file = directory.appendingPathComponent("photo.jpg")
        try Data(TestContent.bytes(0..<2_500_000, seed: 3)).write(to: file)
        var form = MultipartFormData()
        try form.appendFile(at: file, named: "a\"b")
        let out = directory.appendingPathComponent("body")
        try form.write(to: out)
        let written = try Data(contentsOf: out)
        #expect(written == (try form.encoded()))
        #expect(try form.contentLength() == Int64(written.count))
        let head = String(decoding: written.prefix(200), as: UTF8.self)
        #expect(head.contains("name=\"a%22b\"; filename=\"photo.jpg\"\r\nContent-Type: image/jpeg\r\n\r\n"))
        #expect(throws: CocoaError.self) { try form.appendFile(at: directory.appendingPathComponent("none"), named: "x") }
        #expect(throws: CocoaError.self) { try form.appendFile(at: directory, named: "x") }
    }

    @Test("A multipart upload reaches the server byte for byte")
    func upload() async throws {
        let env = try await TestEnvironment.make()
        var form = MultipartFormData()
        form.append("value", named: "field")
        form.append(Data(TestContent.bytes(0..<300_000, seed: 4)), named: "file", filename: "data.bin")
        var request = URLRequest(url: env.server.url("/echo"))
        request.httpMethod = "POST"
        request.setValue(form.contentType, forHTTPHeaderField: "Content-Type")
        let body = try form.encoded()
        let (echoed, response) = try await env.session.upload(for: request, from: body)
        #expect(echoed == body)
        #expect((response as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-Echo-Length") == "\(body.count)")
        let received = try #require(env.server.requests.last)
        #expect(received.header("Content-Type") == form.contentType)
        #expect(received.header("Content-Length") == "\(body.count)")
        try await env.finish()
    }
}
