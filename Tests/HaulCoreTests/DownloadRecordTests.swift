import Foundation
@testable import HaulCore
import Testing

/// Records written by hand must read back exactly as the downloads they were written from.
@Suite("Download records and the in-memory index")
struct DownloadRecordTests {
    static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }()

    static func info(
        id: Int64,
        name: String? = nil,
        state: QueuedDownloadState = .paused,
        url: String = "http://127.0.0.1:8080/file.iso"
    ) -> QueuedDownloadInfo {
        QueuedDownloadInfo(
            id: id,
            urls: [URL(string: url)!],
            directory: "/srv/downloads",
            fileName: name,
            path: nil,
            state: state,
            bytesDone: 0,
            totalBytes: nil,
            errorMessage: nil,
            checksum: nil,
            priority: 0,
            speedLimit: nil,
            createdAt: Date(timeIntervalSince1970: 1_700_000_000),
            startedAt: nil,
            finishedAt: nil
        )
    }

    /// Every optional present, strings that need escaping, Unicode, extreme numbers.
    static var awkward: QueuedDownloadInfo {
        var info = Self.info(id: Int64.max, name: "quote \" back\\slash\ttab\nnew\u{1}ctl\u{7f} é 日本 🚀.bin")
        info.urls = [URL(string: "https://127.0.0.1/a%20b?x=1&y=%22")!, URL(string: "http://[::1]:81/mirror")!]
        info.directory = "/home/u/Down loads/\u{1b}[31m"
        info.path = "/tmp/\"x\".haul-part"
        info.state = .error
        info.bytesDone = 1 << 40
        info.totalBytes = Int64.max
        info.speed = 1234.5
        info.secondsRemaining = 1e300
        info.errorMessage = "connection refused by 127.0.0.1; retrying\r\n\u{0}"
        info.checksum = "sha-256=abc"
        info.priority = -7
        info.speedLimit = 500_000
        info.gid = "0123456789abcdef"
        info.errorCode = 22
        info.requestHeaders = ["X-Quote: \"q\"", "Referer: http://r/é"]
        info.options = ["split": "8", "weird \"key\"": "v\n"]
        info.queueRank = -12.5
        info.connections = 7
        info.maximumConnections = 16
        info.segments = ByteRangeSet([0..<1024, 4096..<(1 << 41)])
        info.runner = "node \"b\" é"
        info.fileCount = 12_345
        info.startedAt = Date(timeIntervalSince1970: 1_700_000_123.9)
        info.finishedAt = Date(timeIntervalSince1970: 4_102_444_799)  // 2099-12-31T23:59:59Z
        return info
    }

    @Test("A record reads back as the download it was written from, and as JSONEncoder's output reads")
    func roundTrip() throws {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        for info in [Self.info(id: 1), Self.info(id: 0, name: ""), Self.awkward] {
            let record = DownloadRecord(info)
            let decoded = try Self.decoder.decode(QueuedDownloadInfo.self, from: Data(record.bytes))
            var expected = info
            // ISO 8601 dates carry whole seconds (as JSONEncoder writes them).
            expected.startedAt = info.startedAt.map { Date(timeIntervalSince1970: $0.timeIntervalSince1970.rounded(.down)) }
            #expect(decoded == expected, "\(String(decoding: record.bytes, as: UTF8.self))")
            let ours = try JSONSerialization.jsonObject(with: Data(record.bytes)) as! NSDictionary
            let foundation = try JSONSerialization.jsonObject(with: encoder.encode(info)) as! NSDictionary
            #expect(ours == foundation, "same members and values as JSONEncoder writes")
        }
    }

    @Test("A projection has exactly the asked members, in the asked order, with the same values")
    func projection() throws {
        let record = DownloadRecord(Self.awkward)
        let full = try JSONSerialization.jsonObject(with: Data(record.bytes)) as! [String: Any]
        let cases: [[DownloadField]] = [
            [.id, .state],
            [.state, .id],
            [.finishedAt],
            [.id],
            DownloadField.allCases,
            DownloadField.allCases.reversed(),
            [.fileName, .errorMessage, .urls],
        ]
        for fields in cases {
            var bytes: [UInt8] = []
            record.write(to: &bytes, fields: fields)
            // A record made with those members only (a `queueAdd` answer with `fields`) writes
            // the same bytes.
            var made: [UInt8] = []
            DownloadRecord(Self.awkward, only: fields).write(to: &made, fields: fields)
            #expect(made == bytes, "\(fields)")
            let text = String(decoding: bytes, as: UTF8.self)
            let object = try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any], "\(text)")
            #expect(Set(object.keys) == Set(fields.map(\.rawValue)), "\(text)")
            for field in fields {
                #expect((object[field.rawValue] as? NSObject) == (full[field.rawValue] as? NSObject), "\(field)")
            }
            // Members come in the order asked.
            let positions = fields.map { text.range(of: "\"\($0.rawValue)\":")!.lowerBound }
            #expect(positions == positions.sorted())
        }
        // Absent members are left out, not written as null; an empty projection is {}.
        var bytes: [UInt8] = []
        DownloadRecord(Self.info(id: 3)).write(to: &bytes, fields: [.errorMessage, .id, .speed])
        #expect(String(decoding: bytes, as: UTF8.self) == #"{"id":3}"#)
        bytes = []
        DownloadRecord(Self.info(id: 3)).write(to: &bytes, fields: [])
        #expect(String(decoding: bytes, as: UTF8.self) == "{}")
        let array = DownloadRecord.array([DownloadRecord(Self.info(id: 1)), DownloadRecord(Self.info(id: 2))], fields: [.id])
        #expect(String(decoding: array, as: UTF8.self) == #"[{"id":1},{"id":2}]"#)
        #expect(DownloadRecord(Self.info(id: 1), only: [.id]).bytes == Array(#"{"id":1}"#.utf8), "nothing but the members asked for is written")
        #expect(String(decoding: DownloadRecord.array([], fields: nil), as: UTF8.self) == "[]")
    }

    @Test("Unknown fields are refused by name; the list request carries the fields")
    func fieldsInRequests() throws {
        #expect(throws: UnknownDownloadField.self) { try DownloadField.parse(["id", "status"]) }
        #expect("\(UnknownDownloadField(name: "status"))".contains("unknown field 'status'"))
        let line = #"{"id":1,"method":"queueList","fields":["id","state"],"limit":5}"#
        let request = try JSONDecoder().decode(DaemonRequest.self, from: Data(line.utf8))
        #expect(request.command == .queueList(QueuePage(limit: 5, fields: [.id, .state])))
        do {
            _ = try JSONDecoder().decode(DaemonRequest.self, from: Data(#"{"id":1,"method":"queueList","fields":["status"]}"#.utf8))
            Issue.record("an unknown field was accepted")
        } catch DecodingError.dataCorrupted(let context) {
            #expect(context.debugDescription.contains("unknown field 'status'"))
        }
    }

    @Test("Every member of a response reads back as written: its decoding is written out by hand (for projected downloads), and a member added without it fails here")
    func responseMembersRoundTrip() throws {
        let date = Date(timeIntervalSince1970: 1_700_000_000)
        var response = DaemonResponse(id: 9, error: "refused")
        response.taskID = 3
        response.tasks = [DaemonTaskSnapshot(taskID: 3, originalURL: URL(string: "http://127.0.0.1/a")!, currentURL: URL(string: "http://127.0.0.1/b")!,
                                             state: "running", bytesOnDisk: 10, entityLength: 20, taskDescription: "t", isUpload: false)]
        response.resumeData = Data([1, 2, 3])
        response.processID = 42
        response.download = Self.info(id: 2, name: "b.iso", state: .complete)
        response.downloads = [Self.info(id: 1), Self.info(id: 3, state: .error)]
        response.settings = QueueSettings(defaultDirectory: "/srv")
        response.count = 2
        response.total = 7
        response.webURL = "http://127.0.0.1:6809/"
        response.rpcURL = "http://127.0.0.1:6800/jsonrpc"
        response.rpcSecret = "secret"
        response.fleet = [DaemonPresence(name: "d0", pid: 1, startedAt: date, seenAt: date, downloads: [1])]
        response.daemonName = "d0"
        response.store = "sqlite:/srv/haul.sqlite"
        response.files = [
            ListFileInfo(position: 0, url: URL(string: "http://127.0.0.1/f0")!, state: .done, path: "/srv/f0", bytes: 12),
            ListFileInfo(position: 1, url: URL(string: "http://127.0.0.1/f1")!, state: .failed, error: "the server answered 404"),
        ]
        response.fileCounts = ListFileCounts(done: 1, failed: 1, waiting: 3)
        // Every stored member is set, but the three that are never sent (read-only ids and
        // projected fields, the daemon's pre-written array): a member added later must be set
        // here too.
        let unset = Mirror(reflecting: response).children.filter { child in
            guard let label = child.label, !["downloadIDs", "downloadFields", "encodedDownloads"].contains(label) else { return false }
            return Mirror(reflecting: child.value).displayStyle == .optional && Mirror(reflecting: child.value).children.isEmpty
        }
        #expect(unset.isEmpty, "members not set: \(unset.compactMap(\.label))")
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        let decoded = try Self.decoder.decode(DaemonResponse.self, from: encoder.encode(response))
        #expect(decoded == response)
    }

    @Test("A response line carries pre-written downloads as its downloads member")
    func responseLine() throws {
        var response = DaemonResponse(id: 4)
        response.total = 2
        response.encodedDownloads = DownloadRecord.array([DownloadRecord(Self.info(id: 1)), DownloadRecord(Self.awkward)], fields: nil)
        let line = try DaemonServerLine(response: response).encoded()
        #expect(line.last == UInt8(ascii: "\n"))
        #expect(!line.dropLast().contains(UInt8(ascii: "\n")), "one line")
        let decoded = try Self.decoder.decode(DaemonServerLine.self, from: Data(line))
        #expect(decoded.response?.id == 4)
        #expect(decoded.response?.total == 2)
        #expect(decoded.response?.downloads?.map(\.id) == [1, Int64.max])
        #expect(decoded.response?.downloads?.last?.fileName == Self.awkward.fileName)
        let empty = try DaemonServerLine(response: { var r = DaemonResponse(id: 5); r.encodedDownloads = Array("[]".utf8); return r }()).encoded()
        #expect(try Self.decoder.decode(DaemonServerLine.self, from: Data(empty)).response?.downloads == [])
        #expect(JSONWriter.inserting(member: "a", raw: Array("1".utf8), into: Array("{}".utf8)) == Array(#"{"a":1}"#.utf8))
    }

    @Test("Integers are written as their decimal text, whatever their type and sign; names verbatim; doubles as Swift prints them")
    func integersAndVerbatim() {
        func written(_ body: (inout JSONWriter) -> Void) -> String {
            var writer = JSONWriter()
            body(&writer)
            return String(decoding: writer.bytes, as: UTF8.self)
        }
        var values: [Int64] = [0, 1, -1, 9, 10, -10, 99, 100, 1 << 33, Int64.max, Int64.min, Int64.min + 1, 1_000_000_000_000_000_000]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2_000 { values.append(Int64.random(in: Int64.min...Int64.max, using: &generator) >> Int64.random(in: 0...63, using: &generator)) }
        for value in values { #expect(written { $0.append(integer: value) } == String(value)) }
        #expect(written { $0.append(integer: Int(-42)) } == "-42")
        #expect(written { $0.append(integer: UInt8(255)) } == "255")
        #expect(written { $0.append(integer: Int8.min) } == "-128")
        #expect(written { $0.append(integer: UInt64.max) } == "18446744073709551615", "beyond Int64: the generic conversion")
        #expect(written { $0.append(integer: UInt64(Int64.max) + 1) } == "9223372036854775808")
        #expect(written { $0.append(verbatim: "bytesDone"); $0.append(verbatim: "ü\"") } == "bytesDoneü\"")
        #expect(written { $0.append(double: 0.1); $0.append(UInt8(ascii: ",")); $0.append(double: .infinity) } == "0.1,null")
    }

    @Test("Strings read back as they were, whatever byte needs escaping at whatever place of eight, and are escaped only where needed")
    func stringsEscapedAtEveryPlace() throws {
        func written(_ string: String) -> [UInt8] {
            var writer = JSONWriter()
            writer.append(string: string)
            return writer.bytes
        }
        // Each byte that needs escaping, and the plain bytes next to the edges of the tests
        // (0x1f/0x20, 0x21-0x23, 0x5b-0x5d, 0x7f, 0x80, UTF-8 above), at every offset of strings
        // of 0 to 40 bytes: a word scanned whole must never hide one.
        let special: [String] = ["\"", "\\", "\n", "\r", "\t", "\u{0}", "\u{1}", "\u{1f}", " ", "!", "#", "[", "]", "\u{7f}", "\u{80}", "é", "日"]
        for length in 0...40 {
            for offset in 0...max(0, length - 1) where offset < max(length, 1) {
                for character in special {
                    var scalars = Array(repeating: "a", count: length)
                    if length > 0 { scalars[offset] = character }
                    let string = scalars.joined()
                    let bytes = written(string)
                    #expect(try JSONDecoder().decode(String.self, from: Data(bytes)) == string, "\(length) bytes, \(character.debugDescription) at \(offset)")
                    // Escaped only where needed: the quotes and one escape for each byte that needs one.
                    let needing = string.utf8.filter { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }.count
                    #expect(bytes.count >= string.utf8.count + 2 + needing)
                    if needing == 0 { #expect(bytes == [UInt8(ascii: "\"")] + Array(string.utf8) + [UInt8(ascii: "\"")]) }
                }
            }
        }
        // Random strings of every kind of byte, against JSONEncoder's reading.
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            let string = String((0..<Int.random(in: 0...48, using: &generator)).map { _ in
                Character(Unicode.Scalar([0x0, 0x9, 0x1f, 0x22, 0x5c, 0x41, 0x7a, 0xe9, 0x65e5].randomElement(using: &generator)!)!)
            })
            #expect(try JSONDecoder().decode(String.self, from: Data(written(string))) == string)
        }
        // The word test itself: a byte that needs escaping at any of the eight places is found.
        for place in 0..<8 {
            for byte in [0x00, 0x1f, 0x22, 0x5c] as [UInt64] {
                let word = (0x6161_6161_6161_6161 as UInt64) & ~(0xff << (8 * place)) | byte << (8 * place)
                #expect(JSONWriter.mayNeedEscaping(word), "byte \(byte) at \(place)")
            }
        }
        #expect(!JSONWriter.mayNeedEscaping(0x6161_6161_6161_6161))
        #expect(!JSONWriter.mayNeedEscaping(0xe697_a5e6_97a5_2020), "UTF-8 and spaces")
    }

    @Test("A downloads member is found wherever it is in a short line, and nothing else is taken for one")
    func downloadsMemberFound() {
        let member = Array(#""downloads":"#.utf8)
        func naive(_ bytes: [UInt8]) -> Bool {
            bytes.count >= member.count && (0...(bytes.count - member.count)).contains { Array(bytes[$0..<$0 + member.count]) == member }
        }
        // Near misses around it: a cut name, no colon, a quote at the very end, quotes everywhere.
        let decoys: [[UInt8]] = [Array(#""download":"#.utf8), Array(#""downloads""#.utf8), Array(#""downloads :"#.utf8), Array(#"""""#.utf8), Array(#"x""#.utf8)]
        for length in 0...40 {
            for offset in 0...length {
                for inserted in decoys + [member] {
                    let line = Array(repeating: UInt8(ascii: "\""), count: offset) + inserted + Array(repeating: UInt8(ascii: "a"), count: length - offset)
                    let found = line.withUnsafeBytes { DaemonServerLine.mentionsDownloads($0) }
                    #expect(found == naive(line), "\(String(decoding: line, as: UTF8.self))")
                }
            }
        }
        #expect([UInt8]().withUnsafeBytes { DaemonServerLine.mentionsDownloads($0) } == false)
        #expect(member.withUnsafeBytes { DaemonServerLine.mentionsDownloads($0) })
        #expect(Array(member.dropLast()).withUnsafeBytes { DaemonServerLine.mentionsDownloads($0) } == false)
    }

    @Test("The index keeps id order, replaces by id, counts per state and pages as the store did")
    func index() {
        var index = DownloadIndex()
        for id in [5, 1, 3, 9, 7] as [Int64] { index.put(Self.info(id: id, name: "file\(id).ISO")) }
        #expect(index.entries.map(\.id) == [1, 3, 5, 7, 9])
        index.put(Self.info(id: 3, name: "Ünïcode 日本.bin", state: .waiting))
        index.put(Self.info(id: 9, state: .complete, url: "http://127.0.0.1/Path/Other.TAR"))
        index.put(Self.info(id: 10, state: .removed))
        #expect(index.count == 6)
        #expect(index.stateCounts == [.paused: 3, .waiting: 1, .complete: 1, .removed: 1])
        #expect(index.ids(in: [.paused, .waiting]) == [1, 3, 5, 7])
        #expect(index.entry(id: 3)?.state == .waiting)
        #expect(index.entry(id: 4) == nil)

        let all = index.page(QueuePage())
        #expect(all.entries.map(\.id) == [1, 3, 5, 7, 9], "removed ones only when asked for")
        #expect(all.total == 5)
        let window = index.page(QueuePage(offset: 1, limit: 2))
        #expect(window.entries.map(\.id) == [3, 5])
        #expect(window.total == 5)
        #expect(index.page(QueuePage(offset: 10)).entries.isEmpty)
        #expect(index.page(QueuePage(limit: 0)).total == 5)
        #expect(index.page(QueuePage(states: [.removed])).entries.map(\.id) == [10])
        #expect(index.page(QueuePage(states: [.paused, .complete], search: "iso")).entries.map(\.id) == [1, 5, 7])
        #expect(index.page(QueuePage(search: " other.tar ")).entries.map(\.id) == [9], "URLs too, case-insensitive, trimmed")
        #expect(index.page(QueuePage(search: "ÜNÏCODE")).entries.map(\.id) == [3], "Unicode case folding")
        #expect(index.page(QueuePage(search: "%")).total == 0, "no wildcards")
        // Pages by state step over the others; totals come from the counts.
        let paused = index.page(QueuePage(offset: 1, limit: 1, states: [.paused]))
        #expect(paused.entries.map(\.id) == [5])
        #expect(paused.total == 3)
        #expect(index.page(QueuePage(offset: 1, limit: 5, states: [.paused, .removed])).entries.map(\.id) == [5, 7, 10])
        #expect(index.page(QueuePage(offset: 2, limit: Int.max, states: [.paused, .waiting])).entries.map(\.id) == [5, 7])
        #expect(index.page(QueuePage(limit: 0, states: [.complete])).total == 1)
        #expect(index.page(QueuePage(offset: 1, limit: 1, search: "file")).entries.map(\.id) == [3], "searching pages too")
        #expect(index.page(QueuePage(offset: 1, limit: 1, search: "file")).total == 4, "1, 3 (by its URL), 5, 7")

        index.remove(id: 5)
        index.remove(id: 42)
        #expect(index.entries.map(\.id) == [1, 3, 7, 9, 10])
        #expect(index.removeAll(in: [.complete, .removed]) == [9, 10])
        #expect(index.entries.map(\.id) == [1, 3, 7])
        #expect(index.stateCounts == [.paused: 2, .waiting: 1])
        // The record follows the latest put.
        #expect(String(decoding: index.entry(id: 3)!.record.bytes, as: UTF8.self).contains("\"state\":\"waiting\""))
        // Search texts are made when first searched and kept; a put replaces them and any kept
        // record, prepared or not (a running download's entry keeps none).
        #expect(index.page(QueuePage(search: "file1.iso")).entries.map(\.id) == [1])
        #expect(String(decoding: index.entry(id: 1)!.record.bytes, as: UTF8.self).contains("file1.ISO"))
        for prepared in [true, false] {
            index.put(Self.info(id: 1, name: prepared ? "renamed.bin" : "running.bin", state: prepared ? .paused : .active), prepared: prepared)
            let name = prepared ? "renamed.bin" : "running.bin"
            #expect(index.page(QueuePage(search: "file1.iso")).total == 0)
            #expect(index.page(QueuePage(search: name)).entries.map(\.id) == [1])
            let listed = index.page(QueuePage(limit: 1)).entries.first!
            #expect(String(decoding: listed.record.bytes, as: UTF8.self).contains(name))
            #expect(String(decoding: index.entry(id: 1)!.record.bytes, as: UTF8.self).contains(name))
        }
        #expect(index.entry(id: 2) == nil)

        // RPC ids: a put that replaces an entry (a start, an end) keeps its gid found without
        // writing it again; one that brings another gid makes that one found too.
        let before = index.stateCounts
        var started = Self.info(id: 20, state: .waiting)
        started.gid = "00000000000000a1"
        index.put(started)
        started.state = .active
        index.put(started, prepared: false)
        #expect(index.id(gid: "00000000000000a1") == 20)
        #expect(index.stateCounts[.active] == (before[.active] ?? 0) + 1)
        #expect(index.stateCounts[.waiting] == before[.waiting])
        started.gid = "00000000000000b2"
        index.put(started)
        #expect(index.id(gid: "00000000000000b2") == 20)
        #expect(index.id(gid: "ffffffffffffffff") == nil)
    }

    @Test("A state change alone moves the entry between states and counts, and its record is made anew")
    func stateChangeAlone() throws {
        var index = DownloadIndex()
        for id in [1, 2, 3] as [Int64] { index.put(Self.info(id: id, name: "file\(id).bin", state: .waiting)) }
        guard case .info(let info, let revision)? = index.recordSource(id: 2) else { Issue.record("no info for 2"); return }
        let kept = index.keep(DownloadRecord(info), madeFrom: revision)
        #expect(kept)
        index.setState(.active, id: 2)
        #expect(index.stateCounts == [.waiting: 2, .active: 1])
        #expect(index.entry(id: 2)?.state == .active)
        #expect(index.entry(id: 2)?.info.state == .active)
        #expect(index.ids(in: [.active]) == [2])
        let waiting = index.page(QueuePage(states: [.waiting]))
        #expect(waiting.entries.map(\.id) == [1, 3])
        let record = try #require(index.entry(id: 2)?.record)
        #expect(record == DownloadRecord(Self.info(id: 2, name: "file2.bin", state: .active)), "the kept record said waiting")
        // A record made before the change is not kept after it.
        let keptStale = index.keep(DownloadRecord(info), madeFrom: revision)
        #expect(!keptStale)
        index.setState(.active, id: 9)
        #expect(index.count == 3, "an unknown id is ignored")
    }

    @Test("A record made away from the index is kept only while the entry still says what it was made from")
    func recordsMadeOutside() throws {
        var index = DownloadIndex()
        for id in [1, 2, 3] as [Int64] { index.put(Self.info(id: id, name: "file\(id).bin")) }
        #expect(index.recordSource(id: 4) == nil)
        // Not made yet: the info to make it from, the record a list makes from it.
        guard case .info(let info, let revision)? = index.recordSource(id: 1) else { Issue.record("no info for 1"); return }
        #expect(info == Self.info(id: 1, name: "file1.bin"))
        let made = DownloadRecord(info)
        let keptFirst = index.keep(made, madeFrom: revision)
        #expect(keptFirst)
        guard case .kept(let kept)? = index.recordSource(id: 1) else { Issue.record("not kept"); return }
        #expect(kept == made)
        let listed = index.entry(id: 1)?.record
        #expect(listed == made)
        let replaced = index.keep(DownloadRecord(Self.info(id: 1, name: "other.bin")), madeFrom: revision)
        #expect(!replaced, "a kept record is not replaced")
        // The entry changed between reading its source and keeping the record: not kept, and
        // the next list makes the record of what it says now.
        guard case .info(let stale, let staleRevision)? = index.recordSource(id: 2) else { Issue.record("no info for 2"); return }
        index.put(Self.info(id: 2, name: "renamed.bin", state: .waiting))
        let keptStale = index.keep(DownloadRecord(stale), madeFrom: staleRevision)
        #expect(!keptStale)
        let renamed = index.entry(id: 2)?.record
        #expect(String(decoding: renamed!.bytes, as: UTF8.self).contains("renamed.bin"))
        // A running download's entry keeps no record; a removed one takes none.
        index.put(Self.info(id: 3, name: "running.bin", state: .active), prepared: false)
        guard case .info(let running, let runningRevision)? = index.recordSource(id: 3) else { Issue.record("no info for 3"); return }
        let keptRunning = index.keep(DownloadRecord(running), madeFrom: runningRevision)
        #expect(!keptRunning)
        guard case .info = index.recordSource(id: 3) else { Issue.record("a running entry kept a record"); return }
        index.remove(id: 3)
        // A page hands its entries out without making their records; those made from it and
        // handed back are what the next page gives.
        let page = index.page(QueuePage(states: [.paused, .waiting]))
        var madeFromPage: [DownloadRecord] = []
        for entry in page.entries {
            switch entry.recordSource {
            case .kept(let record): madeFromPage.append(record)
            case .info(let info, let revision):
                let record = DownloadRecord(info)
                index.keep(record, madeFrom: revision)
                madeFromPage.append(record)
            }
        }
        #expect(madeFromPage == page.entries.map(\.record))
        for entry in index.page(QueuePage(states: [.paused, .waiting])).entries {
            guard case .kept = entry.recordSource else { Issue.record("\(entry.id) not kept"); continue }
        }
        let keptRemoved = index.keep(DownloadRecord(running), madeFrom: runningRevision)
        // A put of the same info again is a new revision: a record read before it is not kept.
        index.put(Self.info(id: 1, name: "file1.bin"))
        guard case .info(_, let before)? = index.recordSource(id: 1) else { Issue.record("no info for 1"); return }
        index.put(Self.info(id: 1, name: "file1.bin"))
        let keptBefore = index.keep(made, madeFrom: before)
        #expect(!keptBefore)
        #expect(!keptRemoved)
    }

    /// An answer line as the daemon writes one that lists downloads (``DaemonServerLine/encoded()``).
    static func answerLine(_ infos: [QueuedDownloadInfo], id: Int = 9, total: Int? = nil, settings: QueueSettings? = nil) throws -> [UInt8] {
        var response = DaemonResponse(id: id)
        response.encodedDownloads = DownloadRecord.array(infos.map(DownloadRecord.init), fields: nil)
        response.total = total
        response.settings = settings
        return Array(try DaemonServerLine(response: response).encoded().dropLast())
    }

    @Test("An answer listing downloads read by Haul's JSON reader is what JSONDecoder reads; what it does not take exactly, it leaves")
    func downloadListFastPath() throws {
        var running = Self.info(id: 5, name: "r.bin", state: .active)
        running.speed = 2
        running.secondsRemaining = 0
        let lists: [[QueuedDownloadInfo]] = [[], [Self.info(id: 1)], [Self.awkward, Self.info(id: 0, name: ""), running], (1...300).map { Self.info(id: Int64($0)) }]
        for infos in lists {
            var settings = QueueSettings(defaultDirectory: "/srv/\"d\" é")
            settings.connectionsPerDownload = 3
            settings.globalSpeedLimit = Int64.max
            settings.rpcOptions = ["split": "4", "x \"y\"": "z"]
            for (total, settings) in [(nil, nil), (infos.count + 7, QueueSettings(defaultDirectory: "/d")), (0, settings)] {
                let line = try Self.answerLine(infos, total: total, settings: settings)
                let fast = try #require(DaemonServerLine.downloadList(line: line), "\(String(decoding: line, as: UTF8.self))")
                let slow = try Self.decoder.decode(DaemonServerLine.self, from: Data(line))
                #expect(fast == slow)
                #expect(fast.response?.downloads?.count == infos.count && fast.response?.total == total)
                #expect(line.withUnsafeBytes { DaemonServerLine.decode(line: $0) } == slow)
            }
        }
        // Left to JSONDecoder: it reads them (and the answer is the same), or refuses them.
        let record = String(decoding: DownloadRecord(Self.info(id: 3)).bytes, as: UTF8.self)
        func answer(_ members: String) -> String { #"{"response":{"id":1,\#(members)}}"# }
        // `null` for an optional member is taken, as JSONDecoder takes it.
        let nulls = Array(answer(#""downloads":[\#(record)],"total":null,"count":null,"settings":null"#).utf8)
        let taken = try #require(DaemonServerLine.downloadList(line: nulls))
        #expect(taken == (try Self.decoder.decode(DaemonServerLine.self, from: Data(nulls))))
        func withMember(_ member: String) -> String { answer(#""downloads":["# + record.dropLast() + "," + member + "}]") }
        let left = [
            answer(#""downloads":[\#(record)],"error":"no"}"#),
            answer(#""count":3"#),
            answer(#""downloads":[],"settings":{"maximumConcurrentDownloads":1,"maximumConnectionsPerHost":1,"globalSpeedLimit":0}"#),
            answer(#""downloads":[],"settings":{"maximumConcurrentDownloads":1,"maximumConnectionsPerHost":1,"globalSpeedLimit":0,"defaultDirectory":"/d","extra":1}"#),
            answer(#""downloads":[],"settings":{"maximumConcurrentDownloads":1.5,"maximumConnectionsPerHost":1,"globalSpeedLimit":0,"defaultDirectory":"/d"}"#),
            #"{"event":{"kind":"downloadChanged"}}"#,
            #"{"response":{"id":1,"downloads":[]},"event":null}"#,
            answer(#""downloads":[\#(record)],"id":2"#),
            answer(#""downloads":[\#(record)],"total":1.5"#),
            withMember(#""sources":[]"#),
            withMember(#""unknown":1"#),
            withMember(#""priority":1"#),
            withMember(#""fileName":7"#),
            withMember(#""totalBytes":1e3"#),
            withMember(#""startedAt":"2026-11-23T10:15:60Z""#),
            withMember(#""startedAt":"2026-11-23T10:15:00+01:00""#),
            withMember(#""finishedAt":"2026-02-30T10:15:00Z""#),
            withMember(#""segments":[[5,1]]"#),
            withMember(#""segments":[[1]]"#),
            withMember(#""options":{"a":"1","a":"2"}"#),
            answer(#""downloads":[{"id":1},\#(record)]"#),
            answer(#""downloads":[\#(record),{"id":1}]"#),
            answer(#""downloads":[{"id":1.5}]"#),
            answer(#""downloads":[{"gid":"00000000000000ab"}]"#),
            answer(#""downloads":[\#(record.replacingOccurrences(of: #""gid":"""#, with: #""gid":null"#))]"#),
            answer(#""downloads":[\#(record.replacingOccurrences(of: #""state":"paused""#, with: #""state":"sleeping""#))]"#),
        ]
        for text in left {
            let line = Array(text.utf8)
            #expect(DaemonServerLine.downloadList(line: line) == nil, "\(text)")
            let slow = try? Self.decoder.decode(DaemonServerLine.self, from: Data(line))
            #expect(line.withUnsafeBytes { DaemonServerLine.decode(line: $0) } == slow, "\(text)")
        }
    }

    @Test("An answer of projected downloads (queueAdd with fields) reads as their ids, by Haul's reader and JSONDecoder alike; whole ones stay whole")
    func projectedAnswers() throws {
        func answer(_ downloads: String) -> [UInt8] { Array(#"{"response":{"id":4,"downloads":\#(downloads)}}"#.utf8) }
        let ids = answer("[" + (1...500).map { #"{"id":\#($0)}"# }.joined(separator: ",") + "]")
        let fast = try #require(DaemonServerLine.downloadList(line: ids))
        let slow = try Self.decoder.decode(DaemonServerLine.self, from: Data(ids))
        #expect(fast == slow)
        #expect(fast.response?.downloadIDs == Array(1...500) && fast.response?.downloads == nil)
        // More members than the id (queueList with fields): JSONDecoder reads the ids; Haul's
        // reader, at any length, the projections too, and which members came.
        let more = answer(#"[{"id":7,"state":"paused"},{"state":"active","id":8,"path":"/d/f"}]"#)
        #expect(try Self.decoder.decode(DaemonServerLine.self, from: Data(more)).response?.downloadIDs == [7, 8])
        let read = try #require(more.withUnsafeBytes { DaemonServerLine.decode(line: $0) }?.response)
        #expect(read.downloadIDs == [7, 8])
        #expect(read.downloads?.map(\.state) == [.paused, .active] && read.downloads?.map(\.path) == [nil, "/d/f"])
        #expect(read.downloadFields == [.id, .path, .state], "in field order")
        // One list is all whole or all projected.
        let record = String(decoding: DownloadRecord(Self.info(id: 5)).bytes, as: UTF8.self)
        #expect(DaemonServerLine.downloadList(line: answer(#"[\#(record),{"id":1,"state":"paused"}]"#)) == nil)
        #expect(DaemonServerLine.downloadList(line: answer("[\(record)]"))?.response?.downloadFields == nil)
        // Whole records: `downloads`, no ids beside them.
        let whole = try Self.answerLine([Self.info(id: 1), Self.info(id: 2)])
        #expect(whole.withUnsafeBytes { DaemonServerLine.decode(line: $0) }?.response?.downloads?.map(\.id) == [1, 2])
        #expect(whole.withUnsafeBytes { DaemonServerLine.decode(line: $0) }?.response?.downloadIDs == nil)
        // Neither whole nor with an id: the line is not an answer one can read.
        #expect(answer(#"[{"state":"paused"}]"#).withUnsafeBytes { DaemonServerLine.decode(line: $0) } == nil)
        // A whole record that does not read is not taken for a projected one.
        let broken = String(decoding: DownloadRecord(Self.info(id: 3)).bytes, as: UTF8.self).replacingOccurrences(of: #""state":"paused""#, with: #""state":"sleeping""#)
        #expect(answer("[\(broken)]").withUnsafeBytes { DaemonServerLine.decode(line: $0) } == nil)
    }

    @Test("A download's change written from its record reads back, by Haul's reader and JSONDecoder alike, as the event JSONEncoder writes; what the reader does not take exactly, it leaves")
    func changeEventFastPath() throws {
        var running = Self.info(id: 5, name: "r.bin", state: .active)
        running.speed = 2
        for info in [Self.info(id: 1), Self.awkward, running] {
            var event = DaemonEvent(kind: .downloadChanged)
            event.download = info
            event.downloadID = info.id
            let written = try #require(DaemonServerLine.encodedChange(info))
            #expect(written.last == UInt8(ascii: "\n"))
            let line = Array(written.dropLast())
            let fast = try #require(DaemonServerLine.downloadChange(line: line), "\(String(decoding: line, as: UTF8.self))")
            let slow = try Self.decoder.decode(DaemonServerLine.self, from: Data(line))
            let usual = try Self.decoder.decode(DaemonServerLine.self, from: Data(DaemonServerLine(event: event).encoded()))
            #expect(fast == slow && slow == usual)
            #expect(line.withUnsafeBytes { DaemonServerLine.decode(line: $0) } == usual)
        }
        // A segmented run's sources are not in a record: JSONEncoder writes that event.
        var segmented = Self.info(id: 9, state: .active)
        segmented.sources = []
        #expect(DaemonServerLine.encodedChange(segmented) == nil)
        let record = String(decoding: DownloadRecord(Self.info(id: 3)).bytes, as: UTF8.self)
        let left = [
            #"{"event":{"kind":"downloadChanged","downloadID":3,"download":\#(record),"taskID":1}}"#,
            #"{"event":{"kind":"downloadChanged","downloadID":3,"downloadID":4,"download":\#(record)}}"#,
            #"{"event":{"kind":"downloadRemoved","downloadID":3}}"#,
            #"{"event":{"kind":"downloadChanged","downloadID":"3","download":\#(record)}}"#,
            #"{"event":{"kind":"downloadChanged","download":\#(record.replacingOccurrences(of: #""id":3"#, with: #""id":3.5"#))}}"#,
            #"{"event":{"kind":"downloadChanged","download":\#(record)},"response":null}"#,
        ]
        for text in left {
            let line = Array(text.utf8)
            #expect(DaemonServerLine.downloadChange(line: line) == nil, "\(text)")
            let slow = try? Self.decoder.decode(DaemonServerLine.self, from: Data(line))
            #expect(line.withUnsafeBytes { DaemonServerLine.decode(line: $0) } == slow, "\(text)")
        }
    }

    @Test("A change projected to some fields (a subscription with fields) holds those members and id, and reads back as a projection that says so; whole ones and malformed ones are read as before")
    func projectedChangeEvent() throws {
        var failed = Self.info(id: 4, name: "f.bin", state: .error)
        failed.errorMessage = "the server answered 404"
        var segmented = Self.info(id: 9, state: .complete)
        segmented.sources = []
        for (info, fields) in [(failed, [DownloadField.state, .path, .errorMessage]), (segmented, [.id, .state, .bytesDone])] {
            let written = try #require(DaemonServerLine.encodedChange(info, fields: fields), "projected: written here, segmented or not")
            let line = Array(written.dropLast())
            let members = try #require(try JSONSerialization.jsonObject(with: Data(line)) as? [String: Any])
            let record = try #require((members["event"] as? [String: Any])?["download"] as? [String: Any])
            let expected = Set(([DownloadField.id] + fields).map(\.rawValue)).filter { name in
                // Absent optionals are left out, as in whole records.
                !(name == "path" && info.path == nil)
            }
            #expect(Set(record.keys) == expected, "\(record.keys)")
            let event = try #require(DaemonServerLine.downloadChange(line: line)?.event)
            let download = try #require(event.download)
            #expect(Set(event.downloadFields ?? []) == Set(expected.compactMap(DownloadField.init(rawValue:))), "the members it came with")
            #expect(download.id == info.id && download.state == info.state && download.errorMessage == info.errorMessage)
            #expect(download.urls.isEmpty && download.gid.isEmpty, "members not sent keep their zero values")
        }
        // A whole change is not taken for a projection.
        let whole = Array(try #require(DaemonServerLine.encodedChange(failed)).dropLast())
        #expect(DaemonServerLine.downloadChange(line: whole)?.event?.downloadFields == nil)
        // A projection without an id is not read; nor is a whole record with a bad value.
        #expect(DaemonServerLine.downloadChange(line: Array(#"{"event":{"kind":"downloadChanged","download":{"state":"complete"}}}"#.utf8)) == nil)
        #expect(DaemonServerLine.downloadChange(line: Array(#"{"event":{"kind":"downloadChanged","download":{"id":1,"state":"sleeping"}}}"#.utf8)) == nil)
    }
}
