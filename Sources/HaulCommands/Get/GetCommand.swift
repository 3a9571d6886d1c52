import ArgumentParser
import Foundation
import HaulCore
import NIOSSL

/// `haul get`: download URLs to files in the foreground, resumably and verified.
struct GetCommand: AsyncParsableCommand {
    /// The subcommand's name (known before its configuration is built: ``HaulCommand`` starts
    /// the engine's warm-up on it).
    static let commandName = "get"

    static let configuration = CommandConfiguration(
        commandName: Self.commandName,
        abstract: "Download URLs to files, resumably.",
        discussion: """
            Each download is written to NAME.haul-part beside its destination and checkpointed in \
            NAME.haul-resume, so Ctrl-C, a crash or a dropped connection loses nothing: run the same \
            command again (or add -c) and it continues where it stopped, after the server confirms \
            with ETag/Last-Modified that the file has not changed. The file appears under its final \
            name only when complete. Transient failures (reset, timeout, 429/5xx with Retry-After) \
            are retried with backoff, resuming from the bytes on disk.

            Exit status: 0 success, 2 usage, 3 local file error, 4 network error, 8 server error, \
            130 interrupted.
            """
    ).haulSubcommand

    @Argument(help: "The http or https URLs to download.")
    var urls: [String] = []

    @Option(name: [.customShort("o"), .customLong("output")], help: "Save the (single) download as FILE.")
    var output: String?

    @Option(name: [.customShort("d"), .customLong("directory")], help: "Save downloads into DIR (default: the current directory).")
    var directory: String?

    @Flag(name: [.customShort("c"), .customLong("continue")], help: "Continue a partial download (the default when one exists); skip files that already exist.")
    var continueExisting = false

    @Flag(name: .customLong("fresh"), help: "Discard any partial download and start over.")
    var fresh = false

    @Option(name: [.customShort("i"), .customLong("input-file")], help: "Read URLs from FILE, one per line ('-' for standard input; # starts a comment).")
    var inputFile: String?

    @Option(name: [.customShort("j"), .customLong("jobs")], help: "Downloads running at once (default 1 for one URL, 4 for several).")
    var jobs: Int?

    // The three numbers' defaults are applied here, not given to the parser, which would
    // describe each default for its help text at every parse (Int's and Double's descriptions,
    // looked up by the runtime the first time: 1.9 M of a one-file download's 35 M
    // instructions). The help says them as the parser did.
    static let defaultMaximumConnections = 16
    static let defaultRetries = 5
    static let defaultTimeout: Double = 30

    @Option(
        name: [.customShort("x"), .customLong("max-connections")],
        help: ArgumentHelp(
            "Connections per download (segments of one file at once, as aria2c -x / axel -n); 1: one connection. Default \(Self.defaultMaximumConnections). More than one only once the first is slower than 512 MiB/s. (default: \(Self.defaultMaximumConnections))",
            valueName: "max-connections"
        )
    )
    var maxConnectionsGiven: Int?
    var maxConnections: Int { self.maxConnectionsGiven ?? Self.defaultMaximumConnections }

    @Option(
        name: .customLong("mirror"),
        help: "Another URL of the same file (repeatable; one URL only): segments come from every mirror at once, up to -x connections each."
    )
    var mirrors: [String] = []

    @Option(name: .customLong("checksum"), help: "Expected checksum TYPE=HEX (sha256, sha1, md5) of the (single) download; a mismatch is an error.")
    var checksum: String?

    @Option(name: .customLong("retries"), help: ArgumentHelp("Retries after a transient failure. (default: \(Self.defaultRetries))", valueName: "retries"))
    var retriesGiven: Int?
    var retries: Int { self.retriesGiven ?? Self.defaultRetries }

    @Option(
        name: .customLong("timeout"),
        help: ArgumentHelp("Seconds to wait for the next byte before the attempt fails. (default: \(Self.defaultTimeout))", valueName: "timeout")
    )
    var timeoutGiven: Double?
    var timeout: Double { self.timeoutGiven ?? Self.defaultTimeout }

    @Option(name: [.customShort("H"), .customLong("header")], help: "Extra request header 'Name: value' (repeatable).")
    var headers: [String] = []

    @Flag(name: [.customShort("q"), .customLong("quiet")], help: "Print errors only.")
    var quiet = false

    @Option(name: .customLong("cacert"), help: "Trust the certificates in this PEM FILE besides the system's (a private CA).")
    var caCertificates: String?

    @Option(
        name: .customLong("pinnedpubkey"),
        help: "Accept only servers whose public key has this SHA-256: 'sha256//BASE64', several joined by ';'."
    )
    var pinnedPublicKey: String?

    @Flag(name: [.customShort("k"), .customLong("insecure")], help: "Accept any server certificate (pins still apply).")
    var insecure = false

    /// URLs from the arguments and the input file, validated.
    private(set) var resolvedURLs: [URL] = []
    private(set) var resolvedMirrors: [URL] = []

