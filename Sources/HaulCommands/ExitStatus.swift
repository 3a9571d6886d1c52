/// Exit statuses of `haul`, the ones wget uses, so scripts can tell failures apart.
public enum ExitStatus: Int32, Error, Sendable {
    /// Everything asked for was downloaded.
    case success = 0
    /// A failure that fits no other status.
    case generic = 1
    /// Wrong arguments or options.
    case usage = 2
    /// A local file could not be written, read or moved (disk full, permissions, name clash).
    case fileError = 3
    /// The network failed (refused, reset, timed out) after all retries.
    case networkError = 4
    /// TLS failed: an untrusted certificate, a public key that matches no pin, a failed
    /// handshake.
    case tlsError = 5
    /// Credentials were needed or refused (a proxy's 407, as wget's 6).
    case authenticationFailure = 6
    /// The server answered, but with something wrong: an error status or bytes that cannot be
    /// trusted (lying Content-Range, length mismatch).
    case serverError = 8
    /// Interrupted by Ctrl-C; the partial download is kept for the next run.
    case interrupted = 130
}
