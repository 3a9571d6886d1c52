import Foundation
import HaulCore
import Logging

/// aria2's RPC methods over the ``DownloadQueue``: the same downloads that `haul`, the socket
/// and the web UI see, with aria2's parameter and result shapes (numbers as strings, gids,
/// `files[].uris[]`, …). Transport-free: ``Aria2RPCServer`` hands it bodies and messages.
///
/// Calls are answered one at a time per request (a batch in order); nothing here blocks a
/// thread: queue changes go through the queue's serial work queue.
public struct Aria2Methods: Sendable {
    /// The aria2 version front-ends see (they gate features on it).
    public static let aria2Version = "1.37.0"

    public static let methods: [String] = [
        "aria2.addUri", "aria2.addTorrent", "aria2.getPeers", "aria2.addMetalink", "aria2.remove", "aria2.pause",
        "aria2.forcePause", "aria2.pauseAll", "aria2.forcePauseAll", "aria2.unpause", "aria2.unpauseAll",
        "aria2.forceRemove", "aria2.changePosition", "aria2.tellStatus", "aria2.getUris", "aria2.getFiles",
        "aria2.getServers", "aria2.tellActive", "aria2.tellWaiting", "aria2.tellStopped", "aria2.getOption",
        "aria2.changeUri", "aria2.changeOption", "aria2.getGlobalOption", "aria2.changeGlobalOption",
        "aria2.purgeDownloadResult", "aria2.removeDownloadResult", "aria2.getVersion", "aria2.getSessionInfo",
        "aria2.shutdown", "aria2.forceShutdown", "aria2.getGlobalStat", "aria2.saveSession", "system.multicall",
        "system.listMethods", "system.listNotifications",
    ]

    let queue: DownloadQueue
    let secret: String?
    let sessionID: String
    /// The port the RPC listens on, for `getGlobalOption`.
    let port: @Sendable () -> Int?
    /// Asks the daemon to stop (pausing every transfer with its checkpoint).
    let shutdown: @Sendable () -> Void
    let logger: Logger

    public init(
        queue: DownloadQueue,
        secret: String?,
        port: @escaping @Sendable () -> Int?,
        shutdown: @escaping @Sendable () -> Void,
        logger: Logger
    ) {
        self.queue = queue
        self.secret = secret
        self.sessionID = (0..<20).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        self.port = port
        self.shutdown = shutdown
        self.logger = logger
    }

    // MARK: - Envelopes

    /// The answer to one body or message: an object, or an array for a batch.
    public func answer(_ bytes: some Collection<UInt8>) async -> [UInt8] {
        await self.answer(Aria2Envelope.parse(bytes)).bytes
    }

    public func answer(_ envelope: Aria2Envelope) async -> JSONValue {
        switch envelope {
        case .single(let call): return await self.answer(call)
        case .batch(let calls):
            var answers: [JSONValue] = []
            answers.reserveCapacity(calls.count)
            for call in calls { answers.append(await self.answer(call)) }
            return .array(answers)
        }
    }

    func answer(_ call: Result<Aria2Call, Aria2FaultWithID>) async -> JSONValue {
        switch call {
        case .failure(let fault): return Aria2Envelope.error(id: fault.id, fault.fault)
        case .success(let call):
            do {
                return Aria2Envelope.result(id: call.id, try await self.call(call.method, call.params))
            } catch {
                return Aria2Envelope.error(id: call.id, error)
            }
        }
    }

    // MARK: - Dispatch

    /// How a call is answered: at once (reads, and every refusal), or from a task (changes,
    /// which wait on the queue's work queue, and long lists).
    enum Plan {
        case now(JSONValue)
        case later(name: String, Parameters)
    }

    /// The result of one method call. `aria2.*` methods check the token first.
    public func call(_ method: String, _ rawParams: [JSONValue]) async throws(Aria2Fault) -> JSONValue {
        if method == "system.multicall" { return try await self.multicall(rawParams) }
        switch try self.plan(method, rawParams) {
        case .now(let result): return result
        case .later(let name, let params):
            do {
                return try await self.later(name, params)
            } catch {
                throw Self.fault(error)
            }
        }
    }