    mutating func validate() throws {
        var resolved = try self.urls.map(Self.httpURL)
        if let inputFile {
            let content: String
            if inputFile == "-" {
                content = Self.standardInputText
            } else {
                guard let data = FileManager.default.contents(atPath: inputFile) else {
                    throw ValidationError("cannot read the input file \(inputFile)")
                }
                content = String(decoding: data, as: UTF8.self)
            }
            // A bad line is named by its number in the file.
            for entry in URLList.entries(in: content) {
                do {
                    resolved.append(try Self.httpURL(entry.text))
                } catch let error as ValidationError {
                    throw ValidationError("\(inputFile == "-" ? "standard input" : inputFile):\(entry.line): \(error.message)")
                }
            }
        }
        guard !resolved.isEmpty else { throw ValidationError("give at least one URL, or -i FILE") }
        self.resolvedURLs = resolved
        self.resolvedMirrors = try self.mirrors.map(Self.httpURL)
        if self.resolvedURLs.count > 1, !self.mirrors.isEmpty || self.checksum != nil {
            throw ValidationError("--mirror and --checksum apply to a single URL")
        }
        if let checksum {
            do { _ = try ChecksumSpec(parsing: checksum) } catch { throw ValidationError("bad --checksum: \(error)") }
        }
        if self.output != nil, self.resolvedURLs.count > 1 {
            throw ValidationError("-o names one file; use -d DIR for several URLs")
        }
        if self.output != nil, self.directory != nil { throw ValidationError("use either -o FILE or -d DIR, not both") }
        if let jobs, !(1...256).contains(jobs) { throw ValidationError("-j takes a number from 1 to 256") }
        guard (1...64).contains(self.maxConnections) else { throw ValidationError("-x takes a number from 1 to 64") }
        guard (0...100).contains(self.retries) else { throw ValidationError("--retries takes a number from 0 to 100") }
        guard self.timeout > 0 else { throw ValidationError("--timeout must be positive") }
        for header in self.headers where !header.contains(":") {
            throw ValidationError("a header must look like 'Name: value', got '\(header)'")
        }
        if self.fresh, self.continueExisting { throw ValidationError("use either -c or --fresh, not both") }
        _ = try self.trustOptions()
        if let directory {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue else {
                throw ValidationError("no such directory: \(directory)")
            }
        }
    }

    /// Standard input (the list of `-i -`), read once for the process: validation can run
    /// twice, when a failed parse of `haul get` alone is parsed again from the root
    /// (`HaulCommand.parseAsRoot(fastArguments:)`), and the second must see the same list.
    private static let standardInputText = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)

    static func httpURL(_ text: String) throws -> URL {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased() else {
            throw ValidationError("not a URL: \(text)")
        }
        guard scheme == "http" || scheme == "https" else {
            throw ValidationError("unsupported URL scheme '\(scheme)' in \(text): only http and https")
        }
        guard let host = url.host, !host.isEmpty else { throw ValidationError("the URL \(text) has no host") }
        return url
    }

    /// `--cacert` read and `--pinnedpubkey` parsed; a clear usage error when they are wrong.
    func trustOptions() throws -> ([NIOSSLCertificate], Set<String>) {
        var trusted: [NIOSSLCertificate] = []
        if let caCertificates {
            guard let pem = FileManager.default.contents(atPath: caCertificates) else {
                throw ValidationError("--cacert: cannot read the certificate file \(caCertificates)")
            }
            do {
                trusted = try NIOSSLCertificate.fromPEMBytes(Array(pem))
            } catch {
                throw ValidationError("--cacert: \(caCertificates): not PEM certificates: \(error)")
            }
            guard !trusted.isEmpty else { throw ValidationError("--cacert: \(caCertificates): no certificate in the PEM text") }
        }
        return (trusted, try self.pinnedPublicKey.map(Self.parsePins) ?? [])
    }

    /// `sha256//BASE64;sha256//BASE64` → the digests in lowercase hex.
    static func parsePins(_ text: String) throws -> Set<String> {
        var pins = Set<String>()
        for item in text.split(separator: ";").map({ $0.trimmingCharacters(in: .whitespaces) }) where !item.isEmpty {
            guard item.hasPrefix("sha256//"), let digest = Data(base64Encoded: String(item.dropFirst(8))), digest.count == 32 else {
                throw ValidationError("--pinnedpubkey takes 'sha256//' and the base64 of a SHA-256 digest, got '\(item)'")
            }
            pins.insert(digest.hexString)
        }
        guard !pins.isEmpty else { throw ValidationError("--pinnedpubkey names no key") }
        return pins
    }

    func run() async throws {
        let (trustedCertificates, pinnedKeys) = try self.trustOptions()
        let parallelism = self.jobs ?? (self.resolvedURLs.count > 1 ? 4 : 1)
        var requestHeaders: [(String, String)] = []
        for header in self.headers {
            let parts = header.split(separator: ":", maxSplits: 1)
            requestHeaders.append((parts[0].trimmingCharacters(in: .whitespaces), parts.count > 1 ? parts[1].trimmingCharacters(in: .whitespaces) : ""))
        }
        let options = GetCoordinator.Options(
            outputPath: self.output,
            directory: self.directory ?? FileManager.default.currentDirectoryPath,
            continueExisting: self.continueExisting,
            fresh: self.fresh,
            headers: requestHeaders,
            retryPolicy: RetryPolicy(maximumAttempts: self.retries + 1),
            idleTimeout: self.timeout,
            parallelism: parallelism,
            connectionsPerDownload: self.maxConnections,
            mirrors: self.resolvedMirrors,
            checksum: try self.checksum.map { try ChecksumSpec(parsing: $0) },
            output: self.quiet ? .quiet : (Terminal.isInteractive ? .live : .lines),
            trustedCertificates: trustedCertificates,
            pinnedKeys: pinnedKeys,
            insecure: self.insecure
        )
        let coordinator = GetCoordinator(options: options)
        // The process exits next (`HaulCommand.runAndExit`): its exit closes the connections.
        let status = await coordinator.run(urls: self.resolvedURLs, closingConnections: false)
        if status != .success { throw status }
    }
}
