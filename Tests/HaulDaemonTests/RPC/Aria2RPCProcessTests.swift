import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HaulCore
@testable import HaulDaemon
import HaulTestSupport
import HummingbirdWSClient
import Logging
import NIOCore
import Synchronization
import Testing

/// A JSON-RPC client of a test daemon's aria2 RPC, over HTTP.
struct RPCClient {
    let endpoint: String
    let secret: String

    /// POSTs `body` as is; the HTTP status and the parsed answer.
    func post(_ body: [UInt8]) async throws -> (status: Int, json: Any?) {
        var request = URLRequest(url: URL(string: self.endpoint)!)
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(body)
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as! HTTPURLResponse).statusCode, try? JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed]))
    }

    /// The request object of `method` with the token first (unless `token` is false).
    func requestObject(_ method: String, _ params: [Any] = [], id: Any = "t", token: Bool = true) -> [String: Any] {
        let all: [Any] = (token && method.hasPrefix("aria2.") ? ["token:\(self.secret)"] : []) + params
        return ["jsonrpc": "2.0", "id": id, "method": method, "params": all]
    }

    /// The whole answer object of one call.
    func answer(_ method: String, _ params: [Any] = [], token: Bool = true) async throws -> [String: Any] {
        let body = try JSONSerialization.data(withJSONObject: self.requestObject(method, params, token: token))
        let (_, json) = try await self.post(Array(body))
        return try #require(json as? [String: Any])
    }

    /// The result of one call; an error answer fails the test with its message.
    func call(_ method: String, _ params: [Any] = []) async throws -> Any {
        let answer = try await self.answer(method, params)
        if let error = answer["error"] as? [String: Any] { throw DaemonTestError("\(method): \(error)") }
        return try #require(answer["result"], "\(answer)")
    }

    /// The error object of a call expected to fail.
    func error(_ method: String, _ params: [Any] = [], token: Bool = true) async throws -> (code: Int, message: String) {
        let answer = try await self.answer(method, params, token: token)
        let error = try #require(answer["error"] as? [String: Any], "\(method) did not fail: \(answer)")
        return (error["code"] as? Int ?? 0, error["message"] as? String ?? "")
    }

    func status(_ gid: String, keys: [String]? = nil) async throws -> [String: Any] {
        try #require(try await self.call("aria2.tellStatus", keys.map { [gid, $0] } ?? [gid]) as? [String: Any])
    }

    /// Polls `tellStatus` until the download's status is `status` (or the time is up).
    func wait(_ gid: String, for status: String, timeout: Duration = .seconds(30)) async throws -> [String: Any] {
        let deadline = ContinuousClock.now + timeout
        var last: [String: Any] = [:]
        while ContinuousClock.now < deadline {
            last = try await self.status(gid)
            if last["status"] as? String == status { return last }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw DaemonTestError("\(gid) is \(last["status"] ?? "?"), not \(status): \(last)")
    }
}

extension DaemonProcess {
    /// Starts hauld with the RPC on a free port; the client for it.
    func startWithRPC(secret: String = "s3cret-\(UInt32.random(in: 0...UInt32.max))", extra: [String] = []) async throws -> RPCClient {
        try await self.start(extraArguments: ["--enable-rpc", "--rpc-listen-port", "0", "--rpc-secret", secret] + extra)
        return try await self.rpcClient()
    }

    /// Asks the socket where the RPC listens (as `haul rpc-info` does).
    func rpcClient() async throws -> RPCClient {
        for _ in 0..<200 {
            let client = try DaemonTestClient(socketPath: self.socketPath)
            defer { client.close() }
            let response = try await client.request(DaemonRequest(.rpcInfo))
            if let endpoint = response.rpcURL { return RPCClient(endpoint: endpoint, secret: response.rpcSecret ?? "") }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw DaemonTestError("the RPC did not come up")
    }

    var logText: String {
        (try? String(contentsOf: self.dataDirectory.deletingLastPathComponent().appendingPathComponent("hauld.log"), encoding: .utf8)) ?? ""
    }
}

/// What a WebSocket test received, in order.
final class MessageLog: Sendable {
    let texts = Mutex<[String]>([])

    func append(_ text: String) { self.texts.withLock { $0.append(text) } }

    var count: Int { self.texts.withLock { $0.count } }

    /// The messages that are JSON objects, parsed.
    var objects: [[String: Any]] {
        self.texts.withLock { $0 }.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }
}

@Suite("aria2 RPC against hauld", .serialized)
struct Aria2RPCProcessTests {
    @Test("addUri with options, tellStatus shapes, headers sent, checksums, client gids, pause / unpause / remove / results")
    func lifecycle() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let daemon = try DaemonProcess()
        let rpc = try await daemon.startWithRPC()
        let target = daemon.dataDirectory.deletingLastPathComponent().appendingPathComponent("files")
        try FileManager.default.createDirectory(at: target, withIntermediateDirectories: true)