    /// Answers what can be answered without waiting (reads and refusals), on the caller's
    /// thread; `nil` when some call in it changes the queue. ``Aria2RPCServer`` answers these
    /// on the connection's event loop.
    public func answerNow(_ envelope: Aria2Envelope) -> JSONValue? {
        switch envelope {
        case .single(let call): return self.answerNow(call)
        case .batch(let calls):
            var answers: [JSONValue] = []
            answers.reserveCapacity(calls.count)
            for call in calls {
                guard let answer = self.answerNow(call) else { return nil }
                answers.append(answer)
            }
            return .array(answers)
        }
    }

    func answerNow(_ call: Result<Aria2Call, Aria2FaultWithID>) -> JSONValue? {
        switch call {
        case .failure(let fault): return Aria2Envelope.error(id: fault.id, fault.fault)
        case .success(let call):
            do {
                guard let result = try self.callNow(call.method, call.params) else { return nil }
                return Aria2Envelope.result(id: call.id, result)
            } catch {
                return Aria2Envelope.error(id: call.id, error)
            }
        }
    }

    /// A call's result at once, or `nil` when it (or a sub-call of a multicall) changes the queue.
    func callNow(_ method: String, _ rawParams: [JSONValue]) throws(Aria2Fault) -> JSONValue? {
        if method == "system.multicall" {
            let calls = try Self.multicallCalls(rawParams)
            for case .success(let call) in calls where Self.waits(call.method, call.params) {
                return nil
            }
            var answers: [JSONValue] = []
            answers.reserveCapacity(calls.count)
            for call in calls {
                switch call {
                case .failure(let fault): answers.append(fault.json)
                case .success(let call):
                    do {
                        guard let result = try self.callNow(call.method, call.params) else { return nil }
                        answers.append(.array([result]))
                    } catch {
                        answers.append(error.json)
                    }
                }
            }
            return .array(answers)
        }
        if case .now(let result) = try self.plan(method, rawParams) { return result }
        return nil
    }

    /// The `aria2.*` methods that change the queue (answered after the queue's work queue ran them).
    private static let changingMethods: Set<String> = [
        "aria2.addUri", "aria2.remove", "aria2.forceRemove", "aria2.pause", "aria2.forcePause", "aria2.pauseAll",
        "aria2.forcePauseAll", "aria2.unpause", "aria2.unpauseAll", "aria2.changePosition", "aria2.changeUri",
        "aria2.changeOption", "aria2.changeGlobalOption", "aria2.purgeDownloadResult", "aria2.removeDownloadResult",
    ]

    /// Whether a call is answered off the event loop: changes, and lists of more than 1,000
    /// downloads (every key of 10,000 takes ~70 ms: other connections on the loop must not wait).
    static func waits(_ method: String, _ rawParams: [JSONValue]) -> Bool {
        if Self.changingMethods.contains(method) { return true }
        guard method == "aria2.tellWaiting" || method == "aria2.tellStopped" else { return false }
        // [token,] offset, num
        let params = rawParams.first?.stringValue?.hasPrefix("token:") == true ? rawParams.dropFirst() : rawParams[...]
        guard params.count > 1 else { return false }
        let num = params[params.startIndex + 1]
        return (num.integerValue ?? num.stringValue.flatMap { Int64($0) } ?? 0) > 1000
    }

    /// Checks the method and the token, and answers reads at once.
    private func plan(_ method: String, _ rawParams: [JSONValue]) throws(Aria2Fault) -> Plan {
        switch method {
        case "system.listMethods": return .now(.array(Self.methods.map(JSONValue.string)))
        case "system.listNotifications": return .now(.array(Aria2NotificationTracker.methods.map(JSONValue.string)))
        default: break
        }
        guard method.hasPrefix("aria2."), Self.methods.contains(method) else { throw .methodNotFound }
        let params = Parameters(try Aria2Token.strip(rawParams, secret: self.secret), method: method)
        let name = String(method.dropFirst(6))
        if Self.waits(method, rawParams) { return .later(name: name, params) }
        do {
            return .now(try self.read(name, params))
        } catch {
            throw Self.fault(error)
        }
    }

