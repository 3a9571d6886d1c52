import HaulCore
import Testing

@Suite("Mirror rules")
struct MirrorRulesTests {
    let primary = EntityValidators(entityTag: "\"a-100\"", lastModified: "Tue, 01 Sep 2020 00:00:00 GMT")

    func answer(status: Int = 206, range: String? = "bytes 0-9/100", etag: String? = "\"a-100\"", lastModified: String? = nil) -> HTTPHeaderFields {
        var headers = HTTPHeaderFields()
        if let range { headers.add(name: "Content-Range", value: range) }
        if let etag { headers.add(name: "ETag", value: etag) }
        if let lastModified { headers.add(name: "Last-Modified", value: lastModified) }
        headers.add(name: "Content-Length", value: "10")
        return headers
    }

    func judge(_ headers: HTTPHeaderFields, status: Int = 206, policy: MirrorRules.Policy = .sameValidators) -> MirrorRules.Verdict {
        MirrorRules.judgeFirstAnswer(status: status, headers: headers, asked: 0..<10, length: 100, primary: self.primary, policy: policy)
    }

    @Test("The same strong ETag and length: accepted, its own validator goes into If-Range")
    func sameEntity() {
        #expect(self.judge(self.answer()) == .accepted(ifRange: "\"a-100\"", validators: EntityValidators(entityTag: "\"a-100\"")))
    }

    @Test("Another ETag, another length, a 200, a lying Content-Range: dropped, each with its reason")
    func disagreements() {
        guard case .dropped(let etag) = self.judge(self.answer(etag: "\"b-100\"")) else { Issue.record("another ETag accepted"); return }
        #expect(etag.contains("\"b-100\"") && etag.contains("\"a-100\"") && etag.contains("checksum"))
        guard case .dropped(let length) = self.judge(self.answer(range: "bytes 0-9/101")) else { Issue.record("another length accepted"); return }
        #expect(length == "its length 101 bytes is not the primary's 100")
        guard case .dropped(let whole) = self.judge(self.answer(range: nil), status: 200) else { Issue.record("200 accepted"); return }
        #expect(whole.contains("200"))
        guard case .dropped(let lying) = self.judge(self.answer(range: "bytes 1-9/100")) else { Issue.record("lying range accepted"); return }
        #expect(lying.contains("Content-Range"))
        guard case .dropped(let none) = self.judge(self.answer(etag: nil)) else { Issue.record("no validators accepted"); return }
        #expect(none.contains("no validator"))
    }

    @Test("With a checksum to verify the file, another ETag (or none) of the same length is accepted; another length still is not")
    func checksumPolicy() {
        #expect(self.judge(self.answer(etag: "\"b-100\""), policy: .verifiedByChecksum) == .accepted(ifRange: "\"b-100\"", validators: EntityValidators(entityTag: "\"b-100\"")))
        #expect(self.judge(self.answer(etag: nil), policy: .verifiedByChecksum) == .accepted(ifRange: nil, validators: EntityValidators()))
        guard case .dropped = self.judge(self.answer(range: "bytes 0-9/101"), policy: .verifiedByChecksum) else { Issue.record("another length accepted"); return }
    }

    @Test("Without a strong ETag to compare, the primary's Last-Modified (a mirror keeps modification times) names the same file; different strong ETags never do")
    func lastModified() {
        let date = "Tue, 01 Sep 2020 00:00:00 GMT"
        #expect(self.judge(self.answer(etag: nil, lastModified: date)) == .accepted(ifRange: date, validators: EntityValidators(lastModified: date)))
        #expect(self.judge(self.answer(etag: "W/\"weak\"", lastModified: date)) == .accepted(ifRange: date, validators: EntityValidators(entityTag: "W/\"weak\"", lastModified: date)))
        // Two strong tags that differ are two files, whatever the dates say.
        guard case .dropped = self.judge(self.answer(etag: "\"other\"", lastModified: date)) else { Issue.record("another strong ETag accepted"); return }
        guard case .dropped = self.judge(self.answer(etag: nil, lastModified: "Wed, 02 Sep 2020 00:00:00 GMT")) else { Issue.record("another date accepted"); return }
    }
}
