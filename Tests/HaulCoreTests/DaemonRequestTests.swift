import Foundation
@testable import HaulCore
import Testing

/// The typed request against the wire format of `docs/daemon.md`: the lines clients have
/// always sent decode to the right command, every command survives a round trip, and a line
/// that does not fit its method is refused with the field at fault.
@Suite("DaemonRequest: one typed command per method, the same JSON on the wire")
struct DaemonRequestTests {
    func decode(_ line: String) throws -> DaemonRequest {
        try JSONDecoder().decode(DaemonRequest.self, from: Data(line.utf8))
    }

    @Test("A field is found by its name as its raw value finds it; anything else is no field")
    func fieldsByName() throws {
        for field in DownloadField.allCases {
            #expect(DownloadField.named(field.rawValue) == field)
            for near in [field.rawValue.uppercased(), field.rawValue + " ", " " + field.rawValue, String(field.rawValue.dropLast()), field.rawValue + "s"] {
                #expect(DownloadField.named(near) == DownloadField(rawValue: near), "\(near)")
            }
        }
        for other in ["", "ID", "sources", "download", "pathname", "\u{0}id"] {
            #expect(DownloadField.named(other) == nil, "\(other)")
        }
        #expect(try DownloadField.parse(["state", "id"]) == [.state, .id])
        #expect(throws: UnknownDownloadField.self) { try DownloadField.parse(["id", "Id"]) }
    }