    private static func fault(_ error: any Error) -> Aria2Fault {
        switch error {
        case let fault as Aria2Fault: return fault
        case let error as DaemonError: return Aria2Fault(error.description)
        default: return Aria2Fault("\(error)")
        }
    }

    /// The methods that only read (and `shutdown`, which only asks).
    private func read(_ name: String, _ params: Parameters) throws -> JSONValue {
        let queue = self.queue
        switch name {
        case "addTorrent", "addMetalink":
            throw Aria2Fault("\(name) is not supported: Haul downloads over HTTP and HTTPS only")
        case "tellStatus":
            let info = try self.info(params)
            return .raw(Aria2Status.bytes(info, keys: Aria2Status.keySet(try params.strings(1, "keys", optional: true))))
        case "getUris":
            var writer = JSONWriter(capacity: 128)
            Aria2Status.writeURIs(try self.info(params), to: &writer)
            return .raw(writer.bytes)
        case "getFiles":
            return .raw(Aria2Status.files(try self.info(params)))
        case "getPeers":
            _ = try self.info(params)
            return .array([])
        case "getServers":
            let info = try self.info(params)
            guard info.state == .active else { throw Aria2Fault("No active download for GID#\(info.gid)") }
            let url = JSONValue.string(info.urls[0].absoluteString)
            let speed = JSONValue.string(String(Int64((info.speed ?? 0).rounded())))
            let server = JSONValue.object([("currentUri", url), ("downloadSpeed", speed), ("uri", url)])
            return .array([.object([("index", .string("1")), ("servers", .array([server]))])])
        case "tellActive":
            return Self.list(queue.liveInfos(in: [.active]), keys: try params.strings(0, "keys", optional: true))
        case "tellWaiting", "tellStopped":
            let offset = try params.integer(0, required: true)!
            let num = try params.integer(1, required: true)!
            let keys = try params.strings(2, "keys", optional: true)
            let window = { (count: Int) throws(Aria2Fault) -> [Int] in try Aria2Window.indices(count: count, offset: offset, num: num) }
            let infos = name == "tellWaiting" ? try queue.waitingQueue(window: window) : try queue.stoppedDownloads(window: window)
            return Self.list(infos, keys: keys)
        case "getOption":
            let info = try self.info(params)
            let options = Aria2Options.options(of: info, globalDefaults: queue.settings.rpcOptions ?? [:])
            return .object(options.map { ($0.0, .string($0.1)) })
        case "getGlobalOption":
            return .object(self.globalOptions().map { ($0.0, .string($0.1)) })
        case "getGlobalStat":
            let counts = queue.stateCounts()
            let stopped = (counts[.complete] ?? 0) + (counts[.error] ?? 0) + (counts[.removed] ?? 0)
            func number(_ value: Int) -> JSONValue { .string(String(value)) }
            return .object([
                ("downloadSpeed", .string(String(Int64(queue.downloadSpeed.rounded())))),
                ("numActive", number(counts[.active] ?? 0)),
                ("numStopped", number(stopped)),
                ("numStoppedTotal", number(stopped)),
                ("numWaiting", number((counts[.waiting] ?? 0) + (counts[.paused] ?? 0))),
                ("uploadSpeed", .string("0")),
            ])
        case "getVersion":
            return .object([
                ("enabledFeatures", .array(["Async DNS", "HTTPS", "Checksum", "GZip"].map(JSONValue.string))),
                ("haulVersion", .string("0.1.0")),
                ("version", .string(Self.aria2Version)),
            ])
        case "getSessionInfo":
            return .object([("sessionId", .string(self.sessionID))])
        case "saveSession":
            // Every change is already in the store when its call answers.
            return .string("OK")
        case "shutdown", "forceShutdown":
            self.logger.info("RPC asked for \(name): stopping")
            let stop = self.shutdown
            Task {
                // Let the answer go out first.
                try? await Task.sleep(for: .milliseconds(200))
                stop()
            }
            return .string("OK")
        default:
            throw Aria2Fault.methodNotFound
        }
    }

