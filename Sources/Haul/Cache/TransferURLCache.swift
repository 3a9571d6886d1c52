import Crypto
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HaulCore
import HaulEngine
import Synchronization

/// An HTTP response cache in memory and on disk, shaped like `URLCache`: sessions consult it
/// for data tasks under their request's cache policy (fresh entries answer without the network,
/// stale ones are revalidated with `If-None-Match` / `If-Modified-Since`), and store responses
/// HTTP allows to be stored (RFC 9111, as a private cache).
///
/// Entries larger than 5 % of the larger capacity are not stored, as URLCache does. Memory
/// and disk are each trimmed to their capacity, least recently used first. Disk entries are
/// one file each in ``directory``, written atomically; a damaged file is ignored and removed.
/// All members are thread-safe.
public final class TransferURLCache: Sendable {
    /// The cache of `.default` sessions: 4 MiB in memory, 64 MiB on disk under
    /// `$XDG_CACHE_HOME/haul/URLCache` (default `~/.cache/haul/URLCache`).
    public static let shared: TransferURLCache = {
        let environment = ProcessInfo.processInfo.environment
        let base = environment["XDG_CACHE_HOME"].flatMap { $0.isEmpty ? nil : URL(fileURLWithPath: $0) }
            ?? FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(".cache")
        return TransferURLCache(
            memoryCapacity: 4 << 20,
            diskCapacity: 64 << 20,
            directory: base.appendingPathComponent("haul/URLCache", isDirectory: true)
        )
    }()

    private struct MemoryEntry {
        var response: StoredResponse
        var cost: Int
        var lastUse: UInt64
    }

    private struct State {
        var memoryCapacity: Int
        var diskCapacity: Int
        var memory: [String: MemoryEntry] = [:]
        var memoryUsage = 0
        var useCounter: UInt64 = 0
        /// Bytes of the disk files, counted on first use.
        var diskUsage: Int?
    }

    /// Where disk entries live; `nil` for a memory-only cache.
    public let directory: URL?
    private let state: Mutex<State>

    /// A cache with these capacities in bytes. `directory` is created when the first entry is
    /// written; `nil` (or a disk capacity of 0) keeps everything in memory.
    public init(memoryCapacity: Int, diskCapacity: Int, directory: URL? = nil) {
        self.directory = directory
        self.state = Mutex(State(memoryCapacity: max(0, memoryCapacity), diskCapacity: directory == nil ? 0 : max(0, diskCapacity)))
    }

    /// The memory capacity in bytes; lowering it trims at once.
    public var memoryCapacity: Int {
        get { self.state.withLock { $0.memoryCapacity } }
        set {
            self.state.withLock {
                $0.memoryCapacity = max(0, newValue)
                Self.trimMemory(&$0)
            }
        }
    }

    /// The disk capacity in bytes; lowering it trims at once.
    public var diskCapacity: Int {
        get { self.state.withLock { $0.diskCapacity } }
        set {
            self.state.withLock { $0.diskCapacity = self.directory == nil ? 0 : max(0, newValue) }
            self.trimDisk()
        }
    }

    /// Bytes held in memory now.
    public var currentMemoryUsage: Int { self.state.withLock { $0.memoryUsage } }

    /// Bytes of entry files on disk now.
    public var currentDiskUsage: Int {
        if let usage = self.state.withLock({ $0.diskUsage }) { return usage }
        let usage = self.diskFiles().reduce(0) { $0 + $1.size }
        self.state.withLock { $0.diskUsage = usage }
        return usage
    }

    // MARK: - URLCache's API

    /// The stored response for `request` (a GET), whatever its age.
    public func cachedResponse(for request: URLRequest) -> CachedURLResponse? {
        guard let url = request.url, let stored = self.storedResponse(for: url) else { return nil }
        return Self.cachedURLResponse(stored).value
    }

    /// Foundation's form of an entry.
    static func cachedURLResponse(_ stored: StoredResponse) -> UncheckedSendable<CachedURLResponse> {
        let response = HTTPURLResponse(
            url: stored.url,
            statusCode: stored.statusCode,
            httpVersion: "HTTP/1.1",
            headerFields: Dictionary(stored.headers.fields.map { ($0.name, $0.value) }, uniquingKeysWith: { "\($0), \($1)" })
        )!
        return UncheckedSendable(
            CachedURLResponse(
                response: response,
                data: stored.body,
                userInfo: nil,
                storagePolicy: stored.isMemoryOnly ? .allowedInMemoryOnly : .allowed
            )
        )
    }

    /// Stores `cachedResponse` for `request` (its response must be an `HTTPURLResponse`),
    /// as received now. `.notAllowed` stores nothing.
    public func storeCachedResponse(_ cachedResponse: CachedURLResponse, for request: URLRequest) {
        guard let stored = Self.storedResponse(cachedResponse, request: request) else { return }
        self.store(stored)
    }

    /// Removes the entry for `request`'s URL.
    public func removeCachedResponse(for request: URLRequest) {
        if let url = request.url { self.removeStoredResponse(for: url) }
    }

