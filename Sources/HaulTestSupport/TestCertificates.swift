import Crypto
import Foundation
import HaulCore
import NIOSSL

/// Certificates made at test time with the `openssl` command (P-256 keys, valid for a day):
/// a self-signed server certificate for 127.0.0.1, or a small authority that issues server and
/// client certificates. Files live in a temporary directory removed by ``remove()``.
public final class TestCertificates: Sendable {
    /// A certificate with its key, as PEM files.
    public struct Identity: Sendable {
        public var certificatePath: String
        public var keyPath: String

        /// The certificate, DER-encoded.
        public func derBytes() throws -> [UInt8] {
            try NIOSSLCertificate.fromPEMFile(self.certificatePath)[0].toDERBytes()
        }

        /// The SHA-256 of the public key (DER SubjectPublicKeyInfo), lowercase hex, computed by
        /// the `openssl` command (independently of NIOSSL).
        public func publicKeySHA256() throws -> String {
            let der = try TestCertificates.run([
                "sh", "-c", "openssl x509 -in '\(self.certificatePath)' -pubkey -noout | openssl pkey -pubin -outform DER",
            ])
            return SHA256.hash(data: der).hexString
        }

        /// The SHA-256 of the DER certificate, lowercase hex: what a pinning client compares.
        public func sha256() throws -> String {
            SHA256.hash(data: try self.derBytes()).hexString
        }
    }

    public let directory: String

    public init() throws {
        self.directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("haul-certs-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: self.directory, withIntermediateDirectories: true)
    }

    /// A self-signed certificate for `127.0.0.1` (subject alternative name IP:127.0.0.1).
    public func selfSigned(name: String) throws -> Identity {
        let identity = self.paths(name)
        try self.openssl([
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", identity.keyPath, "-out", identity.certificatePath, "-days", "1",
            "-subj", "/CN=\(name)", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ])
        return identity
    }

    /// A certificate authority (self-signed, `CA:TRUE`).
    public func authority(name: String) throws -> Identity {
        let identity = self.paths(name)
        try self.openssl([
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", identity.keyPath, "-out", identity.certificatePath, "-days", "1",
            "-subj", "/CN=\(name)", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        ])
        return identity
    }

    /// A certificate issued by `authority`: for a client (`clientAuth`) or for the server at
    /// 127.0.0.1 (`serverAuth`).
    public func issue(name: String, by authority: Identity, forClient: Bool) throws -> Identity {
        let identity = self.paths(name)
        let request = "\(self.directory)/\(name).csr"
        let extensions = "\(self.directory)/\(name).ext"
        try self.openssl([
            "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", identity.keyPath, "-out", request, "-subj", "/CN=\(name)",
        ])
        let usage = forClient ? "extendedKeyUsage=clientAuth\n" : "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
        try usage.write(toFile: extensions, atomically: true, encoding: .utf8)
        try self.openssl([
            "x509", "-req", "-in", request, "-CA", authority.certificatePath, "-CAkey", authority.keyPath,
            "-CAcreateserial", "-out", identity.certificatePath, "-days", "1", "-extfile", extensions,
        ])
        return identity
    }

    /// A server configuration presenting `identity` (and `chain` after it); when
    /// `clientAuthority` is given the server requires a client certificate it issued.
    public static func serverConfiguration(
        _ identity: Identity,
        chain: [Identity] = [],
        requiringClientCertificatesFrom clientAuthority: Identity? = nil,
        maximumVersion: TLSVersion? = nil
    ) throws -> TLSConfiguration {
        let certificates = try ([identity] + chain).map { try NIOSSLCertificate.fromPEMFile($0.certificatePath)[0] }
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: certificates.map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: identity.keyPath, format: .pem))
        )
        if let clientAuthority {
            configuration.certificateVerification = .noHostnameVerification
            configuration.trustRoots = .certificates([try NIOSSLCertificate.fromPEMFile(clientAuthority.certificatePath)[0]])
        }
        if let maximumVersion { configuration.maximumTLSVersion = maximumVersion }
        return configuration
    }

    /// Removes the files.
    public func remove() {
        try? FileManager.default.removeItem(atPath: self.directory)
    }

    private func paths(_ name: String) -> Identity {
        Identity(certificatePath: "\(self.directory)/\(name).pem", keyPath: "\(self.directory)/\(name).key")
    }

    private func openssl(_ arguments: [String]) throws {
        _ = try Self.run(["openssl"] + arguments)
    }

    /// Runs a command (through `env`), returns its standard output; throws with its errors.
    static func run(_ arguments: [String]) throws -> Data {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        let errors = Pipe()
        let output = Pipe()
        process.standardError = errors
        process.standardOutput = output
        try process.run()
        let result = output.fileHandleForReading.readDataToEndOfFile()
        let message = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw Failure(description: "\(arguments.prefix(2).joined(separator: " ")) failed: \(String(decoding: message, as: UTF8.self))")
        }
        return result
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }
}