    @Test("Lines in the documented format decode to their commands")
    func documentedLines() throws {
        #expect(try self.decode(#"{"id":1,"method":"ping"}"#) == DaemonRequest(id: 1, .ping))
        #expect(
            try self.decode(#"{"id":2,"method":"attach","session":"app","protocolVersion":1,"launchCommand":["/bin/app","--bg"]}"#)
                == DaemonRequest(id: 2, .attach(.init(session: "app", protocolVersion: 1, launchCommand: ["/bin/app", "--bg"])))
        )
        let created = try self.decode(
            #"{"id":3,"method":"createDownload","session":"app","url":"http://127.0.0.1/a","headers":{"fields":[{"name":"X-A","value":"1"}]},"isDiscretionary":true}"#
        )
        guard case .createDownload(let download) = created.command, case .url(let url, let headers) = download.source else {
            Issue.record("not a download from a URL: \(created)")
            return
        }
        #expect(url.absoluteString == "http://127.0.0.1/a")
        #expect(headers["X-A"] == "1")
        #expect(download.options.isDiscretionary)
        #expect(download.options.resourceTimeout == DaemonRequest.TaskOptions.defaultResourceTimeout)
        let fromResumeData = try self.decode(#"{"id":4,"method":"createDownload","session":"app","resumeData":"AQID"}"#)
        #expect(fromResumeData.command == .createDownload(.init(session: "app", source: .resumeData(Data([1, 2, 3])))))
        #expect(try self.decode(#"{"id":5,"method":"cancel","session":"s","taskID":9}"#).command == .cancel(.init(session: "s", taskID: 9)))
        #expect(
            try self.decode(#"{"id":6,"method":"queueAdd","url":"http://127.0.0.1/one","paused":true}"#).command
                == .queueAdd(.one(NewDownload(urls: [URL(string: "http://127.0.0.1/one")!], paused: true)))
        )
        #expect(
            try self.decode(#"{"id":7,"method":"queueAdd","urls":["http://127.0.0.1/a","http://127.0.0.1/b"],"fileName":"a.iso"}"#).command
                == .queueAdd(.one(NewDownload(urls: [URL(string: "http://127.0.0.1/a")!, URL(string: "http://127.0.0.1/b")!], fileName: "a.iso")))
        )
        #expect(
            try self.decode(#"{"id":8,"method":"queueAdd","downloads":[{"urls":["http://127.0.0.1/x"]}]}"#).command
                == .queueAdd(.batch([NewDownload(urls: [URL(string: "http://127.0.0.1/x")!])]))
        )
        #expect(try self.decode(#"{"id":9,"method":"queueList"}"#).command == .queueList(QueuePage()))
        #expect(
            try self.decode(#"{"id":10,"method":"queueList","offset":20,"limit":10,"states":["paused"],"search":"iso"}"#).command
                == .queueList(QueuePage(offset: 20, limit: 10, states: [.paused], search: "iso"))
        )
        #expect(try self.decode(#"{"id":11,"method":"queuePause","all":true}"#).command == .queuePause(.all))
        #expect(try self.decode(#"{"id":12,"method":"queueResume","downloadIDs":[1,2]}"#).command == .queueResume(.many([1, 2])))
        #expect(try self.decode(#"{"id":13,"method":"queueRemove","downloadID":5}"#).command == .queueRemove(.one(5)))
        #expect(try self.decode(#"{"id":14,"method":"queueSettings"}"#).command == .queueSettings(nil))
        #expect(
            try self.decode(#"{"id":15,"method":"queueSettings","settingKey":"max-concurrent","settingValue":"3"}"#).command
                == .queueSettings(.init(settingKey: "max-concurrent", settingValue: "3"))
        )
        #expect(
            try self.decode(#"{"id":16,"method":"queueSetSpeedLimit","downloadID":4,"speedLimit":0}"#).command
                == .queueSetSpeedLimit(.init(downloadID: 4, speedLimit: 0))
        )
        #expect(
            try self.decode(#"{"id":17,"method":"queueFiles","downloadID":4,"states":["failed"],"limit":5}"#).command
                == .queueFiles(.init(downloadID: 4, states: [.failed], limit: 5))
        )
    }

    @Test("queueSubscribe: every change by default, only finishes with events \"finished\"; another value is refused")
    func subscriptionEvents() throws {
        #expect(try self.decode(#"{"id":1,"method":"queueSubscribe"}"#).command == .queueSubscribe(.init()))
        #expect(try self.decode(#"{"id":2,"method":"queueSubscribe","events":"finished"}"#).command == .queueSubscribe(.init(events: .finished)))
        #expect(try self.decode(#"{"id":3,"method":"queueSubscribe","events":"all"}"#).command == .queueSubscribe(.init(events: .all)))
        #expect(throws: DecodingError.self) { try self.decode(#"{"id":4,"method":"queueSubscribe","events":"some"}"#) }
        #expect(try self.decode(#"{"id":5,"method":"queueSubscribe","events":"finished","fields":["id","state","path"]}"#).command == .queueSubscribe(.init(events: .finished, fields: [.id, .state, .path])))
        #expect(throws: DecodingError.self) { try self.decode(#"{"id":6,"method":"queueSubscribe","fields":["state","colour"]}"#) }
    }

    @Test("Every command round-trips through its JSON line")
    func roundTrip() throws {
        let url = URL(string: "http://127.0.0.1:8080/file")!
        var headers = HTTPHeaderFields()
        headers.add(name: "Authorization", value: "Bearer x")
        let commands: [DaemonRequest.Command] = [
            .attach(.init(session: "s", launchCommand: ["/bin/true"])),
            .createDownload(.init(session: "s", source: .url(url, headers: headers), options: .init(taskDescription: "d", isDiscretionary: true, resourceTimeout: 60))),
            .createDownload(.init(session: "s", source: .resumeData(Data([9, 8, 7])))),
            .createUpload(.init(session: "s", url: url, filePath: "/tmp/x", httpMethod: "PUT", headers: headers)),
            .resume(.init(session: "s", taskID: 1)),
            .suspend(.init(session: "s", taskID: 2)),
            .cancel(.init(session: "s", taskID: 3, produceResumeData: true)),
            .acknowledge(.init(session: "s", eventID: 4)),
            .listTasks(.init(session: "s")),
            .ping,
            .queueAdd(.one(NewDownload(urls: [url], directory: "/d", fileName: "f", checksum: "sha256=00", speedLimit: 5, priority: 2, paused: true))),
            .queueAdd(.batch([NewDownload(urls: [url]), NewDownload(urls: [url, url])])),
            .queueAdd(.batch([NewDownload(urls: [url])], fields: [.id, .state])),
            .queueSubscribe(.init(events: .finished, fields: [.state, .errorMessage])),
            .queueList(QueuePage(offset: 1, limit: 2, states: [.error, .paused], search: "q")),
            .queueGet(.init(downloadID: 6)),
            .queuePause(.one(7)), .queuePause(.many([8, 9])), .queuePause(.all),
            .queueResume(.all),
            .queueCancel(.init(downloadID: 10)),
            .queueRemove(.many([11])),
            .queuePurge,
            .queueSetURL(.init(downloadID: 12, url: url)),
            .queueSettings(nil), .queueSettings(.init(settingKey: "k", settingValue: "v")),
            .queueSetSpeedLimit(.init(downloadID: 13, speedLimit: 1000)),
            .queueFiles(.init(downloadID: 14, states: [.failed, .waiting], offset: 3, limit: 20)),
            .queueFiles(.init(downloadID: 15)),
            .queueSubscribe(.init()), .queueSubscribe(.init(events: .finished)), .queueSubscribe(.init(events: .all)),
            .webUI,
            .rpcInfo,
            .fleetStatus,
        ]
        #expect(Set(commands.map(\.method)) == Set(DaemonRequest.Method.allCases), "every method is covered")
        for (index, command) in commands.enumerated() {
            let request = DaemonRequest(id: index, command)
            let line = try JSONEncoder().encode(request)
            let object = try #require(try JSONSerialization.jsonObject(with: line) as? [String: Any])
            #expect(object["method"] as? String == command.method.rawValue, "flat: the method beside the fields")
            #expect(try JSONDecoder().decode(DaemonRequest.self, from: line) == request, "\(String(decoding: line, as: UTF8.self))")
        }
    }

    @Test("A download to add: every member read, null the same as left out, unknown members ignored")
    func newDownloadMembers() throws {
        let full = try self.decode(
            #"{"id":1,"method":"queueAdd","downloads":[{"urls":["http://127.0.0.1/a","http://127.0.0.1/b"],"directory":"/srv","fileName":"a.bin","checksum":"sha256=00","speedLimit":1000,"priority":3,"paused":true,"gid":"00000000000000ab","requestHeaders":["X-A: 1"],"options":{"split":"4"},"connections":2,"later":{"x":1}}]}"#
        )
        let expected = NewDownload(
            urls: [URL(string: "http://127.0.0.1/a")!, URL(string: "http://127.0.0.1/b")!],
            directory: "/srv", fileName: "a.bin", checksum: "sha256=00", speedLimit: 1000, priority: 3, paused: true,
            gid: "00000000000000ab", requestHeaders: ["X-A: 1"], options: ["split": "4"], connections: 2
        )
        #expect(full == DaemonRequest(id: 1, .queueAdd(.batch([expected]))))
        let nulls = try self.decode(
            #"{"id":2,"method":"queueAdd","urls":["http://127.0.0.1/a"],"directory":null,"fileName":null,"checksum":null,"speedLimit":null,"priority":null,"paused":null,"gid":null,"requestHeaders":null,"options":null,"connections":null}"#
        )
        #expect(nulls == DaemonRequest(id: 2, .queueAdd(.one(NewDownload(urls: [URL(string: "http://127.0.0.1/a")!])))))
        // One download by `url`: the other members are read as with `urls`.
        let single = try self.decode(#"{"id":3,"method":"queueAdd","url":"http://127.0.0.1/a","paused":true,"priority":2}"#)
        #expect(single == DaemonRequest(id: 3, .queueAdd(.one(NewDownload(urls: [URL(string: "http://127.0.0.1/a")!], priority: 2, paused: true)))))
        for line in [#"{"id":4,"method":"queueAdd","urls":null}"#, #"{"id":4,"method":"queueAdd","downloads":[{"urls":null}]}"#] {
            #expect(throws: DecodingError.self, "\(line)") { try self.decode(line) }
        }
        #expect(throws: DecodingError.self) { try self.decode(#"{"id":5,"method":"queueAdd","downloads":[{"urls":["http://127.0.0.1/a"],"priority":"high"}]}"#) }
    }

    @Test("A batch to add read by Haul's JSON reader is what JSONDecoder reads; what it does not take exactly, it leaves")
    func batchAddFastPath() throws {
        func batch(_ entries: String, id: String = "7") -> String { #"{"id":\#(id),"method":"queueAdd","downloads":[\#(entries)]}"# }
        let taken = [
            batch(#"{"urls":["http://127.0.0.1/a"],"directory":"/srv"}"#),
            batch(#"{"urls":["http://127.0.0.1/a","https://127.0.0.1:8443/b?x=1#f"],"directory":"/srv","fileName":"a.bin","checksum":"sha256=00","speedLimit":1000,"priority":-3,"paused":true,"gid":"00000000000000ab","requestHeaders":["X-A: 1"],"options":{"split":"4","dir":"/x"},"connections":2}"#),
            batch(#"{"urls":["http://127.0.0.1/a"],"directory":null,"fileName":null,"checksum":null,"speedLimit":null,"priority":null,"paused":null,"gid":null,"requestHeaders":null,"options":null,"connections":null}"#),
            batch(#"{"urls":["http://127.0.0.1/\u00e9t\u00e9 d\u00e9j\u00e0 \ud83d\ude00"],"fileName":"\"quoted\" \\ name\n"},{"urls":[]}"#),
            batch(#"{"urls":["http://127.0.0.1/a"]}"#, id: "-1") + "  ",
            // A list download: its files' URLs in `list`, `urls` left out or empty.
            batch(#"{"list":["http://127.0.0.1/a","http://127.0.0.1/b"],"directory":"/srv","paused":true}"#),
            batch(#"{"urls":[],"list":["http://127.0.0.1/a"]},{"urls":["http://127.0.0.1/c"]}"#),
            batch(""),
            #"{"method":"queueAdd","downloads":[{"urls":["http://127.0.0.1/a"]}],"id":3}"#,
            #"{"id":7,"method":"queueAdd","downloads":[{"urls":["http://127.0.0.1/a"]}],"fields":["id"]}"#,
            #"{"id":7,"method":"queueAdd","fields":["state","id","urls"],"downloads":[]}"#,
            #"{"id":7,"method":"queueAdd","downloads":[],"fields":[]}"#,
            #"{"id":7,"method":"queueAdd","downloads":[],"fields":null}"#,
        ]
        for line in taken {
            let fast = try #require(DaemonRequest.batchAdd(line: Array(line.utf8)), "\(line)")
            #expect(fast == (try self.decode(line)), "\(line)")
        }
        // Left to JSONDecoder: it either reads them too (and the two agree), or refuses them with
        // its own words.
        let left = [
            #"{"id":1,"method":"queueList"}"#,
            #"{"id":1,"method":"queueAdd","urls":["http://127.0.0.1/a"]}"#,
            #"{"id":1,"method":"queueAdd","downloads":null,"url":"http://127.0.0.1/a"}"#,
            batch(#"{"urls":["http://127.0.0.1/a"]}"#, id: "1.5"),
            batch(#"{"urls":["http://127.0.0.1/a"]}"#, id: "\"1\""),
            batch(#"{"urls":["http://127.0.0.1/a"],"priority":2.0}"#),
            batch(#"{"urls":["http://127.0.0.1/a"],"priority":1e2}"#),
            batch(#"{"urls":["http://127.0.0.1/a"],"speedLimit":99999999999999999999}"#),
            batch(#"{"urls":["http://127.0.0.1/a"],"paused":"yes"}"#),
            batch(#"{"urls":["http://127.0.0.1/a"],"paused":1}"#),
            batch(#"{"urls":"http://127.0.0.1/a"}"#),
            batch(#"{"urls":null}"#),
            batch(#"{"list":"http://127.0.0.1/a"}"#),
            batch(#"{"list":null}"#),
            batch(#"{"directory":"/srv"}"#),
            batch(#"{"urls":["http://127.0.0.1/a"],"urls":["http://127.0.0.1/b"]}"#),
            batch(#"{"urls":["http://127.0.0.1/a"],"options":{"a":"1","a":"2"}}"#),
            batch(#"{"urls":["http://127.0.0.1/a"],"options":{"a":1}}"#),
            batch(#"{"urls":["http://127.0.0.1/a"],"requestHeaders":[1]}"#),
            batch(#"{"urls":["http://127.0.0.1/\ud800"]}"#),
            batch(#"{"urls":["http://127.0.0.1/a"]}"#) + "x",
            #"{"id":1,"id":2,"method":"queueAdd","downloads":[]}"#,
            batch(#"[1]"#),
            // Members it does not know (JSONDecoder ignores them; a member added to NewDownload
            // and not to the fast reader is never dropped).
            batch(#"{"urls":["http://127.0.0.1/a"],"later":{"x":[1,2.5,null]}}"#),
            #"{"method":"queueAdd","note":{"a":1},"downloads":[{"urls":["http://127.0.0.1/a"]}],"id":3,"urls":["http://127.0.0.1/ignored"]}"#,
            // Fields: an unknown name (JSONDecoder words the error), a value of another type.
            #"{"id":7,"method":"queueAdd","downloads":[],"fields":["id","colour"]}"#,
            #"{"id":7,"method":"queueAdd","downloads":[],"fields":"id"}"#,
            #"{"id":7,"method":"queueAdd","downloads":[],"fields":[1]}"#,
        ]
        for line in left {
            #expect(DaemonRequest.batchAdd(line: Array(line.utf8)) == nil, "\(line)")
        }
        // A thousand downloads, as a client adds a list.
        let many = batch((0..<1000).map { #"{"urls":["http://127.0.0.1:8080/f\#($0).bin"],"directory":"/srv/files"}"# }.joined(separator: ","))
        let fast = try #require(DaemonRequest.batchAdd(line: Array(many.utf8)))
        #expect(fast == (try self.decode(many)))
    }

    @Test("A line that does not fit its method is refused, naming the field")
    func refusals() {
        let lines: [(String, String)] = [
            (#"{"id":1,"method":"fly"}"#, "method"),
            (#"{"id":1}"#, "method"),
            (#"{"method":"ping"}"#, "id"),
            (#"{"id":1,"method":"resume","session":"s"}"#, "taskID"),
            (#"{"id":1,"method":"createDownload","session":"s"}"#, "url"),
            (#"{"id":1,"method":"createUpload","session":"s","url":"http://127.0.0.1/"}"#, "filePath"),
            (#"{"id":1,"method":"queueGet"}"#, "downloadID"),
            (#"{"id":1,"method":"queuePause"}"#, "downloadID"),
            (#"{"id":1,"method":"queueList","offset":-3}"#, "offset"),
            (#"{"id":1,"method":"queueSetURL","downloadID":1}"#, "url"),
            (#"{"id":1,"method":"queueSettings","settingKey":"k"}"#, "settingValue"),
            (#"{"id":1,"method":"queueAdd","downloads":[{"fileName":"x"}]}"#, "urls"),
            (#"{"id":1,"method":"queueAdd","downloads":[],"fields":["id","colour"]}"#, "fields"),
        ]
        for (line, field) in lines {
            do {
                let request = try self.decode(line)
                Issue.record("\(line) decoded as \(request)")
            } catch DecodingError.keyNotFound(let key, _) {
                #expect(key.stringValue == field, "\(line)")
            } catch DecodingError.dataCorrupted(let context) {
                #expect(context.codingPath.last?.stringValue == field, "\(line): \(context)")
            } catch {
                Issue.record("\(line): \(error)")
            }
        }
    }

    @Test("A batch to add is written as a line that JSONDecoder and Haul's reader both read back as the same request; other requests read back the same too")
    func batchAddLine() throws {
        let full = NewDownload(
            urls: [URL(string: "http://127.0.0.1:8080/a%20b?x=1&y=%22")!, URL(string: "http://[::1]:81/mirror")!],
            directory: "/srv/Down loads/\"q\" \\ é",
            fileName: "new\nline\u{1}.bin",
            checksum: "sha256=00ff",
            speedLimit: Int64.max,
            priority: -7,
            paused: true,
            gid: "0123456789abcdef",
            requestHeaders: ["X-Quote: \"q\"", "Referer: http://r/é"],
            options: ["split": "8", "weird \"key\"": "v\n"],
            connections: 16
        )
        let bare = NewDownload(urls: [URL(string: "http://127.0.0.1/f")!])
        let many = (0..<50).map { NewDownload(urls: [URL(string: "http://127.0.0.1/f\($0).bin")!], directory: "/srv") }
        let list = NewDownload(urls: [], directory: "/srv", priority: 2, list: (0..<30).map { URL(string: "http://127.0.0.1/l\($0).bin")! })
        for (downloads, fields) in [([full], nil), ([bare], nil), ([full, bare], nil), (many, nil), ([], nil), (many, [.id]), ([full], [DownloadField.finishedAt, .id, .urls]), ([list, bare], [.id, .fileCount])] as [([NewDownload], [DownloadField]?)] {
            let request = DaemonRequest(id: 42, .queueAdd(.batch(downloads, fields: fields)))
            let line = try request.encodedLine()
            #expect(line.last == UInt8(ascii: "\n") && line.dropLast().allSatisfy { $0 != UInt8(ascii: "\n") })
            let text = String(decoding: line.dropLast(), as: UTF8.self)
            #expect(try self.decode(text) == request, "\(text)")
            #expect(DaemonRequest.batchAdd(line: Array(line.dropLast())) == request, "the daemon's reader takes it: \(text)")
        }
        // Any other request: JSONEncoder's line, or the small queue requests' own (`smallQueueLines`).
        for request in [DaemonRequest(id: 3, .ping), DaemonRequest(id: 4, .queueAdd(.one(full))), DaemonRequest(id: 5, .queueList(QueuePage(limit: 3)))] {
            let line = try request.encodedLine()
            #expect(line.last == UInt8(ascii: "\n"))
            #expect(try self.decode(String(decoding: line.dropLast(), as: UTF8.self)) == request)
        }
    }
}

extension DaemonRequestTests {
    @Test("queueSubscribe, queueList and the requests without a payload are written by hand as lines JSONDecoder and the daemon read back as the same request, with every member and escapes")
    func smallQueueLines() throws {
        let requests: [DaemonRequest] = [
            DaemonRequest(id: 1, .queueSubscribe(.init())),
            DaemonRequest(id: 2, .queueSubscribe(.init(events: .finished, fields: [.id, .state, .path, .errorMessage]))),
            DaemonRequest(id: 3, .queueSubscribe(.init(events: .all))),
            DaemonRequest(id: 4, .queueList(QueuePage())),
            DaemonRequest(id: 5, .queueList(QueuePage(offset: 100, limit: 0))),
            DaemonRequest(id: Int.max, .queueList(QueuePage(offset: 7, limit: 20, states: QueuedDownloadState.allCases, search: "a \"q\" \\ é\n\u{1}", fields: DownloadField.allCases))),
            DaemonRequest(id: 6, .queueList(QueuePage(states: [], search: "", fields: []))),
            DaemonRequest(id: 7, .ping), DaemonRequest(id: 8, .queuePurge), DaemonRequest(id: 9, .webUI),
            DaemonRequest(id: 10, .rpcInfo), DaemonRequest(id: 11, .fleetStatus),
        ]
        for request in requests {
            let line = try #require(request.smallQueueLine(), "written by hand: \(request)")
            #expect(try request.encodedLine() == line)
            #expect(line.last == UInt8(ascii: "\n") && line.dropLast().allSatisfy { $0 != UInt8(ascii: "\n") })
            let text = String(decoding: line.dropLast(), as: UTF8.self)
            #expect(try self.decode(text) == request, "\(text)")
            #expect(try DaemonRequest.decode(line: Array(line.dropLast())) == request, "the daemon's reader: \(text)")
            // The same as JSONEncoder's line, read back.
            #expect(try self.decode(text) == JSONDecoder().decode(DaemonRequest.self, from: JSONEncoder().encode(request)))
        }
        for other in [DaemonRequest(id: 12, .queueGet(.init(downloadID: 3))), DaemonRequest(id: 13, .queueSettings(nil))] {
            #expect(other.smallQueueLine() == nil, "JSONEncoder writes \(other)")
        }
    }

    @Test("A bare answer (an id, perhaps a count) is read by Haul's reader as JSONDecoder reads it; any other answer is left to JSONDecoder")
    func bareAnswers() throws {
        let decoder = JSONDecoder()
        for text in [#"{"response":{"id":1}}"#, #"{"response":{"id":9223372036854775807,"count":3}}"#, #"{ "response" : { "count" : 0 , "id" : 42 } }"#] {
            let bytes = Array(text.utf8)
            let fast = try #require(bytes.withUnsafeBytes { DaemonServerLine.bareAnswer(line: $0) }, "\(text)")
            #expect(fast == (try decoder.decode(DaemonServerLine.self, from: Data(bytes))), "\(text)")
            #expect(bytes.withUnsafeBytes { DaemonServerLine.decode(line: $0) } == fast)
        }
        for text in [
            #"{"response":{"id":1,"error":"no download with id 9"}}"#, #"{"response":{"id":1,"id":2}}"#, #"{"response":{"count":1}}"#,
            #"{"response":{"id":"1"}}"#, #"{"response":{"id":null}}"#, #"{"response":{"id":1,"total":3}}"#, #"{"event":{"kind":"ping"}}"#,
            #"{"response":{"id":1}} "# + String(repeating: " ", count: 100),
        ] {
            let bytes = Array(text.utf8)
            #expect(bytes.withUnsafeBytes { DaemonServerLine.bareAnswer(line: $0) } == nil || text.count > DaemonServerLine.bareAnswerBytes, "\(text)")
            // The whole reader still reads each as JSONDecoder does.
            #expect(bytes.withUnsafeBytes { DaemonServerLine.decode(line: $0) } == (try? decoder.decode(DaemonServerLine.self, from: Data(bytes))), "\(text)")
        }
    }
}

extension DaemonRequestTests {
    @Test("A list to add is split, in order, into the fewest consecutive batches whose lines fit the limit, with any id")
    func addBatches() throws {
        let downloads = (0..<300).map { index in
            NewDownload(urls: [URL(string: "http://127.0.0.1/" + String(repeating: "x", count: index % 37) + "/f\(index).bin")!], directory: "/srv", paused: index % 2 == 0)
        }
        // The whole list in one line when it fits (the daemon's own limit).
        #expect(try DaemonRequest.addBatches(downloads).map(\.count) == [300])
        for limit in [400, 1_000, 4_096, 20_000] {
            let batches = try DaemonRequest.addBatches(downloads, maximumLineLength: limit)
            #expect(Array(batches.joined()) == downloads, "in order, none lost or repeated")
            #expect(!batches.contains { $0.isEmpty })
            for (index, batch) in batches.enumerated() {
                let line = try DaemonRequest(id: Int.max, .queueAdd(.batch(Array(batch)))).encodedLine()
                // The limit is the line's before its newline, as the daemon counts.
                #expect(line.last == UInt8(ascii: "\n") && line.count - 1 <= limit, "batch \(index) of \(batches.count) fits \(limit)")
                // Fewest: the next one's first download would not have fitted.
                if index + 1 < batches.count {
                    let grown = Array(batch) + [batches[index + 1].first!]
                    let longer = try DaemonRequest(id: Int.max, .queueAdd(.batch(grown))).encodedLine()
                    #expect(longer.count - 1 > limit, "batch \(index) could not take one more")
                }
            }
        }
        // Asking for fields makes each line longer by as much: still within the limit.
        for limit in [400, 4_096] {
            let fields: [DownloadField] = [.id, .fileName, .directory]
            let batches = try DaemonRequest.addBatches(downloads, fields: fields, maximumLineLength: limit)
            #expect(Array(batches.joined()) == downloads)
            for batch in batches {
                let line = try DaemonRequest(id: Int.max, .queueAdd(.batch(Array(batch), fields: fields))).encodedLine()
                #expect(line.count - 1 <= limit)
            }
        }
        // At the limit exactly (counted before the newline, as the daemon does): one batch;
        // one byte below it: two.
        let pair = Array(downloads.prefix(2))
        let exact = try DaemonRequest(id: Int.max, .queueAdd(.batch(pair))).encodedLine().count - 1
        #expect(try DaemonRequest.addBatches(pair, maximumLineLength: exact).map(\.count) == [2])
        #expect(try DaemonRequest.addBatches(pair, maximumLineLength: exact - 1).map(\.count) == [1, 1])
        // Growing from a first batch: 16, then eight times as many each time, the last what is
        // left; each still within the line, which may cut a batch shorter (and the next grows
        // from the cap, not from what the line let through).
        let growing = try DaemonRequest.addBatches(downloads, growingFrom: 16)
        #expect(growing.map(\.count) == [16, 128, 156])
        #expect(Array(growing.joined()) == downloads)
        let cut = try DaemonRequest.addBatches(downloads, growingFrom: 16, maximumLineLength: 4_096)
        #expect(Array(cut.joined()) == downloads)
        #expect(cut[0].count == 16 && cut.dropFirst().allSatisfy { $0.count < 128 })
        for batch in cut {
            #expect(try DaemonRequest(id: Int.max, .queueAdd(.batch(Array(batch)))).encodedLine().count - 1 <= 4_096)
        }
        #expect(try DaemonRequest.addBatches(Array(downloads.prefix(16)), growingFrom: 16).map(\.count) == [16])
        #expect(try DaemonRequest.addBatches(Array(downloads.prefix(17)), growingFrom: 16).map(\.count) == [16, 1])
        #expect(try DaemonRequest.addBatches(Array(downloads.prefix(3)), growingFrom: 0).map(\.count) == [1, 2])
        // A download that fits no line: refused with its place, nothing split.
        let huge = NewDownload(urls: [URL(string: "http://127.0.0.1/" + String(repeating: "h", count: 2_000))!])
        #expect(throws: DaemonRequest.DownloadTooLong.self) { try DaemonRequest.addBatches(downloads + [huge], maximumLineLength: 1_000) }
        do {
            _ = try DaemonRequest.addBatches([downloads[0], huge], maximumLineLength: 1_000)
        } catch {
            #expect(error.index == 1 && error.bytes > 2_000)
            #expect(error.description.contains("download 2 of the list"))
        }
    }
}

@Suite("JSONNesting: how deep a text nests, strings skipped")
struct JSONNestingTests {
    @Test("Brackets inside strings do not count, escapes are honoured, the limit is exclusive")
    func depth() {
        let nested = { (levels: Int) in String(repeating: "[", count: levels) + String(repeating: "]", count: levels) }
        #expect(!JSONNesting.exceeds(in: Array(nested(64).utf8)))
        #expect(JSONNesting.exceeds(in: Array(nested(65).utf8)))
        #expect(!JSONNesting.exceeds(2, in: Array(#"{"a":["[[[[{{{{", "\"[[[", "\\"]}"#.utf8)))
        #expect(JSONNesting.exceeds(2, in: Array(#"{"a":["\\", [[]]]}"#.utf8)))
        #expect(!JSONNesting.exceeds(3, in: Array(#"[{},[],{"x":[1]}]"#.utf8)))
        // The line that stopped hauld (Foundation's JSONDecoder traps on it): 513 levels.
        let trap = (0..<513).map { $0 % 3 == 0 ? "[ " : "[" }.joined()
        #expect(JSONNesting.exceeds(in: Array(trap.utf8)))
        #expect(throws: JSONNesting.TooDeep.self) { try DaemonRequest.decode(line: Array(trap.utf8)) }
    }

    /// Contiguous bytes are read through a buffer pointer, others through their iterator: both
    /// paths give the same answers.
    @Test("Bytes that are not contiguous are read the same as an array of them")
    func notContiguous() throws {
        let texts = [String(repeating: "[", count: 65), #"{"a":["\", [[]]]}"#, #"{"x":"[[[["}"#, "[]"]
        for text in texts {
            let bytes = Array(text.utf8)
            let lazyBytes = bytes.lazy.map { $0 }  // no contiguous storage
            #expect(lazyBytes.withContiguousStorageIfAvailable { _ in true } == nil)
            #expect(JSONNesting.exceeds(2, in: lazyBytes) == JSONNesting.exceeds(2, in: bytes))
            #expect(JSONNesting.exceeds(in: lazyBytes) == JSONNesting.exceeds(in: bytes))
            #expect((try? JSONValue(parsing: lazyBytes)) == (try? JSONValue(parsing: bytes)))
        }
        let line = #"{"id":7,"method":"queueAdd","downloads":["#
            + (0..<100).map { #"{"urls":["http://127.0.0.1:1/f\#($0)"],"paused":true}"# }.joined(separator: ",") + "]}"
        #expect(line.utf8.count >= DaemonRequest.batchLineBytes)
        let fromArray = try DaemonRequest.decode(line: Array(line.utf8))
        let fromLazy = try DaemonRequest.decode(line: Array(line.utf8).lazy.map { $0 })
        #expect(fromLazy == fromArray)
        #expect(fromArray == DaemonRequest.batchAdd(line: Array(line.utf8)))
    }
}