    /// The methods that change the queue, and reads too long for the event loop.
    private func later(_ name: String, _ params: Parameters) async throws -> JSONValue {
        let queue = self.queue
        switch name {
        case "addUri":
            var request = try self.newDownload(params)
            let position = try params.integer(2)
            if position != nil, request.paused == false {
                // Placed before it can start: added paused, moved, then released.
                request.paused = true
                let info = try await queue.add([request])[0]
                _ = try await queue.changePosition(id: info.id, offset: position!, how: "POS_SET")
                try await queue.resume(id: info.id)
                return .string(info.gid)
            }
            let info = try await queue.add([request])[0]
            if let position { _ = try await queue.changePosition(id: info.id, offset: position, how: "POS_SET") }
            return .string(info.gid)
        case "remove", "forceRemove":
            let (id, gid) = try self.download(params)
            guard queue.liveInfo(id: id)?.state.isInProgress == true else { throw Aria2Fault("GID#\(gid) cannot be removed now") }
            try await queue.cancel(id: id)
            return .string(gid)
        case "pause", "forcePause":
            let (id, gid) = try self.download(params)
            guard let info = queue.liveInfo(id: id), info.state.canPause else {
                throw Aria2Fault("GID#\(gid) cannot be paused now")
            }
            try await queue.pause(id: id)
            return .string(gid)
        case "pauseAll", "forcePauseAll":
            _ = try await queue.pauseAll()
            return .string("OK")
        case "unpause":
            let (id, gid) = try self.download(params)
            guard queue.liveInfo(id: id)?.state == .paused else { throw Aria2Fault("GID#\(gid) cannot be unpaused now") }
            try await queue.resume(id: id)
            return .string(gid)
        case "unpauseAll":
            _ = try await queue.resumeAll()
            return .string("OK")
        case "changePosition":
            let (id, _) = try self.download(params)
            let offset = try params.integer(1, required: true)!
            let how = try params.string(2, "how")
            return .integer(Int64(try await queue.changePosition(id: id, offset: offset, how: how)))
        case "changeUri":
            let (id, _) = try self.download(params)
            guard try params.integer(1, required: true) == 1 else { throw Aria2Fault("fileIndex out of range: an HTTP download has one file, 1") }
            let deleted = try params.strings(2, "delUris")
            let added = try params.strings(3, "addUris")
            let position = try params.integer(4)
            let result = try await queue.changeURIs(id: id, delete: deleted, add: added, position: position.map { Int(clamping: $0) })
            return .array([.integer(Int64(result.deleted)), .integer(Int64(result.added))])
        case "changeOption":
            let (id, _) = try self.download(params)
            try await queue.changeOptions(id: id, try params.object(1, required: true)!)
            return .string("OK")
        case "changeGlobalOption":
            try await self.changeGlobalOptions(try params.object(0, required: true)!)
            return .string("OK")
        case "purgeDownloadResult":
            _ = try await queue.purge()
            return .string("OK")
        case "removeDownloadResult":
            let (id, _) = try self.download(params)
            try await queue.removeResult(id: id)
            return .string("OK")
        default:
            // Reads that wait (long lists) are answered here, off the event loop.
            return try self.read(name, params)
        }
    }

    /// The download an `addUri` call asks for (its URIs and options, over the recorded
    /// global defaults).
    private func newDownload(_ params: Parameters) throws(Aria2Fault) -> NewDownload {
        let uris = try params.strings(0, "uris")
        let options = try params.object(1) ?? []
        return try Aria2Options.newDownload(uris: uris, options: options, defaults: self.queue.settings.rpcOptions ?? [:])
    }

