import Crypto
import Foundation
import HaulCore

/// Deterministic test bodies of any size: byte `i` of entity `(seed, version)` is always the same,
/// so any range can be produced without storing the file, and tests can compare SHA-256 digests.
public enum TestContent {
    /// Fills `buffer` with the bytes at `offset..<offset+buffer.count` of the entity.
    public static func fill(_ buffer: UnsafeMutableRawBufferPointer, offset: Int64, seed: UInt64) {
        guard buffer.count > 0 else { return }
        var position = 0
        var index = offset
        while position < buffer.count {
            let word = index / 8
            let value = splitmix(seed &+ UInt64(bitPattern: word) &* 0x9E37_79B9_7F4A_7C15)
            let byteInWord = Int(index % 8)
            let available = min(8 - byteInWord, buffer.count - position)
            for k in 0..<available {
                buffer[position + k] = UInt8(truncatingIfNeeded: value >> UInt64((byteInWord + k) * 8))
            }
            position += available
            index += Int64(available)
        }
    }

    /// The bytes of `range` of the entity.
    public static func bytes(_ range: Range<Int64>, seed: UInt64) -> [UInt8] {
        var result = [UInt8](repeating: 0, count: Int(range.count))
        result.withUnsafeMutableBytes { fill($0, offset: range.lowerBound, seed: seed) }
        return result
    }

    /// The hex SHA-256 of the first `size` bytes of the entity.
    public static func sha256Hex(size: Int64, seed: UInt64) -> String {
        var hasher = SHA256()
        var offset: Int64 = 0
        var chunk = [UInt8](repeating: 0, count: 1 << 20)
        while offset < size {
            let count = Int(min(Int64(chunk.count), size - offset))
            chunk.withUnsafeMutableBytes { fill(UnsafeMutableRawBufferPointer(rebasing: $0[0..<count]), offset: offset, seed: seed) }
            chunk.withUnsafeBytes { hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
            offset += Int64(count)
        }
        return hasher.finalize().hexString
    }

    /// The hex SHA-256 of a file on disk.
    public static func sha256Hex(ofFileAt path: String) throws -> String {
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw CocoaError(.fileNoSuchFile, userInfo: [NSFilePathErrorKey: path])
        }
        defer { try? handle.close() }
        var hasher = SHA256()
        while let data = try handle.read(upToCount: 1 << 20), !data.isEmpty {
            hasher.update(data: data)
        }
        return hasher.finalize().hexString
    }

    private static func splitmix(_ input: UInt64) -> UInt64 {
        var z = input &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

extension TestContent {
    /// Hex MD5 of UTF-8 `text` (for checking Digest authentication).
    public static func md5Hex(_ text: String) -> String {
        Insecure.MD5.hash(data: Data(text.utf8)).hexString
    }
}
