import Foundation

/// The most a loopback TCP connection can hold in the kernel, from the machine's settings.
///
/// Linux grows a connection's receive buffer up to `tcp_rmem`'s maximum and its send buffer up to
/// `tcp_wmem`'s (auto-tuning). A back-pressure test that counts what a server sent while the client
/// stopped reading must allow for both: those bytes left the server but sit in the kernel, not in
/// the client. The maxima differ between machines (4 MiB receive on some, 32 MiB on others).
public struct KernelSocketBuffers: Sendable, Equatable {
    /// The receive buffer's auto-tuning maximum (`net.ipv4.tcp_rmem`'s third field), in bytes.
    public var receiveMaximum: Int64
    /// The send buffer's auto-tuning maximum (`net.ipv4.tcp_wmem`'s third field), in bytes.
    public var sendMaximum: Int64

    /// Both directions' maxima: what one connection's kernel buffers can hold at most.
    public var connectionMaximum: Int64 { self.receiveMaximum + self.sendMaximum }

    /// Reads the settings from `/proc/sys`; Linux's defaults (6 MiB, 4 MiB) where they cannot be read.
    public static func current() -> KernelSocketBuffers {
        KernelSocketBuffers(
            receiveMaximum: Self.maximum(in: "/proc/sys/net/ipv4/tcp_rmem") ?? 6 << 20,
            sendMaximum: Self.maximum(in: "/proc/sys/net/ipv4/tcp_wmem") ?? 4 << 20
        )
    }

    /// The third of the three numbers in a `tcp_rmem`-style file (minimum, default, maximum).
    static func maximum(in path: String) -> Int64? {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        let fields = text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" })
        guard fields.count == 3 else { return nil }
        return Int64(fields[2])
    }
}