    /// `system.multicall([{methodName, params}, …])`: each answer is `[result]` or a fault
    /// object, in order; each `aria2.*` sub-call carries its own token.
    ///
    /// A run of `addUri` calls (how front-ends add many URLs at once) is added in one
    /// transaction, as `haul add -i` does; if the batch is refused as a whole, each is added on
    /// its own so that each gets its own answer.
    private func multicall(_ params: [JSONValue]) async throws(Aria2Fault) -> JSONValue {
        let parsed = try Self.multicallCalls(params)
        var answers: [JSONValue] = []
        answers.reserveCapacity(parsed.count)
        var index = 0
        while index < parsed.count {
            // A run of plain addUri calls (no position) goes in as one batch.
            var batch: [(answer: Int, request: NewDownload)] = []
            while index < parsed.count, case .success(let call) = parsed[index], call.method == "aria2.addUri" {
                let request: NewDownload
                do {
                    let arguments = Parameters(try Aria2Token.strip(call.params, secret: self.secret), method: call.method)
                    guard try arguments.integer(2) == nil else { break }
                    request = try self.newDownload(arguments)
                } catch {
                    answers.append(error.json)
                    index += 1
                    continue
                }
                answers.append(.null)
                batch.append((answers.count - 1, request))
                index += 1
            }
            if !batch.isEmpty {
                await self.addBatch(batch, into: &answers)
                continue
            }
            switch parsed[index] {
            case .failure(let fault): answers.append(fault.json)
            case .success(let call):
                do {
                    answers.append(.array([try await self.call(call.method, call.params)]))
                } catch {
                    answers.append(error.json)
                }
            }
            index += 1
        }
        return .array(answers)
    }

    /// A multicall's sub-calls, each checked for shape (a nested multicall is refused).
    private static func multicallCalls(_ params: [JSONValue]) throws(Aria2Fault) -> [Result<(method: String, params: [JSONValue]), Aria2Fault>] {
        guard params.count == 1, case .array(let calls) = params[0] else {
            throw .invalidParams("system.multicall takes one list of {methodName, params}")
        }
        var parsed: [Result<(method: String, params: [JSONValue]), Aria2Fault>] = []
        parsed.reserveCapacity(calls.count)
        for call in calls {
            guard let method = call["methodName"]?.stringValue else {
                parsed.append(.failure(.invalidParams("each call needs a methodName")))
                continue
            }
            if method == "system.multicall" {
                parsed.append(.failure(Aria2Fault("system.multicall cannot be nested")))
                continue
            }
            switch call["params"] {
            case nil, .null?: parsed.append(.success((method, [])))
            case .array(let values)?: parsed.append(.success((method, values)))
            default: parsed.append(.failure(.invalidParams("params must be an array")))
            }
        }
        return parsed
    }

    /// Adds checked `addUri` requests in one transaction and puts each gid (or fault) in its
    /// place in `answers`.
    private func addBatch(_ batch: [(answer: Int, request: NewDownload)], into answers: inout [JSONValue]) async {
        if batch.count > 1, let added = try? await self.queue.add(batch.map(\.request)) {
            for (entry, info) in zip(batch, added) { answers[entry.answer] = .array([.string(info.gid)]) }
            return
        }
        for entry in batch {
            do {
                let info = try await self.queue.add([entry.request])[0]
                answers[entry.answer] = .array([.string(info.gid)])
            } catch let error as DaemonError {
                answers[entry.answer] = Aria2Fault(error.description).json
            } catch {
                answers[entry.answer] = Aria2Fault("\(error)").json
            }
        }
    }

    // MARK: - Helpers

    private static func list(_ infos: some Sequence<QueuedDownloadInfo>, keys: [String]?) -> JSONValue {
        let keySet = Aria2Status.keySet(keys)
        var writer = JSONWriter(capacity: 4096)
        writer.append(UInt8(ascii: "["))
        var first = true
        for info in infos {
            if !first { writer.append(UInt8(ascii: ",")) }
            first = false
            Aria2Status.write(info, keys: keySet, to: &writer)
        }
        writer.append(UInt8(ascii: "]"))
        return .raw(writer.bytes)
    }

    private func download(_ params: Parameters) throws -> (id: Int64, gid: String) {
        let gid = try params.string(0, "gid")
        let id = try self.queue.id(gid: gid)
        return (id, gid.lowercased())
    }

    private func info(_ params: Parameters) throws -> QueuedDownloadInfo {
        let (id, gid) = try self.download(params)
        guard let info = self.queue.liveInfo(id: id) else { throw Aria2Fault("GID \(gid) is not found") }
        return info
    }

