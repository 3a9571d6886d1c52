import Foundation
import HaulCore
import Testing

@Suite("Download queue: pure rules")
struct QueueCoreTests {
    @Test("Checksums parse as TYPE=HEX and refuse what is not one")
    func checksumParsing() throws {
        let spec = try ChecksumSpec(parsing: "SHA-256=" + String(repeating: "AB", count: 32))
        #expect(spec.algorithm == .sha256)
        #expect(spec.hexDigest == String(repeating: "ab", count: 32))
        #expect(spec.description == "sha256=" + String(repeating: "ab", count: 32))
        #expect(try ChecksumSpec(parsing: "md5=" + String(repeating: "0", count: 32)).algorithm == .md5)
        #expect(try ChecksumSpec(parsing: "sha1=" + String(repeating: "f", count: 40)).algorithm == .sha1)
        #expect(throws: ChecksumSpec.ParseError.missingSeparator) { try ChecksumSpec(parsing: "abcdef") }
        #expect(throws: ChecksumSpec.ParseError.unknownAlgorithm("crc32")) { try ChecksumSpec(parsing: "crc32=0000") }
        #expect(throws: ChecksumSpec.ParseError.badDigest(algorithm: .sha256, length: 3)) { try ChecksumSpec(parsing: "sha256=abc") }
        #expect(throws: ChecksumSpec.ParseError.badDigest(algorithm: .md5, length: 32)) {
            try ChecksumSpec(parsing: "md5=" + String(repeating: "g", count: 32))
        }
    }

    @Test("Settings accept valid values and explain invalid ones")
    func settings() throws {
        var settings = QueueSettings(defaultDirectory: "/downloads")
        #expect(settings.maximumConcurrentDownloads == 5)
        try settings.set("max-concurrent", to: "2")
        try settings.set("max-per-host", to: "1")
        try settings.set("speed-limit", to: "1.5M")
        try settings.set("dir", to: "/srv/files")
        #expect(settings.maximumConcurrentDownloads == 2)
        #expect(settings.maximumConnectionsPerHost == 1)
        #expect(settings.globalSpeedLimit == 1_572_864)
        #expect(settings.defaultDirectory == "/srv/files")
        #expect(throws: QueueSettings.SettingError.self) { try settings.set("max-concurrent", to: "0") }
        #expect(throws: QueueSettings.SettingError.self) { try settings.set("speed-limit", to: "fast") }
        #expect(throws: QueueSettings.SettingError.self) { try settings.set("dir", to: "relative/path") }
        #expect(throws: QueueSettings.SettingError.unknownKey("colour")) { try settings.set("colour", to: "blue") }
        #expect(settings.maximumConcurrentDownloads == 2, "a refused value changes nothing")
    }

    @Test("Speed limits read as people write them")
    func speedLimits() {
        #expect(SpeedLimit.parse("500K") == 512_000)
        #expect(SpeedLimit.parse("2M/s") == 2_097_152)
        #expect(SpeedLimit.parse("2MiBps") == 2_097_152)
        #expect(SpeedLimit.parse("0") == 0)
        #expect(SpeedLimit.parse("-1") == nil)
        #expect(SpeedLimit.parse("quick") == nil)
    }

    @Test("A token bucket holds the average rate and lets a burst through")
    func tokenBucket() {
        var bucket = TokenBucket(bytesPerSecond: 100_000, burst: 25_000)
        #expect(bucket.take(20_000, now: 0) == 0, "within the burst")
        let wait = bucket.take(55_000, now: 0)
        #expect(abs(wait - 0.5) < 1e-9, "50 000 bytes of debt at 100 000 B/s is half a second")
        // Reading 100 000 bytes a second after the debt is paid keeps pace exactly.
        var now = 0.5
        var total = 0.0
        for _ in 0..<10 {
            let pause = bucket.take(10_000, now: now)
            total += pause
            now += pause
        }
        #expect(abs(now - 1.5) < 0.26, "10 x 10 000 bytes take about a second (burst allowance aside)")
        var unlimited = TokenBucket(bytesPerSecond: 0)
        #expect(unlimited.take(1 << 30, now: 0) == 0)
        bucket.setRate(bytesPerSecond: 0)
        #expect(bucket.isUnlimited)
    }
}

@Suite("data: URLs and MIME types")
struct DataURLTests {
    @Test("RFC 2397 forms parse; malformed ones are refused")
    func parsing() throws {
        let plain = try DataURL(parsing: "data:,A%20brief%20note")
        #expect(plain.mimeType == "text/plain" && plain.textEncodingName == "US-ASCII")
        #expect(String(decoding: plain.bytes, as: UTF8.self) == "A brief note")
        let image = try DataURL(parsing: "data:image/GIF;base64,R0lG")
        #expect(image.mimeType == "image/gif" && image.bytes == Data("GIF".utf8))
        let charset = try DataURL(parsing: "data:text/plain;charset=iso-8859-7,%be%d3%be")
        #expect(charset.textEncodingName == "iso-8859-7")
        #expect(charset.bytes == Data([0xBE, 0xD3, 0xBE]), "percent-encoded bytes need not be UTF-8")
        #expect(throws: DataURL.ParseError.badPercentEncoding) { try DataURL(parsing: "data:,100%") }
        let unpadded = try DataURL(parsing: "data:;base64,SGk")
        #expect(unpadded.bytes == Data("Hi".utf8))
        #expect(throws: DataURL.ParseError.notDataURL) { try DataURL(parsing: "http://x") }
        #expect(throws: DataURL.ParseError.missingComma) { try DataURL(parsing: "data:text/plain") }
        #expect(throws: DataURL.ParseError.badBase64) { try DataURL(parsing: "data:;base64,****") }
    }

    @Test("MIME types come from extensions, case-insensitively, with a safe default")
    func mimeTypes() {
        #expect(MIMEType.forPathExtension("PNG") == "image/png")
        #expect(MIMEType.forPathExtension("json") == "application/json")
        #expect(MIMEType.forPathExtension("unknownext") == "application/octet-stream")
        #expect(MIMEType.textEncodingName(for: "text/csv") == "utf-8")
        #expect(MIMEType.textEncodingName(for: "image/png") == nil)
    }
}
