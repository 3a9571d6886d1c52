import Crypto
import Foundation
import HaulCore

/// Computes a file's digest for ``ChecksumSpec`` verification, reading 1 MiB at a time
/// (hauld's queue and `haul get --checksum`).
package enum FileChecksum {
    package static func hexDigest(ofFileAt path: String, algorithm: ChecksumSpec.Algorithm) throws -> String {
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw URLError(.cannotOpenFile, userInfo: [NSLocalizedDescriptionKey: "cannot read \(path) to verify its checksum"])
        }
        defer { try? handle.close() }
        switch algorithm {
        case .sha256: return try Self.digest(handle, hasher: SHA256())
        case .sha1: return try Self.digest(handle, hasher: Insecure.SHA1())
        case .md5: return try Self.digest(handle, hasher: Insecure.MD5())
        }
    }

    private static func digest<H: HashFunction>(_ handle: FileHandle, hasher: H) throws -> String {
        var hasher = hasher
        while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty {
            hasher.update(data: chunk)
        }
        return hasher.finalize().hexString
    }
}