    /// The stored response for a data task's request, handed to `completionHandler` (at once,
    /// on the calling thread).
    public func getCachedResponse(for dataTask: TransferSessionDataTask, completionHandler: @Sendable (CachedURLResponse?) -> Void) {
        completionHandler((dataTask.currentRequest ?? dataTask.originalRequest).flatMap { self.cachedResponse(for: $0) })
    }

    /// Stores `cachedResponse` for a data task's request.
    public func storeCachedResponse(_ cachedResponse: CachedURLResponse, for dataTask: TransferSessionDataTask) {
        if let request = dataTask.currentRequest ?? dataTask.originalRequest { self.storeCachedResponse(cachedResponse, for: request) }
    }

    /// Removes the entry for a data task's request.
    public func removeCachedResponse(for dataTask: TransferSessionDataTask) {
        if let request = dataTask.currentRequest ?? dataTask.originalRequest { self.removeCachedResponse(for: request) }
    }

    /// Removes every entry, in memory and on disk.
    public func removeAllCachedResponses() {
        self.state.withLock {
            $0.memory = [:]
            $0.memoryUsage = 0
        }
        for file in self.diskFiles() { try? FileManager.default.removeItem(at: file.url) }
        self.state.withLock { $0.diskUsage = 0 }
    }

    /// Removes the entries stored at or after `date`.
    public func removeCachedResponses(since date: Date) {
        self.state.withLock { state in
            for (key, entry) in state.memory where entry.response.responseTime >= date {
                state.memory[key] = nil
                state.memoryUsage -= entry.cost
            }
        }
        for file in self.diskFiles() where file.modified >= date { try? FileManager.default.removeItem(at: file.url) }
        self.state.withLock { $0.diskUsage = nil }
    }

    // MARK: - Conversions

    static func storedResponse(_ cached: CachedURLResponse, request: URLRequest) -> StoredResponse? {
        guard cached.storagePolicy != .notAllowed, let http = cached.response as? HTTPURLResponse, let url = request.url ?? http.url else {
            return nil
        }
        var headers = HTTPHeaderFields()
        for (name, value) in http.allHeaderFields {
            if let name = name as? String, let value = value as? String { headers.add(name: name, value: value) }
        }
        var requestHeaders = HTTPHeaderFields()
        for (name, value) in request.allHTTPHeaderFields ?? [:] { requestHeaders.add(name: name, value: value) }
        let now = Date()
        return StoredResponse(
            url: url,
            statusCode: http.statusCode,
            headers: headers,
            body: cached.data,
            requestTime: now,
            responseTime: now,
            varyingRequestHeaders: HTTPCacheRules.varyingRequestHeaders(request: requestHeaders, response: headers),
            isMemoryOnly: cached.storagePolicy == .allowedInMemoryOnly
        )
    }

    static func key(_ url: URL) -> String {
        var components = URLComponents(url: url, resolvingAgainstBaseURL: false)
        components?.fragment = nil
        return components?.url?.absoluteString ?? url.absoluteString
    }

    // MARK: - Memory

    private static func cost(_ response: StoredResponse) -> Int {
        response.body.count + response.headers.fields.reduce(64) { $0 + $1.name.utf8.count + $1.value.utf8.count + 4 }
    }

    private static func trimMemory(_ state: inout State) {
        guard state.memoryUsage > state.memoryCapacity else { return }
        for (key, entry) in state.memory.sorted(by: { $0.value.lastUse < $1.value.lastUse }) {
            guard state.memoryUsage > state.memoryCapacity else { break }
            state.memory[key] = nil
            state.memoryUsage -= entry.cost
        }
    }

    private func keepInMemory(_ response: StoredResponse, key: String) {
        let cost = Self.cost(response)
        self.state.withLock { state in
            if let old = state.memory.removeValue(forKey: key) { state.memoryUsage -= old.cost }
            guard cost <= state.memoryCapacity else { return }
            state.useCounter += 1
            state.memory[key] = MemoryEntry(response: response, cost: cost, lastUse: state.useCounter)
            state.memoryUsage += cost
            Self.trimMemory(&state)
        }
    }

    // MARK: - Disk

    private struct DiskHeader: Codable {
        var url: URL
        var statusCode: Int
        var headers: HTTPHeaderFields
        var requestTime: Date
        var responseTime: Date
        var vary: [String: String?]
    }

    private func fileURL(forKey key: String) -> URL? {
        let name = SHA256.hash(data: Data(key.utf8)).hexString
        return self.directory?.appendingPathComponent(name + ".haulcache")
    }

