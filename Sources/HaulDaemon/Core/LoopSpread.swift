/// Which of hauld's transfer loops the next run of a queued download goes to: the first one,
/// unless the bodies its host sends are large; then the loop with the fewest of the host's runs.
///
/// hauld carries its transfers on one event loop, so that the queue's bookkeeping threads have
/// the other cores: with small bodies the loop's work per file is little and the bookkeeping is
/// most of it. With large bodies the one loop is the pace — copying every body out of its
/// socket and into its file — while `haul get` copies on a loop per core. Measured on the
/// 2-core project machine (hauld with one loop against two, alternating rounds, medians of 8):
/// 800 × 64 KiB no change (158 → 152 ms on tmpfs, 389 → 402 on the disk); 1,000 × 16 KiB
/// slower (158 → 171 ms on tmpfs, 442 → 464 on the disk: the second loop's wake-ups cost more
/// than it copies); 500 × 256 KiB faster (see the README's figures). So the spread starts at
/// ``largeBodyBytes``.
///
/// A spread run is counted on its loop until it ends (``ended(host:loop:)``): each loop gets
/// about its share of the host's runs, and the core's gate keeps each loop to its share of the
/// host's slots (``RunGate/Lane``), so that a loop's connections to the host are reused by its
/// own next runs instead of closed for another loop's.
///
/// What is large is learnt per host from the bodies of the downloads that completed
/// (``noteBody(host:bytes:)``, a moving average), or known from the download's own length
/// (a download that stopped, or whose length an earlier run learnt). A value type without I/O:
/// the core keeps one under its lock and asks it for every start.
struct LoopSpread {
    /// A host whose typical body is at least this long has its runs spread over the loops.
    static let largeBodyBytes: Int64 = 128 << 10
    /// The hosts remembered at most; past that the memory starts again (a daemon fetching from
    /// many hosts learns each again from its next completed download).
    static let hostsRemembered = 1_024

    /// Bytes of a typical body, by host key (``TransferRun/hostKey(_:)``), but ``latest``'s.
    private var bodies: [String: Double] = [:]
    /// The host noted or asked about last, and its typical body (`nil`: not known yet): a
    /// queue's downloads come from one host in long runs, and a comparison of two short
    /// strings costs a fraction of a dictionary's hashing (two a file).
    private var latest: (host: String, typical: Double?)?
    /// Runs of each host chosen a loop here and not ended yet, by loop: the next goes to the
    /// loop with the fewest, so that each keeps about its share of the host's connections.
    private var runs: [String: [Int]] = [:]

    /// Bytes of a typical body from `host`, `nil` before one completed.
    func typicalBody(of host: String) -> Double? {
        if let latest = self.latest, latest.host == host { return latest.typical }
        return self.bodies[host]
    }

    /// A download from `host` completed with a body of `bytes`: each counts a quarter of the
    /// typical body from now on (the first sets it).
    mutating func noteBody(host: String, bytes: Int64) {
        let bytes = Double(max(0, bytes))
        self.select(host)
        guard let typical = self.latest!.typical else {
            self.latest!.typical = bytes
            return
        }
        self.latest!.typical = typical + (bytes - typical) / 4
    }

    /// Whether a download from `host`, `knownBytes` long when known, has a large body.
    func isLarge(host: String, knownBytes: Int64?) -> Bool {
        if let knownBytes { return knownBytes >= Self.largeBodyBytes }
        return (self.typicalBody(of: host) ?? 0) >= Double(Self.largeBodyBytes)
    }

    /// The loop (an index below `loops`) for the next run of a download from `host`, `nil` for
    /// a small body or a single loop (the first loop, not counted); else the loop with the
    /// fewest of the host's runs (the first of them on a tie), counted until
    /// ``ended(host:loop:)``.
    mutating func loop(forHost host: String, knownBytes: Int64?, loops: Int) -> Int? {
        guard loops > 1, self.isLarge(host: host, knownBytes: knownBytes) else { return nil }
        var counts = self.runs[host] ?? []
        if counts.count < loops { counts += Array(repeating: 0, count: loops - counts.count) }
        var chosen = 0
        for index in 1..<loops where counts[index] < counts[chosen] { chosen = index }
        counts[chosen] += 1
        self.runs[host] = counts
        return chosen
    }

    /// The runs of `host` counted on each loop now (empty when none).
    func runs(of host: String) -> [Int] {
        self.runs[host] ?? []
    }

    /// A run of `host` that ``loop(forHost:knownBytes:loops:)`` put on `loop` has ended.
    mutating func ended(host: String, loop: Int) {
        guard var counts = self.runs[host], loop < counts.count, counts[loop] > 0 else { return }
        counts[loop] -= 1
        self.runs[host] = counts.allSatisfy { $0 == 0 } ? nil : counts
    }

    /// Makes `host` the ``latest``, saving the one before it in the dictionary.
    private mutating func select(_ host: String) {
        if let latest = self.latest {
            guard latest.host != host else { return }
            if let typical = latest.typical {
                if self.bodies.count >= Self.hostsRemembered, self.bodies[latest.host] == nil {
                    self.bodies.removeAll(keepingCapacity: true)
                }
                self.bodies[latest.host] = typical
            }
        }
        self.latest = (host, self.bodies.removeValue(forKey: host))
    }
}
