import Foundation

/// The web UI's secret: 32 random bytes in hex, created on the daemon's first start in
/// `web-token` (mode 0600) in the data directory and kept across restarts.
enum WebToken {
    static func loadOrCreate(path: String) throws -> String {
        if let existing = try? String(contentsOfFile: path, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines),
            existing.count >= 32
        {
            return existing
        }
        var generator = SystemRandomNumberGenerator()
        let token = (0..<32).map { _ in
            let byte = UInt8.random(in: 0...255, using: &generator)
            return (byte < 16 ? "0" : "") + String(byte, radix: 16)
        }.joined()
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard descriptor >= 0 else { throw DaemonError("cannot create \(path): \(String(cString: strerror(errno)))") }
        defer { close(descriptor) }
        let bytes = Array(token.utf8)
        guard write(descriptor, bytes, bytes.count) == bytes.count else {
            throw DaemonError("cannot write \(path): \(String(cString: strerror(errno)))")
        }
        return token
    }

    /// Compares in time independent of where the strings differ.
    static func matches(_ candidate: Substring?, _ token: String) -> Bool {
        guard let candidate else { return false }
        let a = Array(candidate.utf8)
        let b = Array(token.utf8)
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for index in 0..<a.count { difference |= a[index] ^ b[index] }
        return difference == 0
    }
}