    private func diskFiles() -> [(url: URL, size: Int, modified: Date)] {
        guard let directory else { return [] }
        let keys: [URLResourceKey] = [.fileSizeKey, .contentModificationDateKey]
        let urls = (try? FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: keys)) ?? []
        return urls.filter { $0.pathExtension == "haulcache" }.map { url in
            let values = try? url.resourceValues(forKeys: Set(keys))
            return (url, values?.fileSize ?? 0, values?.contentModificationDate ?? .distantPast)
        }
    }

    /// File layout: 4-byte big-endian header length, the header as JSON, the body.
    private func writeToDisk(_ response: StoredResponse, key: String) {
        guard let directory, let file = self.fileURL(forKey: key) else { return }
        let capacity = self.state.withLock { $0.diskCapacity }
        let header = DiskHeader(
            url: response.url,
            statusCode: response.statusCode,
            headers: response.headers,
            requestTime: response.requestTime,
            responseTime: response.responseTime,
            vary: response.varyingRequestHeaders
        )
        guard let headerData = try? JSONEncoder().encode(header) else { return }
        var data = Data()
        var length = UInt32(headerData.count).bigEndian
        withUnsafeBytes(of: &length) { data.append(contentsOf: $0) }
        data.append(headerData)
        data.append(response.body)
        guard data.count <= capacity else { return }
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let previous = (try? file.resourceValues(forKeys: [.fileSizeKey]).fileSize) ?? nil
            try data.write(to: file, options: .atomic)
            let overCapacity = self.state.withLock { state -> Bool in
                guard let usage = state.diskUsage else { return true }  // not counted yet
                state.diskUsage = usage - (previous ?? 0) + data.count
                return state.diskUsage! > state.diskCapacity
            }
            // The directory is listed only when the count says the capacity is exceeded.
            if overCapacity { self.trimDisk() }
        } catch {
            // A full or read-only disk only means no disk entry.
            return
        }
    }

    private func readFromDisk(key: String) -> StoredResponse? {
        guard let file = self.fileURL(forKey: key), let data = try? Data(contentsOf: file) else { return nil }
        guard data.count >= 4 else {
            self.removeFile(file)
            return nil
        }
        let length = data.prefix(4).reduce(0) { ($0 << 8) | Int($1) }
        guard data.count >= 4 + length,
            case let headerBytes = data.subdata(in: (data.startIndex + 4)..<(data.startIndex + 4 + length)),
            let header = try? JSONDecoder().decode(DiskHeader.self, from: headerBytes, maximumNesting: JSONNesting.limit)
        else {
            self.removeFile(file)
            return nil
        }
        // Reading counts as use for the least-recently-used trim.
        try? FileManager.default.setAttributes([.modificationDate: Date()], ofItemAtPath: file.path)
        return StoredResponse(
            url: header.url,
            statusCode: header.statusCode,
            headers: header.headers,
            body: data.subdata(in: (data.startIndex + 4 + length)..<data.endIndex),
            requestTime: header.requestTime,
            responseTime: header.responseTime,
            varyingRequestHeaders: header.vary
        )
    }

    private func removeFile(_ file: URL) {
        try? FileManager.default.removeItem(at: file)
        self.state.withLock { $0.diskUsage = nil }
    }

    private func trimDisk() {
        let capacity = self.state.withLock { $0.diskCapacity }
        var files = self.diskFiles()
        var usage = files.reduce(0) { $0 + $1.size }
        if usage > capacity {
            files.sort { $0.modified < $1.modified }
            for file in files where usage > capacity {
                try? FileManager.default.removeItem(at: file.url)
                usage -= file.size
            }
        }
        self.state.withLock { $0.diskUsage = usage }
    }
}

extension TransferURLCache: TransferResponseCache {
    package func storedResponse(for url: URL) -> StoredResponse? {
        let key = Self.key(url)
        let inMemory = self.state.withLock { state -> StoredResponse? in
            guard var entry = state.memory[key] else { return nil }
            state.useCounter += 1
            entry.lastUse = state.useCounter
            state.memory[key] = entry
            return entry.response
        }
        if let inMemory { return inMemory }
        guard let fromDisk = self.readFromDisk(key: key) else { return nil }
        self.keepInMemory(fromDisk, key: key)
        return fromDisk
    }

    package func store(_ response: StoredResponse) {
        guard response.body.count <= self.maximumEntryBytes else { return }
        let key = Self.key(response.url)
        self.keepInMemory(response, key: key)
        if !response.isMemoryOnly, self.state.withLock({ $0.diskCapacity }) > 0 {
            self.writeToDisk(response, key: key)
        } else if let file = self.fileURL(forKey: key), FileManager.default.fileExists(atPath: file.path) {
            self.removeFile(file)
        }
    }

    package func removeStoredResponse(for url: URL) {
        let key = Self.key(url)
        self.state.withLock { state in
            if let old = state.memory.removeValue(forKey: key) { state.memoryUsage -= old.cost }
        }
        if let file = self.fileURL(forKey: key), FileManager.default.fileExists(atPath: file.path) { self.removeFile(file) }
    }

    /// 5 % of the larger capacity, as URLCache.
    package var maximumEntryBytes: Int {
        self.state.withLock { max($0.memoryCapacity, $0.diskCapacity) / 20 }
    }
}
