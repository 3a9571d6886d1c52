import NIOCore
import Testing

@testable import HaulEngine

@Suite("BandwidthLimiter: no pause while no rate is set, pauses once one is, none again once it is removed")
struct BandwidthLimiterTests {
    @Test("A rate set, changed and removed at run time decides the pauses from the next chunk on")
    func rateChangesApply() {
        let limiter = BandwidthLimiter(bytesPerSecond: 0)
        #expect(limiter.take(10 << 20) == .zero, "unlimited: never a pause")
        limiter.setRate(bytesPerSecond: 64 << 10)
        // The burst (a quarter second, at least 16 KiB) is used up by the first 1 MiB: a pause.
        #expect(limiter.take(1 << 20) > .zero)
        limiter.setRate(bytesPerSecond: 0)
        #expect(limiter.take(10 << 20) == .zero)
        // Limited from the start: the fast path must not skip a rate given at creation.
        let limited = BandwidthLimiter(bytesPerSecond: 64 << 10)
        #expect(limited.take(1 << 20) > .zero)
    }
}