    func globalOptions() -> [(String, String)] {
        let settings = self.queue.settings
        var options: [String: String] = [
            "max-connection-per-server": "1",
            "split": "1",
        ]
        for (name, value) in settings.rpcOptions ?? [:] { options[name] = value }
        options["dir"] = settings.defaultDirectory
        options["max-concurrent-downloads"] = String(settings.maximumConcurrentDownloads)
        options["max-overall-download-limit"] = String(settings.globalSpeedLimit)
        options["enable-rpc"] = "true"
        if let port = self.port() { options["rpc-listen-port"] = String(port) }
        return options.sorted { $0.key < $1.key }
    }

    /// Applies what Haul acts on to its settings (shared with `haul set` and the web UI) and
    /// records the rest. Every value is checked before any is applied.
    private func changeGlobalOptions(_ options: [(String, JSONValue)]) async throws {
        var settings: [(String, String)] = []
        var recorded: [String: String] = [:]
        var check = self.queue.settings
        for (name, value) in options {
            let text = try Aria2Options.text(value, name: name)
            if let key = Aria2Options.globalSettings[name] {
                do { try check.set(key, to: text) } catch { throw Aria2Fault("option \(name): \(error)") }
                settings.append((key, text))
            } else if Aria2Options.globalRecorded.contains(name) {
                try Aria2Options.checkRecorded(name, text)
                recorded[name] = text
            }
            // Other names (aria2's own start-up options) are ignored, as aria2 ignores them here.
        }
        for (key, text) in settings { _ = try await self.queue.set(key, to: text) }
        if !recorded.isEmpty { _ = try await self.queue.setRPCOptions(recorded) }
    }
}

/// A call's positional parameters (after the token), read with aria2's types and -32602 for
/// a wrong one.
struct Parameters {
    let values: [JSONValue]
    let method: String

    init(_ values: [JSONValue], method: String) {
        self.values = values
        self.method = method
    }

    private func value(_ index: Int) -> JSONValue? {
        guard index < self.values.count else { return nil }
        if case .null = self.values[index] { return nil }
        return self.values[index]
    }

    func string(_ index: Int, _ name: String) throws(Aria2Fault) -> String {
        guard let value = self.value(index) else { throw .invalidParams("\(self.method) needs \(name)") }
        guard let text = value.stringValue else { throw .invalidParams("\(name) must be a string") }
        return text
    }

    /// A list of strings (`optional`: absent is `nil`).
    func strings(_ index: Int, _ name: String, optional: Bool) throws(Aria2Fault) -> [String]? {
        guard let value = self.value(index) else {
            if optional { return nil }
            throw .invalidParams("\(self.method) needs \(name)")
        }
        guard let values = value.arrayValue else { throw .invalidParams("\(name) must be a list of strings") }
        var strings: [String] = []
        for value in values {
            guard let text = value.stringValue else { throw .invalidParams("\(name) must be a list of strings") }
            strings.append(text)
        }
        return strings
    }

    func strings(_ index: Int, _ name: String) throws(Aria2Fault) -> [String] {
        try self.strings(index, name, optional: false)!
    }

    /// An integer, also given as a string of digits (aria2 accepts both).
    func integer(_ index: Int, required: Bool = false) throws(Aria2Fault) -> Int64? {
        guard let value = self.value(index) else {
            if required { throw .invalidParams("\(self.method) needs parameter \(index + 1)") }
            return nil
        }
        if let number = value.integerValue { return number }
        if let text = value.stringValue, let number = Int64(text) { return number }
        throw .invalidParams("parameter \(index + 1) of \(self.method) must be an integer")
    }

    func object(_ index: Int, required: Bool = false) throws(Aria2Fault) -> [(String, JSONValue)]? {
        guard let value = self.value(index) else {
            if required { throw .invalidParams("\(self.method) needs an options object") }
            return nil
        }
        guard let members = value.objectValue else { throw .invalidParams("parameter \(index + 1) of \(self.method) must be an object") }
        return members
    }
}
