import Foundation
import HaulCore
import Testing

/// The pure parts of aria2's RPC: envelopes, the token rule, result shapes, windows, queue
/// positions, options and notifications, without a socket.
@Suite("aria2 RPC rules")
struct Aria2RPCTests {
    static func json(_ text: String) -> JSONValue {
        try! JSONValue(parsing: Array(text.utf8))
    }

    static func object(_ bytes: [UInt8]) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any] ?? [:]
    }

    static func info(state: QueuedDownloadState = .active, done: Int64 = 0, total: Int64? = nil) -> QueuedDownloadInfo {
        var info = QueuedDownloadInfo(
            id: 7,
            urls: [URL(string: "http://127.0.0.1:8080/a.iso")!, URL(string: "http://127.0.0.1:8081/a.iso")!],
            directory: "/srv/dl",
            fileName: "a.iso",
            path: "/srv/dl/a.iso.7.haul-part",
            state: state,
            bytesDone: done,
            totalBytes: total,
            errorMessage: nil,
            checksum: nil,
            priority: 0,
            speedLimit: nil,
            createdAt: Date(timeIntervalSince1970: 1_700_000_000),
            startedAt: nil,
            finishedAt: nil,
            gid: "00000000000000a7"
        )
        info.speed = 1234.4
        return info
    }

    // MARK: - Envelopes

    @Test("A request, a batch, and what is not a call are told apart; parse errors answer with a null id")
    func envelopes() {
        #expect(Aria2Envelope.parse(Array(#"{"jsonrpc":"2.0","id":"a","method":"aria2.getVersion","params":["token:x"]}"#.utf8))
            == .single(.success(Aria2Call(id: .string("a"), method: "aria2.getVersion", params: [.string("token:x")]))))
        #expect(Aria2Envelope.parse(Array("{\"id\":1,\"method\":\"m\"}".utf8)) == .single(.success(Aria2Call(id: .integer(1), method: "m", params: []))))
        #expect(Aria2Envelope.parse(Array("{not json".utf8)) == .single(.failure(Aria2FaultWithID(id: .null, fault: .parseError))))
        #expect(Aria2Envelope.parse(Array("[]".utf8)) == .single(.failure(Aria2FaultWithID(id: .null, fault: .invalidRequest))))
        guard case .batch(let calls) = Aria2Envelope.parse(Array(#"[{"id":1,"method":"a"},5,{"id":2},{"id":3,"method":"b","params":{}}]"#.utf8)) else {
            Issue.record("not a batch")
            return
        }
        #expect(calls.count == 4)
        #expect(calls[0] == .success(Aria2Call(id: .integer(1), method: "a", params: [])))
        #expect(calls[1] == .failure(Aria2FaultWithID(id: .null, fault: .invalidRequest)))
        #expect(calls[2] == .failure(Aria2FaultWithID(id: .integer(2), fault: .invalidRequest)))
        guard case .failure(let fault) = calls[3] else {
            Issue.record("params object accepted")
            return
        }
        #expect(fault.fault.code == -32602)
    }

    @Test("Values read with their JSON types: booleans are not numbers, integers stay exact")
    func values() throws {
        let value = try JSONValue(parsing: Array(#"{"t":true,"f":false,"one":1,"zero":0,"neg":-7,"big":9007199254740993,"half":1.5,"whole":2.0,"s":"é\n","n":null,"a":[[],{}]}"#.utf8))
        #expect(value["t"] == .bool(true) && value["f"] == .bool(false))
        #expect(value["one"] == .integer(1) && value["zero"] == .integer(0) && value["neg"] == .integer(-7))
        #expect(value["big"] == .integer(9_007_199_254_740_993))
        #expect(value["half"] == .double(1.5) && value["whole"] == .double(2) && value["whole"]?.integerValue == 2)
        #expect(value["s"] == .string("é\n") && value["n"] == .null)
        #expect(value["a"] == .array([.array([]), .object([])]))
        #expect(try JSONValue(parsing: Array("\"bare\"".utf8)) == .string("bare"))
        #expect(throws: (any Error).self) { try JSONValue(parsing: [0xFF, 0xFE, 0x7B]) }
        #expect(throws: (any Error).self) { try JSONValue(parsing: Array("{\"a\":}".utf8)) }
    }

    @Test("Deep nesting and huge numbers are refused or read, never a crash")
    func hostileJSON() {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(Aria2Envelope.parse(Array(deep.utf8)) == .single(.failure(Aria2FaultWithID(id: .null, fault: .parseError))))
        let big = Aria2Envelope.parse(Array(#"{"id":1e400,"method":"m","params":[123456789012345678901234567890]}"#.utf8))
        if case .single(.success(let call)) = big {
            #expect(call.params.count == 1)
        }
    }

    @Test("Answers have aria2's shape: id, jsonrpc, then result or error")
    func answers() {
        let result = Aria2Envelope.result(id: .string("x"), .string("OK"))
        #expect(String(decoding: result.bytes, as: UTF8.self) == #"{"id":"x","jsonrpc":"2.0","result":"OK"}"#)
        let error = Aria2Envelope.error(id: .integer(3), .unauthorized)
        #expect(String(decoding: error.bytes, as: UTF8.self) == #"{"id":3,"jsonrpc":"2.0","error":{"code":1,"message":"Unauthorized"}}"#)
        let notification = Aria2Envelope.notification("aria2.onDownloadStart", gid: "2089b05ecca3d829")
        #expect(String(decoding: notification.bytes, as: UTF8.self)
            == #"{"jsonrpc":"2.0","method":"aria2.onDownloadStart","params":[{"gid":"2089b05ecca3d829"}]}"#)
    }

    // MARK: - Token

    @Test("The token is the first parameter; wrong or missing is Unauthorized; without a secret it is optional")
    func token() throws {
        let params: [JSONValue] = [.string("token:s3cret"), .array([.string("http://x/")])]
        #expect(try Aria2Token.strip(params, secret: "s3cret") == [.array([.string("http://x/")])])
        #expect(throws: Aria2Fault.unauthorized) { try Aria2Token.strip([.string("token:s3creT")], secret: "s3cret") }
        #expect(throws: Aria2Fault.unauthorized) { try Aria2Token.strip([.string("token:s3cret2")], secret: "s3cret") }
        #expect(throws: Aria2Fault.unauthorized) { try Aria2Token.strip([.array([])], secret: "s3cret") }
        #expect(throws: Aria2Fault.unauthorized) { try Aria2Token.strip([], secret: "s3cret") }
        #expect(try Aria2Token.strip(params, secret: nil) == [.array([.string("http://x/")])])
        #expect(try Aria2Token.strip([.array([])], secret: "") == [.array([])])
    }

    // MARK: - Status

    @Test("Status: numbers as strings, aria2's keys in order, files and URIs, live speed only when active")
    func status() throws {
        let active = Self.object(Aria2Status.bytes(Self.info(done: 3 << 20, total: 10 << 20), keys: nil))
        #expect(active["gid"] as? String == "00000000000000a7")
        #expect(active["status"] as? String == "active")
        #expect(active["totalLength"] as? String == "10485760")
        #expect(active["completedLength"] as? String == "3145728")
        #expect(active["downloadSpeed"] as? String == "1234")
        #expect(active["uploadSpeed"] as? String == "0")
        #expect(active["connections"] as? String == "1")
        #expect(active["numPieces"] as? String == "10")
        #expect(active["pieceLength"] as? String == "1048576")
        #expect(active["bitfield"] as? String == "e000")
        #expect(active["errorCode"] == nil)
        let file = try #require((active["files"] as? [[String: Any]])?.first)
        #expect(file["path"] as? String == "/srv/dl/a.iso")
        #expect(file["index"] as? String == "1")
        #expect(file["selected"] as? String == "true")
        let uris = try #require(file["uris"] as? [[String: String]])
        #expect(uris == [["status": "used", "uri": "http://127.0.0.1:8080/a.iso"], ["status": "waiting", "uri": "http://127.0.0.1:8081/a.iso"]])
        // Keys come out in aria2's (alphabetical) order (files left out: its members reuse names).
        let text = String(decoding: Aria2Status.bytes(Self.info(done: 1, total: 2), keys: .init(Aria2Status.keys.filter { $0 != "files" })), as: UTF8.self)
        let positions = Aria2Status.keys.compactMap { text.range(of: "\"\($0)\":")?.lowerBound }
        #expect(positions.count == Aria2Status.keys.count - 3)  // no files, errorCode, errorMessage
        #expect(positions == positions.sorted())

        var failed = Self.info(state: .error, done: 5, total: 9)
        failed.errorCode = 3
        failed.errorMessage = "the server answered 404"
        let error = Self.object(Aria2Status.bytes(failed, keys: .init(["gid", "status", "errorCode", "errorMessage", "downloadSpeed"])))
        #expect(error.count == 5)
        #expect(error["errorCode"] as? String == "3")
        #expect(error["errorMessage"] as? String == "the server answered 404")
        #expect(error["downloadSpeed"] as? String == "0")
        let complete = Self.object(Aria2Status.bytes(Self.info(state: .complete, done: 10, total: 10), keys: .init(["errorCode", "bitfield"])))
        // Each key selects exactly its own member; an unknown one selects nothing.
        var every = Self.info(state: .error, done: 5, total: 9)
        every.errorMessage = "x"
        for key in Aria2Status.keys {
            #expect(Array(Self.object(Aria2Status.bytes(every, keys: .init([key]))).keys) == [key], "\(key)")
        }
        #expect(Aria2Status.bytes(every, keys: .init(["follows"])) == Array("{}".utf8))
        #expect(complete["errorCode"] as? String == "0")
        #expect(complete["bitfield"] as? String == "80")
    }

    @Test("Bitfield: one bit per 1 MiB piece wholly on disk, padded to whole bytes")
    func bitfield() {
        let mib: Int64 = 1 << 20
        #expect(Aria2Status.bitfield(done: 0, total: 0).pieces == 0)
        #expect(Aria2Status.bitfield(done: 0, total: 1) == (1, "00"))
        #expect(Aria2Status.bitfield(done: 1, total: 1) == (1, "80"))
        #expect(Aria2Status.bitfield(done: mib - 1, total: 3 * mib) == (3, "00"))
        #expect(Aria2Status.bitfield(done: 8 * mib, total: 9 * mib + 1) == (10, "ff00"))
        #expect(Aria2Status.bitfield(done: 9 * mib + 1, total: 9 * mib + 1) == (10, "ffc0"))
        #expect(Aria2Status.bitfield(done: 12 * mib, total: 16 * mib) == (16, "fff0"))
    }

    // MARK: - Windows and positions

    @Test("tellWaiting/tellStopped windows: offsets from the start, negative ones from the end backwards")
    func windows() throws {
        #expect(try Aria2Window.indices(count: 5, offset: 0, num: 2) == [0, 1])
        #expect(try Aria2Window.indices(count: 5, offset: 3, num: 10) == [3, 4])
        #expect(try Aria2Window.indices(count: 5, offset: 5, num: 1) == [])
        #expect(try Aria2Window.indices(count: 5, offset: -1, num: 2) == [4, 3])
        #expect(try Aria2Window.indices(count: 5, offset: -2, num: 10) == [3, 2, 1, 0])
        #expect(try Aria2Window.indices(count: 5, offset: -6, num: 3) == [])
        #expect(try Aria2Window.indices(count: 0, offset: -1, num: 3) == [])
        #expect(try Aria2Window.indices(count: 5, offset: Int64.max, num: Int64.max) == [])
        #expect(try Aria2Window.indices(count: 5, offset: 1, num: Int64.max) == [1, 2, 3, 4])
        #expect(throws: Aria2Fault.self) { try Aria2Window.indices(count: 5, offset: 0, num: -1) }
    }

    @Test("changePosition: POS_SET, POS_CUR, POS_END, clamped; ranks between neighbours")
    func positions() throws {
        #expect(try Aria2Position.target(current: 3, count: 5, offset: 0, how: "POS_SET") == 0)
        #expect(try Aria2Position.target(current: 3, count: 5, offset: -1, how: "POS_CUR") == 2)
        #expect(try Aria2Position.target(current: 3, count: 5, offset: 9, how: "POS_CUR") == 4)
        #expect(try Aria2Position.target(current: 0, count: 5, offset: 0, how: "POS_END") == 4)
        #expect(try Aria2Position.target(current: 0, count: 5, offset: -2, how: "POS_END") == 2)
        #expect(try Aria2Position.target(current: 0, count: 5, offset: Int64.min, how: "POS_CUR") == 0)
        #expect(throws: Aria2Fault.self) { try Aria2Position.target(current: 0, count: 5, offset: 0, how: "pos_set") }
        #expect(Aria2Position.rank(at: 0, among: [1, 2, 3]) == 0)
        #expect(Aria2Position.rank(at: 3, among: [1, 2, 3]) == 4)
        #expect(Aria2Position.rank(at: 1, among: [1, 2, 3]) == 1.5)
        #expect(Aria2Position.rank(at: 1, among: [1, 1.0.nextUp]) == nil)
    }

    // MARK: - Options

    @Test("addUri options: what Haul acts on becomes the download, the rest is recorded, bad values refused")
    func options() throws {
        let options = Self.json(#"""
            {"dir":"/srv/x","out":"a.iso","checksum":"sha-256=\#(String(repeating: "ab", count: 32))","max-download-limit":"2M",
             "header":["X-A: 1","Cookie: k=v"],"referer":"http://r/","user-agent":"UA/1","pause":"true","split":"8",
             "max-connection-per-server":"16","gid":"0123456789ABCDEF","bt-max-peers":"5"}
            """#).objectValue!
        let download = try Aria2Options.newDownload(uris: ["http://127.0.0.1/a", "https://127.0.0.1/b"], options: options)
        #expect(download.urls.count == 2)
        #expect(download.directory == "/srv/x")
        #expect(download.fileName == "a.iso")
        #expect(download.checksum == "sha256=" + String(repeating: "ab", count: 32))
        #expect(download.speedLimit == 2 << 20)
        #expect(download.paused)
        #expect(download.gid == "0123456789abcdef")
        #expect(Set(download.requestHeaders ?? []) == ["X-A: 1", "Cookie: k=v", "Referer: http://r/", "User-Agent: UA/1"])
        #expect(download.options == ["split": "8", "max-connection-per-server": "16"])

        func refused(_ json: String, uris: [String] = ["http://127.0.0.1/a"]) -> String? {
            do {
                _ = try Aria2Options.newDownload(uris: uris, options: Self.json(json).objectValue!)
                return nil
            } catch {
                return error.message
            }
        }
        #expect(refused("{}", uris: ["ftp://127.0.0.1/a"])?.contains("not an http or https URI") == true)
        #expect(refused("{}", uris: [])?.contains("at least one") == true)
        #expect(refused(#"{"dir":"relative"}"#)?.contains("absolute") == true)
        #expect(refused(#"{"out":"../etc/passwd"}"#)?.contains("plain file name") == true)
        #expect(refused(#"{"checksum":"sha-256=zz"}"#)?.contains("checksum") == true)
        #expect(refused(#"{"max-download-limit":"fast"}"#)?.contains("max-download-limit") == true)
        #expect(refused(#"{"header":"NoColon"}"#)?.contains("Name: value") == true)
        #expect(refused(#"{"header":["X: a\r\nInjected: 1"]}"#)?.contains("line breaks") == true)
        #expect(refused(#"{"split":"0"}"#)?.contains("split") == true)
        #expect(refused(#"{"gid":"xyz"}"#)?.contains("16 hex digits") == true)
        #expect(refused(#"{"pause":"maybe"}"#)?.contains("true or false") == true)
        #expect(refused(#"{"dir":["/a"]}"#)?.contains("expected a string") == true)
    }

    @Test("getOption shows what the download was given and what Haul acts on")
    func getOption() {
        var info = Self.info(state: .paused)
        info.requestHeaders = ["X-A: 1", "Referer: http://r/", "User-Agent: UA/1"]
        info.options = ["split": "8"]
        info.speedLimit = 500
        let options = Dictionary(uniqueKeysWithValues: Aria2Options.options(of: info, globalDefaults: ["min-split-size": "4M", "bogus": "x"]))
        #expect(options["dir"] == "/srv/dl")
        #expect(options["out"] == "a.iso")
        #expect(options["split"] == "8")
        #expect(options["max-connection-per-server"] == "1")
        #expect(options["max-download-limit"] == "500")
        #expect(options["header"] == "X-A: 1")
        #expect(options["referer"] == "http://r/")
        #expect(options["user-agent"] == "UA/1")
        #expect(options["min-split-size"] == "4M")
        #expect(options["bogus"] == nil)
    }

    @Test("GIDs: 16 hex digits, case-insensitive, random ones never zero")
    func gids() {
        #expect(DownloadGID.normalized("2089B05ECCA3D829") == "2089b05ecca3d829")
        #expect(DownloadGID.normalized("2089b05ecca3d82") == nil)
        #expect(DownloadGID.normalized("2089b05ecca3d82g") == nil)
        #expect(DownloadGID.format(255) == "00000000000000ff")
        #expect(DownloadGID.format(.max) == "ffffffffffffffff" && DownloadGID.format(0x0123_4567_89AB_CDEF) == "0123456789abcdef")
        for _ in 0..<1000 {
            let value = UInt64.random(in: 0...UInt64.max)
            let hex = String(value, radix: 16)
            #expect(DownloadGID.format(value) == String(repeating: "0", count: 16 - hex.count) + hex)
        }
        let drawn = Set((0..<1000).map { _ in DownloadGID.random() })
        #expect(drawn.count == 1000)
        #expect(drawn.allSatisfy { DownloadGID.normalized($0) == $0 && $0 != "0000000000000000" })
        // Drawn for a batch at once: as many, all different, each a GID.
        let batch = DownloadGID.random(count: 1000)
        #expect(batch.count == 1000 && Set(batch).count == 1000 && Set(batch).isDisjoint(with: drawn))
        #expect(batch.allSatisfy { DownloadGID.normalized($0) == $0 && $0 != "0000000000000000" })
        #expect(DownloadGID.random(count: 0).isEmpty)
    }

    @Test("Error codes follow aria2's list")
    func errorCodes() {
        #expect(Aria2ErrorCode.code(urlErrorCode: URLError.badServerResponse.rawValue, serverStatus: 404, message: "") == 3)
        #expect(Aria2ErrorCode.code(urlErrorCode: nil, serverStatus: 401, message: "") == 24)
        #expect(Aria2ErrorCode.code(urlErrorCode: nil, serverStatus: 500, message: "") == 22)
        #expect(Aria2ErrorCode.code(urlErrorCode: URLError.timedOut.rawValue, serverStatus: nil, message: "") == 2)
        #expect(Aria2ErrorCode.code(urlErrorCode: URLError.cannotConnectToHost.rawValue, serverStatus: nil, message: "") == 6)
        #expect(Aria2ErrorCode.code(urlErrorCode: URLError.cannotWriteToFile.rawValue, serverStatus: nil, message: "No space left on device") == 9)
        #expect(Aria2ErrorCode.code(urlErrorCode: nil, serverStatus: nil, message: "checksum mismatch: expected …") == 32)
        #expect(Aria2ErrorCode.code(urlErrorCode: nil, serverStatus: nil, message: "odd") == 1)
    }

    // MARK: - Notifications

    @Test("Notifications: one per change of state, start again after an unpause, stop for a removal in progress")
    func notifications() {
        var tracker = Aria2NotificationTracker()
        tracker.seed(id: 1, gid: "g1", state: .paused)
        var sent: [[String]] = []
        sent.append(tracker.changed(id: 2, gid: "g2", state: .waiting))  // added: nothing
        sent.append(tracker.changed(id: 2, gid: "g2", state: .active))
        sent.append(tracker.changed(id: 2, gid: "g2", state: .active))  // progress: nothing
        sent.append(tracker.changed(id: 2, gid: "g2", state: .paused))
        sent.append(tracker.changed(id: 2, gid: "g2", state: .waiting))
        sent.append(tracker.changed(id: 2, gid: "g2", state: .active))
        sent.append(tracker.changed(id: 2, gid: "g2", state: .complete))
        sent.append(tracker.changed(id: 1, gid: "g1", state: .waiting))
        sent.append(tracker.changed(id: 1, gid: "g1", state: .active))
        sent.append(tracker.changed(id: 1, gid: "g1", state: .error))
        #expect(sent == [
            [], ["aria2.onDownloadStart"], [], ["aria2.onDownloadPause"], [], ["aria2.onDownloadStart"],
            ["aria2.onDownloadComplete"], [], ["aria2.onDownloadStart"], ["aria2.onDownloadError"],
        ])
        #expect(tracker.removed(id: 2) == nil)  // complete: already told
        _ = tracker.changed(id: 3, gid: "g3", state: .active)
        #expect(tracker.removed(id: 3)! == ("aria2.onDownloadStop", "g3"))
        #expect(tracker.changed(id: 4, gid: "g4", state: .active) == ["aria2.onDownloadStart"])
        #expect(tracker.changed(id: 4, gid: "g4", state: .removed) == ["aria2.onDownloadStop"])
        #expect(tracker.removed(id: 4) == nil)
        #expect(tracker.changed(id: 5, gid: "g5", state: .paused).isEmpty)  // added paused
        // Ended straight from waiting (never heard active): its start comes first, as in aria2.
        #expect(tracker.changed(id: 6, gid: "g6", state: .waiting).isEmpty)
        #expect(tracker.changed(id: 6, gid: "g6", state: .complete) == ["aria2.onDownloadStart", "aria2.onDownloadComplete"])
        #expect(tracker.changed(id: 7, gid: "g7", state: .waiting).isEmpty)
        #expect(tracker.changed(id: 7, gid: "g7", state: .error) == ["aria2.onDownloadStart", "aria2.onDownloadError"])
        // Paused, then cancelled or resumed: no start that did not happen.
        #expect(tracker.changed(id: 5, gid: "g5", state: .removed) == ["aria2.onDownloadStop"])
    }
}
