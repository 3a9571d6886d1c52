import HaulCore
import Testing

@Suite("Hex encoding")
struct HexEncodingTests {
    @Test("Lowercase, two digits per byte, leading zeros kept")
    func hex() {
        #expect([UInt8]().hexString == "")
        #expect([0x00, 0x0f, 0xa0, 0xff].hexString == "000fa0ff")
        #expect(Array("Haul".utf8).hexString == "4861756c")
    }
}
