import HaulCore
import Testing

@Suite("Split gate: extra connections only when one is not fast enough")
struct SplitGateTests {
    /// 1 MiB/s threshold, 100 ms windows: a window's worth is 104,857.6 bytes.
    private func gate() -> SplitGate { SplitGate(window: 0.1, fastEnough: 1_048_576) }

    @Test("A connection that stays fast keeps the download to itself, window after window")
    func fastStaysSingle() {
        var gate = self.gate()
        let opens1 = gate.observe(received: 0, now: 0)
        #expect(!opens1, "the first look starts the window")
        let opens2 = gate.observe(received: 50_000, now: 0.05)
        #expect(!opens2, "half a window, half its bytes: not decided")
        let opens3 = gate.observe(received: 110_000, now: 0.09)
        #expect(!opens3, "a window's worth before the window ended: fast")
        // The next window starts at 0.09 with 110,000 bytes.
        let opens4 = gate.observe(received: 120_000, now: 0.15)
        #expect(!opens4, "a window in progress decides nothing")
        let opens5 = gate.observe(received: 230_000, now: 0.19)
        #expect(!opens5)
        let opens6 = gate.observe(received: 1_300_000, now: 1.0)
        #expect(!opens6, "1.07 MB in 0.81 s is still fast enough")
        #expect(!gate.isOpen)
    }

    @Test("A slow first window opens the gate, for good")
    func slowOpens() {
        var gate = self.gate()
        _ = gate.observe(received: 0, now: 0)
        let opens7 = gate.observe(received: 10_000, now: 0.05)
        #expect(!opens7, "half a window: not decided yet")
        let opens8 = gate.observe(received: 20_000, now: 0.1)
        #expect(opens8, "20 KB in a window of 100 ms: 0.2 MB/s")
        let opens9 = gate.observe(received: 10_000_000, now: 0.11)
        #expect(opens9, "open stays open, however fast it gets")
        #expect(gate.isOpen)
    }

    @Test("A fast connection that slows down (or stalls) opens the gate at the end of that window")
    func slowdownOpens() {
        var gate = self.gate()
        _ = gate.observe(received: 0, now: 0)
        let opens10 = gate.observe(received: 200_000, now: 0.1)
        #expect(!opens10)
        let opens11 = gate.observe(received: 250_000, now: 0.15)
        #expect(!opens11)
        let opens12 = gate.observe(received: 250_000, now: 0.2)
        #expect(opens12, "a stall: nothing more in the next window")
    }

    @Test("A late look judges the whole time since the window started")
    func lateLook() {
        var gate = self.gate()
        _ = gate.observe(received: 0, now: 0)
        let opens13 = gate.observe(received: 900_000, now: 1.0)
        #expect(opens13, "0.9 MB in a second is under 1 MiB/s")
        var other = self.gate()
        _ = other.observe(received: 0, now: 0)
        let opens14 = other.observe(received: 1_100_000, now: 1.0)
        #expect(!opens14)
    }

    @Test("The gate can be open from the start, or opened when the first connection ends")
    func forced() {
        var open = SplitGate.open
        let opens15 = open.observe(received: 0, now: 0)
        #expect(opens15)
        var gate = self.gate()
        _ = gate.observe(received: 0, now: 0)
        let opens16 = gate.observe(received: 500_000, now: 0.05)
        #expect(!opens16)
        gate.open()
        let opens17 = gate.observe(received: 5_000_000, now: 0.06)
        #expect(opens17)
    }

    @Test("A window in which the disk held the connection back counts as fast enough: more connections would wait for the same disk")
    func heldBackByDisk() {
        var gate = self.gate()
        _ = gate.observe(received: 0, now: 0)
        let opens18 = gate.observe(received: 10_000, now: 0.1, heldBackByDisk: true)
        #expect(!opens18, "slow, but because of the disk")
        let opens19 = gate.observe(received: 20_000, now: 0.2, heldBackByDisk: true)
        #expect(!opens19)
        let opens20 = gate.observe(received: 30_000, now: 0.35)
        #expect(opens20, "slow, and the disk kept up: the network is the limit")
    }
}