        // Auth exactly like aria2: a missing or wrong token is code 1, "Unauthorized".
        for params: [Any] in [[], ["token:wrong"], [rpc.secret]] {
            let answer = try await rpc.answer("aria2.getVersion", params, token: false)
            let error = try #require(answer["error"] as? [String: Any])
            #expect(error["code"] as? Int == 1 && error["message"] as? String == "Unauthorized")
        }
        let version = try #require(try await rpc.call("aria2.getVersion") as? [String: Any])
        #expect((version["version"] as? String)?.hasPrefix("1.") == true)
        #expect(try await rpc.call("system.listMethods", []) is [String])
        #expect((try await rpc.call("system.listNotifications", []) as? [String])?.contains("aria2.onDownloadComplete") == true)

        // A real download with every option Haul acts on.
        let size: Int64 = 2_500_000
        let sha = TestContent.sha256Hex(size: size, seed: 91)
        let gid = try #require(try await rpc.call("aria2.addUri", [
            [server.url("/file/rpc.bin?size=\(size)&seed=91").absoluteString],
            ["dir": target.path, "out": "renamed.bin", "checksum": "sha-256=\(sha)", "header": ["X-Haul-Test: yes"],
             "referer": "http://127.0.0.1/ref", "user-agent": "haul-rpc-test/1", "split": "4"],
        ]) as? String)
        #expect(DownloadGID.normalized(gid) == gid)
        let done = try await rpc.wait(gid, for: "complete")
        #expect(done["totalLength"] as? String == "\(size)" && done["completedLength"] as? String == "\(size)")
        #expect(done["errorCode"] as? String == "0")
        #expect(done["bitfield"] as? String == "e0", "3 pieces of 1 MiB, all done")
        #expect(done["numPieces"] as? String == "3")
        let files = try #require(done["files"] as? [[String: Any]])
        #expect(files.first?["path"] as? String == target.appendingPathComponent("renamed.bin").path)
        #expect(try TestContent.sha256Hex(ofFileAt: target.appendingPathComponent("renamed.bin").path) == sha)
        let sent = try #require(server.requests.last { $0.uri.hasPrefix("/file/rpc.bin") })
        #expect(sent.header("X-Haul-Test") == "yes")
        #expect(sent.header("Referer") == "http://127.0.0.1/ref")
        #expect(sent.header("User-Agent") == "haul-rpc-test/1")
        let options = try #require(try await rpc.call("aria2.getOption", [gid]) as? [String: String])
        #expect(options["split"] == "4" && options["out"] == "renamed.bin" && options["dir"] == target.path)

        // A wrong checksum is an error with aria2's code 32, and no file under the final name.
        let badGID = try #require(try await rpc.call("aria2.addUri", [
            [server.url("/file/bad.bin?size=1000&seed=3").absoluteString],
            ["dir": target.path, "checksum": "sha-256=" + String(repeating: "0", count: 64)],
        ]) as? String)
        let bad = try await rpc.wait(badGID, for: "error")
        #expect(bad["errorCode"] as? String == "32")
        #expect((bad["errorMessage"] as? String)?.contains("checksum mismatch") == true)
        #expect(!FileManager.default.fileExists(atPath: target.appendingPathComponent("bad.bin").path))
        // A 404 is code 3.
        let missingGID = try #require(try await rpc.call("aria2.addUri", [[server.url("/nothing-here").absoluteString], ["dir": target.path]]) as? String)
        #expect(try await rpc.wait(missingGID, for: "error")["errorCode"] as? String == "3")

        // Client-chosen gids, paused adds, the waiting queue in order, moving within it.
        var paused: [String] = []
        for index in 0..<4 {
            let chosen = String(format: "00000000000a%04x", index)
            let added = try await rpc.call("aria2.addUri", [
                [server.url("/file/p\(index).bin?size=5000&seed=\(index)").absoluteString], ["dir": target.path, "pause": "true", "gid": chosen],
            ])
            #expect(added as? String == chosen)
            paused.append(chosen)
        }
        let taken = try await rpc.error("aria2.addUri", [[server.url("/file/x").absoluteString], ["gid": paused[0], "pause": "true"]])
        #expect(taken.code == 1 && taken.message.contains("not unique"))
        func waitingOrder() async throws -> [String] {
            let list = try #require(try await rpc.call("aria2.tellWaiting", [0, 100, ["gid", "status"]]) as? [[String: String]])
            #expect(list.allSatisfy { $0.count == 2 && $0["status"] == "paused" })
            return list.compactMap { $0["gid"] }
        }
        #expect(try await waitingOrder() == paused)
        #expect(try await rpc.call("aria2.changePosition", [paused[3], 0, "POS_SET"]) as? Int == 0)
        #expect(try await rpc.call("aria2.changePosition", [paused[0], -1, "POS_CUR"]) as? Int == 0)
        #expect(try await rpc.call("aria2.changePosition", [paused[1], 0, "POS_END"]) as? Int == 3)
        let moved = [paused[0], paused[3], paused[2], paused[1]]
        #expect(try await waitingOrder() == moved)
        // Negative offsets count from the end, newest first.
        let tail = try #require(try await rpc.call("aria2.tellWaiting", [-1, 2, ["gid"]]) as? [[String: String]])
        #expect(tail.map { $0["gid"]! } == [moved[3], moved[2]])
        #expect(try await rpc.error("aria2.changePosition", [paused[0], 0, "POS_NOWHERE"]).code == 1)

        // Unpause, pause, unpause again: states as aria2 names them.
        #expect(try await rpc.call("aria2.unpause", [paused[0]]) as? String == paused[0])
        _ = try await rpc.wait(paused[0], for: "complete")
        #expect(try await rpc.error("aria2.unpause", [paused[0]]).message.contains("cannot be unpaused"))
        #expect(try await rpc.call("aria2.unpauseAll") as? String == "OK")
        for gid in paused.dropFirst() { _ = try await rpc.wait(gid, for: "complete") }

        // Stopped downloads: tellStopped with offsets, removeDownloadResult, purge.
        let stopped = try #require(try await rpc.call("aria2.tellStopped", [0, 100, ["gid", "status"]]) as? [[String: String]])
        #expect(stopped.count == 7)
        let newest = try #require(try await rpc.call("aria2.tellStopped", [-1, 1, ["gid"]]) as? [[String: String]])
        #expect(newest.first?["gid"] == stopped.last?["gid"])
        let stats = try #require(try await rpc.call("aria2.getGlobalStat") as? [String: String])
        #expect(stats["numStopped"] == "7" && stats["numActive"] == "0" && stats["numWaiting"] == "0")
        #expect(try await rpc.call("aria2.removeDownloadResult", [badGID]) as? String == "OK")
        #expect(try await rpc.error("aria2.tellStatus", [badGID]).message.contains("is not found"))
        #expect(try await rpc.call("aria2.purgeDownloadResult") as? String == "OK")
        #expect((try await rpc.call("aria2.tellStopped", [0, 100]) as? [Any])?.isEmpty == true)

        // remove / forceRemove of a download in progress: removed, partial file gone.
        let slow = try #require(try await rpc.call("aria2.addUri", [[server.url("/file/slow.bin?size=50000000&seed=5&rate=2000000").absoluteString], ["dir": target.path]]) as? String)
        _ = try await rpc.wait(slow, for: "active")
        #expect(await waitUntil { server.bodyBytesSent(forKey: "slow.bin") > 100_000 })
        let servers = try #require(try await rpc.call("aria2.getServers", [slow]) as? [[String: Any]])
        #expect((servers.first?["servers"] as? [[String: String]])?.first?["uri"]?.contains("slow.bin") == true)
        #expect(try await rpc.call("aria2.forcePause", [slow]) as? String == slow)
        _ = try await rpc.wait(slow, for: "paused")
        #expect(try await rpc.error("aria2.getServers", [slow]).message.contains("No active download"))
        #expect(try await rpc.call("aria2.forceRemove", [slow]) as? String == slow)
        let removed = try await rpc.wait(slow, for: "removed")
        #expect(removed["status"] as? String == "removed")
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: target.path).filter { $0.contains("haul-part") }
        #expect(leftovers.isEmpty)
        #expect(try await rpc.error("aria2.addTorrent", ["AAAA"]).message.contains("not supported"))
        #expect(try await rpc.error("aria2.tellStatus", ["ffffffffffffffff"]).message == "GID ffffffffffffffff is not found")
        _ = await daemon.terminate()
    }

    @Test("Batches, system.multicall, GET with base64 params and JSONP, CORS preflight, changeUri, options, global options")
    func transportsAndOptions() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let daemon = try DaemonProcess()
        let rpc = try await daemon.startWithRPC()
        let target = daemon.dataDirectory.deletingLastPathComponent().appendingPathComponent("files").path
        let url = server.url("/file/m.bin?size=4000&seed=8").absoluteString

        // A batch answers each element in order, faults included.
        let batch: [Any] = [
            rpc.requestObject("aria2.addUri", [[url], ["dir": target, "pause": "true"]], id: 1),
            rpc.requestObject("aria2.nothing", id: 2),
            5,
            rpc.requestObject("aria2.getGlobalStat", id: 3),
        ]
        let (status, batchJSON) = try await rpc.post(Array(try JSONSerialization.data(withJSONObject: batch)))
        #expect(status == 200)
        let answers = try #require(batchJSON as? [[String: Any]])
        #expect(answers.count == 4)
        let gid = try #require(answers[0]["result"] as? String)
        #expect((answers[1]["error"] as? [String: Any])?["code"] as? Int == -32601)
        #expect((answers[2]["error"] as? [String: Any])?["code"] as? Int == -32600)
        #expect((answers[3]["result"] as? [String: String])?["numWaiting"] == "1")

        // system.multicall: the token in each sub-call; one without it fails alone.
        let multi = try #require(try await rpc.call("system.multicall", [[
            ["methodName": "aria2.tellStatus", "params": ["token:\(rpc.secret)", gid, ["gid", "status"]]],
            ["methodName": "aria2.getVersion", "params": []],
            ["methodName": "aria2.pause", "params": ["token:\(rpc.secret)", gid]],
        ]]) as? [Any])
        #expect(((multi[0] as? [Any])?.first as? [String: String]) == ["gid": gid, "status": "paused"])
        #expect((multi[1] as? [String: Any])?["message"] as? String == "Unauthorized")
        #expect((multi[2] as? [String: Any])?["message"] as? String == "GID#\(gid) cannot be paused now")

        // A run of addUri calls is added in one batch; each still gets its own answer, in order.
        let adds = try #require(try await rpc.call("system.multicall", [[
            ["methodName": "aria2.addUri", "params": ["token:\(rpc.secret)", [url + "&b=1"], ["pause": "true", "dir": target]]],
            ["methodName": "aria2.addUri", "params": ["token:\(rpc.secret)", ["ftp://127.0.0.1/no"], ["pause": "true"]]],
            ["methodName": "aria2.addUri", "params": ["token:wrong", [url + "&b=2"], ["pause": "true"]]],
            ["methodName": "aria2.addUri", "params": ["token:\(rpc.secret)", [url + "&b=3"], ["pause": "true", "dir": target]]],
            ["methodName": "aria2.addUri", "params": ["token:\(rpc.secret)", [url + "&b=4"], ["pause": "true", "dir": target], 0]],
        ]]) as? [Any])
        let batchGIDs = [adds[0], adds[3], adds[4]].compactMap { ($0 as? [String])?.first }
        #expect(batchGIDs.count == 3)
        #expect(((adds[1] as? [String: Any])?["message"] as? String)?.contains("not an http or https URI") == true)
        #expect((adds[2] as? [String: Any])?["message"] as? String == "Unauthorized")
        let waitingNow = try #require(try await rpc.call("aria2.tellWaiting", [0, 10, ["gid"]]) as? [[String: String]])
        #expect(waitingNow.map { $0["gid"]! } == [batchGIDs[2], gid, batchGIDs[0], batchGIDs[1]], "position 0 honoured")
        for added in batchGIDs { #expect(try await rpc.call("aria2.remove", [added]) as? String == added) }
        #expect(try await rpc.error("aria2.remove", [batchGIDs[0]]).message.contains("cannot be removed now"))
        _ = try await rpc.call("aria2.purgeDownloadResult")

        // GET /jsonrpc?method&id&params=BASE64, and the JSONP form.
        let params = Data(try JSONSerialization.data(withJSONObject: ["token:\(rpc.secret)", gid, ["status"]])).base64EncodedString()
        let getURL = URL(string: "\(rpc.endpoint)?method=aria2.tellStatus&id=7&params=\(params.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)")!
        let (getData, _) = try await URLSession.shared.data(from: getURL)
        let got = try #require(try JSONSerialization.jsonObject(with: getData) as? [String: Any])
        #expect(got["id"] as? Int == 7 && (got["result"] as? [String: String]) == ["status": "paused"])
        let (jsonp, jsonpResponse) = try await URLSession.shared.data(from: URL(string: getURL.absoluteString + "&jsoncallback=cb_1")!)
        #expect(String(decoding: jsonp, as: UTF8.self).hasPrefix("cb_1({\"id\":7"))
        #expect((jsonpResponse as? HTTPURLResponse)?.value(forHTTPHeaderField: "Access-Control-Allow-Origin") == "*")

        // CORS preflight, as a browser front-end sends it.
        var preflight = URLRequest(url: URL(string: rpc.endpoint)!)
        preflight.httpMethod = "OPTIONS"
        preflight.setValue("http://ariang.example", forHTTPHeaderField: "Origin")
        preflight.setValue("POST", forHTTPHeaderField: "Access-Control-Request-Method")
        let (_, preflightResponse) = try await URLSession.shared.data(for: preflight)
        let preflightHTTP = try #require(preflightResponse as? HTTPURLResponse)
        #expect(preflightHTTP.statusCode == 200)
        #expect(preflightHTTP.value(forHTTPHeaderField: "Access-Control-Allow-Methods")?.contains("POST") == true)

        // changeUri: add a mirror, then replace the primary; progress is kept.
        let changed = try #require(try await rpc.call("aria2.changeUri", [gid, 1, [], [url + "&mirror=1"]]) as? [Int])
        #expect(changed == [0, 1])
        let replaced = try #require(try await rpc.call("aria2.changeUri", [gid, 1, [url], [url + "&v=2"], 0]) as? [Int])
        #expect(replaced == [1, 1])
        let uris = try #require(try await rpc.call("aria2.getUris", [gid]) as? [[String: String]])
        #expect(uris.map { $0["uri"]! } == [url + "&v=2", url + "&mirror=1"])
        #expect(try await rpc.error("aria2.changeUri", [gid, 2, [], []]).message.contains("fileIndex"))

        // changeOption: a speed limit visible through the socket (one queue, four doors).
        #expect(try await rpc.call("aria2.changeOption", [gid, ["max-download-limit": "500K", "split": "3"]]) as? String == "OK")
        let client = try DaemonTestClient(socketPath: daemon.socketPath)
        defer { client.close() }
        let page = try await client.request(DaemonRequest(.queueList(QueuePage())))
        let shown = try #require(page.downloads?.first)
        #expect(shown.gid == gid && shown.speedLimit == 500 * 1024 && shown.options?["split"] == "3")
        #expect(try await rpc.error("aria2.changeOption", [gid, ["max-download-limit": "fast"]]).message.contains("not a rate"))

        // Global options: what Haul acts on becomes its settings (also `haul set`'s).
        #expect(try await rpc.call("aria2.changeGlobalOption", [["max-concurrent-downloads": "2", "max-overall-download-limit": "1M", "split": "5"]]) as? String == "OK")
        let global = try #require(try await rpc.call("aria2.getGlobalOption") as? [String: String])
        #expect(global["max-concurrent-downloads"] == "2" && global["max-overall-download-limit"] == "1048576" && global["split"] == "5")
        let settings = try #require(try await client.request(DaemonRequest(.queueSettings(nil))).settings)
        #expect(settings.maximumConcurrentDownloads == 2 && settings.globalSpeedLimit == 1 << 20)
        #expect(try await rpc.error("aria2.changeGlobalOption", [["max-concurrent-downloads": "0"]]).message.contains("max-concurrent"))
        #expect(try await rpc.call("aria2.getGlobalOption") as? [String: String] == global, "a refused change changes nothing")

        // Wrong parameter types are -32602; nothing changes.
        #expect(try await rpc.error("aria2.addUri", ["http://not-a-list"]).code == -32602)
        #expect(try await rpc.error("aria2.tellWaiting", ["zero", 10]).code == -32602)
        #expect(try await rpc.error("aria2.changeOption", [gid, "limit"]).code == -32602)
        #expect(try await rpc.call("aria2.getGlobalStat") as? [String: String] != nil)
        #expect((try await rpc.call("aria2.tellWaiting", [0, 10]) as? [Any])?.count == 1)
        _ = await daemon.terminate()
    }

    @Test("WebSocket: requests answered on the socket, notifications for start, pause, complete, stop, in order")
    func webSocket() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let daemon = try DaemonProcess()
        let rpc = try await daemon.startWithRPC()
        let target = daemon.dataDirectory.deletingLastPathComponent().appendingPathComponent("files").path
        let messages = MessageLog()
        let wsURL = rpc.endpoint.replacingOccurrences(of: "http://", with: "ws://")
        var logger = Logger(label: "ws-test")
        logger.logLevel = .critical
        let secret = rpc.secret
        let slowURL = server.url("/file/ws.bin?size=3000000&seed=12&rate=1500000").absoluteString
        @Sendable func find(_ predicate: ([String: Any]) -> Bool) -> Bool { messages.objects.contains(where: predicate) }
        @Sendable func notifications(_ gid: String) -> [String] {
            messages.objects.compactMap { message -> String? in
                    guard let method = message["method"] as? String,
                        ((message["params"] as? [[String: String]])?.first?["gid"]) == gid
                    else { return nil }
                    return method
                }
        }
        try await WebSocketClient.connect(url: wsURL, logger: logger) { inbound, outbound, _ in
            func send(_ object: [String: Any]) async throws {
                try await outbound.write(.text(String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self)))
            }
            let reader = Task {
                for try await message in inbound.messages(maxSize: 1 << 22) {
                    guard case .text(let text) = message else { continue }
                    messages.append(text)
                }
            }
            try await send(["jsonrpc": "2.0", "id": "add", "method": "aria2.addUri", "params": ["token:\(secret)", [slowURL], ["dir": target]]])
            #expect(await waitUntil { find { $0["id"] as? String == "add" } })
            let gid = try #require(messages.objects.first { $0["id"] as? String == "add" }?["result"] as? String)
            #expect(await waitUntil { notifications(gid).contains("aria2.onDownloadStart") })
            try await send(["jsonrpc": "2.0", "id": "pause", "method": "aria2.pause", "params": ["token:\(secret)", gid]])
            #expect(await waitUntil { notifications(gid).contains("aria2.onDownloadPause") })
            try await send(["jsonrpc": "2.0", "id": "unpause", "method": "aria2.unpause", "params": ["token:\(secret)", gid]])
            #expect(await waitUntil(timeout: .seconds(30)) { notifications(gid).contains("aria2.onDownloadComplete") })
            #expect(notifications(gid) == ["aria2.onDownloadStart", "aria2.onDownloadPause", "aria2.onDownloadStart", "aria2.onDownloadComplete"])
            // A download removed while it waits: onDownloadStop.
            try await send(["jsonrpc": "2.0", "id": "add2", "method": "aria2.addUri", "params": ["token:\(secret)", [slowURL + "&x=2"], ["dir": target]]])
            #expect(await waitUntil { find { $0["id"] as? String == "add2" } })
            let second = try #require(messages.objects.first { $0["id"] as? String == "add2" }?["result"] as? String)
            #expect(await waitUntil { notifications(second).contains("aria2.onDownloadStart") })
            try await send(["jsonrpc": "2.0", "id": "rm", "method": "aria2.remove", "params": ["token:\(secret)", second]])
            #expect(await waitUntil { notifications(second).contains("aria2.onDownloadStop") })
            // A wrong token on the socket is refused like over HTTP; a malformed frame is a parse error.
            try await send(["jsonrpc": "2.0", "id": "bad", "method": "aria2.tellActive", "params": ["token:nope"]])
            try await outbound.write(.text("{\"id\": 1, nope"))
            #expect(await waitUntil { find { ($0["error"] as? [String: Any])?["message"] as? String == "Unauthorized" } })
            #expect(await waitUntil { find { ($0["error"] as? [String: Any])?["code"] as? Int == -32700 } })
            try await outbound.close(.normalClosure, reason: nil)
            reader.cancel()
        }
        let target2 = URL(fileURLWithPath: target).appendingPathComponent("ws.bin").path
        #expect(try TestContent.sha256Hex(ofFileAt: target2) == TestContent.sha256Hex(size: 3_000_000, seed: 12))
        _ = await daemon.terminate()
    }

    @Test("Malformed bodies and frames on both transports: errors, the daemon stays up, the queue is unchanged")
    func malformedInput() async throws {
        let daemon = try DaemonProcess()
        let rpc = try await daemon.startWithRPC()
        _ = try await rpc.call("aria2.addUri", [["http://127.0.0.1:9/kept.bin"], ["pause": "true", "dir": daemon.dataDirectory.path]])
        let before = try #require(try await rpc.call("aria2.tellWaiting", [0, 100]) as? [[String: Any]])
        var generator = SystemRandomNumberGenerator()
        var bodies: [[UInt8]] = [
            [], Array("null".utf8), Array("[[[[".utf8), Array("{\"method\":".utf8), Array("\"just a string\"".utf8),
            Array(String(repeating: "[", count: 200_000).utf8), Array(String(repeating: "{\"a\":", count: 50_000).utf8),
            Array(#"{"jsonrpc":"2.0","id":1,"method":"aria2.addUri","params":["token:x",["http://a/"]]}"#.utf8),
            Array(#"{"jsonrpc":"2.0","id":{"nested":[1,2]},"method":"aria2.remove","params":[7]}"#.utf8),
            Array(#"{"id":1,"method":"system.multicall","params":[[{"methodName":"system.multicall","params":[[]]},7,{"methodName":5}]]}"#.utf8),
            Array(#"{"id":1,"method":"system.multicall","params":"x"}"#.utf8),
            [0xFF, 0xFE, 0x00, 0x7B], Array("\u{0}\u{1}{}".utf8),
        ]
        for method in ["aria2.tellStatus", "aria2.tellWaiting", "aria2.changePosition", "aria2.changeUri", "aria2.changeOption", "aria2.addUri", "aria2.remove"] {
            for params: [Any] in [[1, 2, 3], [NSNull()], [["a": 1]], [-1, -1, -1], ["ffffffffffffffff", "x", ["y"]], [Int64.max, Int64.min]] {
                bodies.append(Array(try JSONSerialization.data(withJSONObject: rpc.requestObject(method, params))))
            }
        }
        for _ in 0..<200 {
            bodies.append((0..<Int.random(in: 1...300, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) })
        }
        for body in bodies {
            let (status, json) = try await rpc.post(body)
            #expect(status == 200, "\(String(decoding: body.prefix(80), as: UTF8.self))")
            let answers = (json as? [[String: Any]]) ?? [(json as? [String: Any]) ?? [:]]
            #expect(!answers.isEmpty && answers.allSatisfy { $0["error"] != nil || $0["result"] != nil }, "\(String(describing: json))")
        }
        // Over the size limit: refused, not read.
        let huge = Array(#"{"id":1,"method":"aria2.getVersion","params":[""#.utf8) + [UInt8](repeating: 0x61, count: 3 << 20) + Array("\"]}".utf8)
        #expect(try await rpc.post(huge).status == 413)
        // WebSocket: garbage frames and an oversized message close that socket only.
        var logger = Logger(label: "ws-fuzz")
        logger.logLevel = .critical
        let wsURL = rpc.endpoint.replacingOccurrences(of: "http://", with: "ws://")
        let answered = MessageLog()
        let frames = Array(bodies.prefix(40))
        _ = try? await WebSocketClient.connect(url: wsURL, logger: logger) { inbound, outbound, _ in
            for body in frames { try await outbound.write(.binary(ByteBuffer(bytes: body))) }
            // One answer per frame; then a message over the limit, which closes this socket.
            for try await _ in inbound.messages(maxSize: 1 << 22) {
                answered.append("")
                if answered.count == frames.count { try await outbound.write(.text(String(repeating: "x", count: 3 << 20))) }
            }
        }
        #expect(answered.count == frames.count)
        let after = try #require(try await rpc.call("aria2.tellWaiting", [0, 100]) as? [[String: Any]])
        #expect(after.count == before.count && (after.first?["gid"] as? String) == (before.first?["gid"] as? String))
        #expect(try await rpc.call("aria2.getGlobalStat") is [String: String], "still answering")
        _ = await daemon.terminate()
    }

    @Test("SIGTERM with a silent connection and a WebSocket peer that never answers the close open on the RPC: hauld stops within seconds, exit 0")
    func stopsDespiteStuckConnections() async throws {
        let daemon = try DaemonProcess()
        let rpc = try await daemon.startWithRPC()
        let port = try #require(URL(string: rpc.endpoint)?.port)
        // Connected, never a byte sent (Hummingbird waits for its first request without end).
        let silent = try RawHTTPConnection(port: port)
        // Upgraded, then deaf: it never answers the close hauld sends as it stops.
        let deaf = try RawHTTPConnection(port: port)
        try deaf.send(RawHTTPConnection.request("GET", "/jsonrpc", headers: [
            "Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13",
        ]))
        #expect(try deaf.readResponse().status == 101)
        let process = try #require(daemon.process)
        let stopping = ContinuousClock.now
        process.terminate()
        // Bounded here: before, hauld waited for these connections until it was killed.
        let exited = await waitUntil(timeout: .seconds(15)) { !process.isRunning }
        let took = ContinuousClock.now - stopping
        #expect(exited, "still running 15 s after SIGTERM")
        await daemon.kill9()
        #expect(process.terminationStatus == 0)
        #expect(took < .seconds(8), "stopped after \(took)")
        #expect(took >= DaemonService.serverShutdownLimit, "the servers were given their time: \(took)")
        #expect(daemon.logText.contains("connections still open after"), "\(daemon.logText.suffix(600))")
        withExtendedLifetime((silent, deaf)) {}
        daemon.cleanUp()
    }

    @Test("One connection, pipelined: reads answered at once, a change's answer in its place, the router's answers interleaved in order, Connection: close and oversized bodies")
    func pipelining() async throws {
        let daemon = try DaemonProcess()
        let rpc = try await daemon.startWithRPC()
        let port = try #require(URL(string: rpc.endpoint)?.port)
        func post(_ method: String, _ params: [Any] = [], id: Int, headers: [String] = []) throws -> [UInt8] {
            let body = try JSONSerialization.data(withJSONObject: rpc.requestObject(method, params, id: id))
            return RawHTTPConnection.request("POST", "/jsonrpc", body: Array(body), headers: headers)
        }
        let token = Data(try JSONSerialization.data(withJSONObject: ["token:\(rpc.secret)"])).base64EncodedString()
        let multicall = [[["methodName": "aria2.tellActive", "params": ["token:\(rpc.secret)"]], ["methodName": "aria2.getGlobalStat", "params": ["token:\(rpc.secret)"]]]]
        var requests: [UInt8] = []
        requests += try post("aria2.getVersion", id: 1)
        requests += try post("aria2.addUri", [["http://127.0.0.1:9/pipelined.bin"], ["pause": "true", "dir": daemon.dataDirectory.path]], id: 2)
        requests += try post("aria2.tellWaiting", [0, 10, ["gid"]], id: 3)
        requests += RawHTTPConnection.request("OPTIONS", "/jsonrpc", headers: ["Origin: http://front.end", "Access-Control-Request-Method: POST"])
        requests += try post("aria2.getGlobalStat", id: 4)
        requests += RawHTTPConnection.request("GET", "/jsonrpc?method=aria2.getGlobalStat&id=5&params=\(token)")
        requests += try post("system.multicall", multicall, id: 6)
        requests += try post("aria2.getVersion", id: 7, headers: ["Connection: close"])
        let connection = try RawHTTPConnection(port: port)
        try connection.send(requests)
        var answers: [RawHTTPConnection.Response] = []
        for _ in 0..<8 { answers.append(try connection.readResponse()) }
        #expect(answers.map(\.status) == [200, 200, 200, 200, 200, 200, 200, 200])
        func object(_ index: Int) throws -> [String: Any] {
            try #require(try JSONSerialization.jsonObject(with: Data(answers[index].body)) as? [String: Any], "\(answers[index].text)")
        }
        #expect(try [0, 1, 2, 4, 5, 6, 7].map { try object($0)["id"] as? Int } == [1, 2, 3, 4, 5, 6, 7])
        let gid = try #require(try object(1)["result"] as? String)
        let waiting = try #require(try object(2)["result"] as? [[String: String]])
        #expect(waiting.map { $0["gid"] } == [gid], "the read after a change sees it")
        #expect(answers[3].headers["access-control-allow-origin"] == "*" && answers[3].body.isEmpty)
        #expect((try object(4)["result"] as? [String: String])?["numWaiting"] == "1")
        #expect((try object(5)["result"] as? [String: String])?["numWaiting"] == "1")
        #expect((try object(6)["result"] as? [[Any]])?.count == 2)
        #expect(answers.allSatisfy { $0.headers["access-control-allow-origin"] == "*" })
        #expect(connection.isClosedByServer(), "Connection: close")
        // The same, answered ahead of the router.
        let lone = try RawHTTPConnection(port: port)
        try lone.send(try post("aria2.getGlobalStat", id: 9, headers: ["Connection: close"]))
        let loneAnswer = try lone.readResponse()
        #expect(loneAnswer.status == 200 && loneAnswer.headers["connection"] == "close" && lone.isClosedByServer())

        // A body over the limit is refused and read to its end: the connection goes on.
        let big = Array(#"{"id":1,"method":"aria2.getVersion","params":[""#.utf8) + [UInt8](repeating: 0x61, count: 3 << 20) + Array("\"]}".utf8)
        let second = try RawHTTPConnection(port: port)
        try second.send(RawHTTPConnection.request("POST", "/jsonrpc", body: big) + (try post("aria2.getVersion", id: 8)))
        #expect(try second.readResponse().status == 413)
        let after = try second.readResponse()
        #expect(after.status == 200 && after.text.contains("\"id\":8"), "\(after.text)")
        _ = await daemon.terminate()
    }

    @Test("One queue, four doors: haul sees RPC downloads and the reverse; gids survive a restart; the secret never reaches the log")
    func fourDoors() async throws {
        let server = try await FaultInjectingHTTPServer.start()
        let daemon = try DaemonProcess()
        let secret = "never-log-\(UInt64.random(in: 0...UInt64.max))"
        let rpc = try await daemon.startWithRPC(secret: secret, extra: ["--verbose"])
        let cli = HaulCLI(daemon: daemon)
        let target = daemon.dataDirectory.deletingLastPathComponent().appendingPathComponent("files").path
        let added = try await cli.run(["add", "--paused", "--dir", target, server.url("/file/cli.bin?size=1000&seed=4").absoluteString])
        #expect(added.status == 0, "\(added.standardError)")
        let listed = try await cli.list()
        let cliGID = try #require(listed.first?.gid)
        let status = try await rpc.status(cliGID, keys: ["gid", "status", "dir"])
        #expect(status as? [String: String] == ["gid": cliGID, "status": "paused", "dir": target])
        let rpcGID = try #require(try await rpc.call("aria2.addUri", [
            [server.url("/file/rpc2.bin?size=1000&seed=5").absoluteString], ["pause": "true", "dir": target, "split": "4", "header": ["X-From: rpc"]],
        ]) as? String)
        let both = try await cli.list()
        #expect(both.map(\.gid) == [cliGID, rpcGID])
        let shown = try await cli.run(["show", "\(both[1].id)"]).standardOutput
        #expect(shown.contains(rpcGID) && shown.contains("X-From: rpc") && shown.contains("split=4"), "\(shown)")
        // `haul resume` through the socket is seen by the RPC.
        #expect(try await cli.run(["resume", "\(both[1].id)"]).status == 0)
        _ = try await rpc.wait(rpcGID, for: "complete")
        // The info command prints the endpoint and the secret.
        let info = try await cli.run(["rpc-info"])
        #expect(info.status == 0 && info.standardOutput.contains(rpc.endpoint) && info.standardOutput.contains(secret))
        // A GET carries the token in its URL: it must not be logged either.
        let params = Data(try JSONSerialization.data(withJSONObject: ["token:\(secret)"])).base64EncodedString()
        _ = try await URLSession.shared.data(from: URL(string: "\(rpc.endpoint)?method=aria2.getGlobalStat&id=1&params=\(params.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)")!)
        // Restart: the same gids answer.
        #expect(await daemon.terminate() == 0)
        let again = try await daemon.startWithRPC(secret: secret, extra: ["--verbose"])
        #expect(try await again.status(cliGID, keys: ["status"]) as? [String: String] == ["status": "paused"])
        #expect(try await again.status(rpcGID, keys: ["status"]) as? [String: String] == ["status": "complete"])
        _ = await daemon.terminate()
        let log = daemon.logText
        #expect(log.contains("aria2 RPC on http://127.0.0.1:"))
        #expect(!log.contains(secret), "the secret reached the log")
        #expect(!log.contains(params), "the token's GET query reached the log")
    }

    @Test("Without --rpc-secret a secret is made once, kept (mode 0600), required, and rpc-info prints it")
    func generatedSecret() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start(extraArguments: ["--enable-rpc", "--rpc-listen-port", "0"])
        let rpc = try await daemon.rpcClient()
        #expect(rpc.secret.count == 64)
        let file = daemon.dataDirectory.appendingPathComponent("rpc-secret").path
        #expect((try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        #expect(try await rpc.error("aria2.getGlobalStat", [], token: false).message == "Unauthorized")
        #expect(try await rpc.call("aria2.getGlobalStat") is [String: String])
        _ = await daemon.terminate()
        try await daemon.start(extraArguments: ["--enable-rpc", "--rpc-listen-port", "0"])
        #expect(try await daemon.rpcClient().secret == rpc.secret, "kept across restarts")
        _ = await daemon.terminate()
        // Without --enable-rpc there is no RPC, and rpc-info says how to get one.
        try await daemon.start()
        let info = try await HaulCLI(daemon: daemon).run(["rpc-info"])
        #expect(info.status == 1 && info.standardError.contains("--enable-rpc"))
        _ = await daemon.terminate()
    }
}
