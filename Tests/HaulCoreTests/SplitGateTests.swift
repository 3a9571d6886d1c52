import HaulCore
import Testing

@Suite("Split gate: extra connections only when one is not fast enough")
struct SplitGateTests {
    /// 1 MiB/s threshold, 100 ms windows: a window's worth is 104,857.6 bytes.
    private func gate() -> SplitGate { SplitGate(window: 0.1, fastEnough: 1_048_576) }

    @Test("A connection that stays fast keeps the download to itself, window after window")
    func fastStaysSingle() {
        var gate = self.gate()
        #expect(gate.observe(received: 0, now: 0) == .waiting, "the first look starts the window")
        #expect(gate.observe(received: 50_000, now: 0.05) == .waiting, "half a window, half its bytes: not decided")
        #expect(gate.observe(received: 110_000, now: 0.09) == .single, "a window's worth before the window ended")
        #expect(gate.verdictSoFar == .single)
        // The next window starts at 0.09 with 110,000 bytes.
        #expect(gate.observe(received: 120_000, now: 0.15) == .single, "a window in progress keeps the last verdict")
        #expect(gate.observe(received: 230_000, now: 0.19) == .single)
        #expect(gate.observe(received: 1_300_000, now: 1.0) == .single, "1.07 MB in 0.81 s is still fast enough")
    }

    @Test("A slow first window opens the gate, for good")
    func slowOpens() {
        var gate = self.gate()
        _ = gate.observe(received: 0, now: 0)
        #expect(gate.observe(received: 10_000, now: 0.05) == .waiting)
        #expect(gate.observe(received: 20_000, now: 0.1) == .split, "20 KB in a window of 100 ms: 0.2 MB/s")
        #expect(gate.observe(received: 10_000_000, now: 0.11) == .split, "open stays open, however fast it gets")
        #expect(gate.verdictSoFar == .split)
    }

    @Test("A fast connection that slows down (or stalls) opens the gate at the end of that window")
    func slowdownOpens() {
        var gate = self.gate()
        _ = gate.observe(received: 0, now: 0)
        #expect(gate.observe(received: 200_000, now: 0.1) == .single)
        #expect(gate.observe(received: 250_000, now: 0.15) == .single)
        #expect(gate.observe(received: 250_000, now: 0.2) == .split, "a stall: nothing more in the next window")
    }

    @Test("A late look judges the whole time since the window started")
    func lateLook() {
        var gate = self.gate()
        _ = gate.observe(received: 0, now: 0)
        #expect(gate.observe(received: 900_000, now: 1.0) == .split, "0.9 MB in a second is under 1 MiB/s")
        var other = self.gate()
        _ = other.observe(received: 0, now: 0)
        #expect(other.observe(received: 1_100_000, now: 1.0) == .single)
    }

    @Test("The gate can be open from the start, or opened when the first connection ends")
    func forced() {
        var open = SplitGate.open
        #expect(open.observe(received: 0, now: 0) == .split)
        var gate = self.gate()
        _ = gate.observe(received: 0, now: 0)
        #expect(gate.observe(received: 500_000, now: 0.05) == .single)
        #expect(gate.forceOpen() == .split)
        #expect(gate.observe(received: 5_000_000, now: 0.06) == .split)
    }

    @Test("A window in which the disk held the connection back counts as fast enough: more connections would wait for the same disk")
    func heldBackByDisk() {
        var gate = self.gate()
        _ = gate.observe(received: 0, now: 0)
        #expect(gate.observe(received: 10_000, now: 0.1, heldBackByDisk: true) == .single, "slow, but because of the disk")
        #expect(gate.observe(received: 20_000, now: 0.2, heldBackByDisk: true) == .single)
        #expect(gate.observe(received: 30_000, now: 0.35) == .split, "slow, and the disk kept up: the network is the limit")
    }
}
