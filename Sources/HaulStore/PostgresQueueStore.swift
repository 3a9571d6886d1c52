import Foundation
import HaulCore
import Logging
import NIOCore
import NIOPosix
import PostgresNIO
import Synchronization

/// The download queue in a PostgreSQL database (`hauld --store postgres://USER@HOST:PORT/DB`).
///
/// Several daemons may share one database: it is the fleet's one queue. A download is a row
/// with its id, gid and state, its lease (`runner`, `lease_until` on the database's clock,
/// `generation` — the fencing token — and the host and connections it holds), and the rest of
/// ``StoredDownload`` as JSON. Every change is announced with `NOTIFY haul_queue` (payload:
/// the sending daemon's name, then `d ID`, `s` or `r`), so every daemon's view stays live.
///
/// Two connections, each used by one caller at a time: `general` for the queue's reads and
/// writes (its serial dispatch queue), `leases` for renewals, reclaims and heartbeats, which
/// must not wait behind the queue's work. A third listens for notifications. Each method is
/// one transaction and waits for it (a claim: a read, then one statement that writes only over
/// the row as read; a write under a lease: the same, over the caller's copy of the row when it
/// has one), at most ``queryTimeout`` per statement: a store that stops answering (a
/// partition) closes the connection, the call fails, and the next call connects again. The
/// caller also waits on its own clock (the timeout and a second), so a call returns even if the
/// connection's event loop is stuck; ``callsInFlight(longerThan:)`` says what each connection is
/// doing meanwhile. The schema is migrated at open, under an advisory lock, so daemons starting
/// together migrate it once; shipped migrations are never edited.
public final class PostgresQueueStore: QueueStore, @unchecked Sendable {
    // @unchecked: each slot's connection is guarded by its lock; calls on a slot are
    // serialised by it too.

    /// Where the database is, parsed from a `postgres://` URL.
    public struct Location: Sendable, Hashable, CustomStringConvertible {
        public var host: String
        public var port: Int
        public var user: String
        public var password: String?
        public var database: String

        /// Parses `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE` (also `postgresql://`).
        public init(url text: String) throws {
            guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
                scheme == "postgres" || scheme == "postgresql"
            else { throw StoreError("not a postgres:// URL: \(text)") }
            guard let host = components.host, !host.isEmpty else { throw StoreError("the store URL \(text) names no host") }
            guard let user = components.user, !user.isEmpty else { throw StoreError("the store URL \(text) names no user (postgres://USER@HOST:PORT/DB)") }
            let database = String(components.path.drop(while: { $0 == "/" }))
            guard !database.isEmpty else { throw StoreError("the store URL \(text) names no database (postgres://USER@HOST:PORT/DB)") }
            self.host = host
            self.port = components.port ?? 5432
            self.user = user
            self.password = components.password
            self.database = database
        }

        /// Without the password.
        public var description: String { "postgres://\(self.user)@\(self.host):\(self.port)/\(self.database)" }
    }

    public struct StoreError: Error, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }

    public let location: Location
    public var storeDescription: String { self.location.description }
    public var isShared: Bool { true }
    /// This daemon's name, sent with every change it announces (its own listener skips them).
    public let member: String
    /// The longest one statement (or a connection attempt) may take before the connection is
    /// given up.
    public let queryTimeout: TimeAmount
    /// Where the connections live (the process's shared NIO group unless told otherwise).
    private let eventLoopGroup: any EventLoopGroup
    private let logger: Logger
    private let general = Slot(id: 1, name: "queue connection")
    private let leases = Slot(id: 2, name: "lease connection")
    /// Sorted keys: the same row is the same text whoever wrote it (a write under a lease
    /// compares the caller's copy of the row with the stored text).
    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }()
    private static let decoder = JSONDecoder()
    static let channel = "haul_queue"

    /// One connection and the lock that serialises its use.
    private final class Slot: @unchecked Sendable {
        let id: Int
        let name: String
        let lock = NSLock()
        var connection: PostgresConnection?
        /// The call that holds the lock: when it began and what it waits for now (read by
        /// ``callsInFlight(longerThan:)`` without the lock, from another thread).
        let activity = Mutex<(began: ContinuousClock.Instant, step: Step)?>(nil)
        init(id: Int, name: String) {
            self.id = id
            self.name = name
        }

        func note(_ step: Step) {
            self.activity.withLock { activity in activity = (activity?.began ?? .now, step) }
        }

        /// What a call waits for. A statement keeps its text (a reference, no work): its summary
        /// is made only when someone asks, not on every statement.
        enum Step: CustomStringConvertible {
            case starting, connecting
            case running(sql: String)

            var description: String {
                switch self {
                case .starting: "starting"
                case .connecting: "connecting"
                case .running(let sql): "running \(PostgresQueueStore.summary(of: sql))"
                }
            }
        }
    }

    /// Connects and migrates the schema.
    ///
    /// - Parameters:
    ///   - member: the daemon's name in the fleet (its notifications carry it).
    /// - Throws: ``StoreError`` with the server's answer when it cannot be reached or refuses.
    ///   - eventLoopGroup: where the connections run (default: NIO's shared group).
    public init(
        location: Location,
        member: String = PostgresQueueStore.defaultMember(),
        queryTimeout: TimeAmount = .seconds(5),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger
    ) throws {
        self.location = location
        self.member = member
        self.queryTimeout = queryTimeout
        self.eventLoopGroup = eventLoopGroup
        self.logger = logger
        try self.withConnection(self.general) { connection in try self.migrate(connection) }
    }

    public convenience init(
        url: String,
        member: String = PostgresQueueStore.defaultMember(),
        queryTimeout: TimeAmount = .seconds(5),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger
    ) throws {
        try self.init(location: Location(url: url), member: member, queryTimeout: queryTimeout, eventLoopGroup: eventLoopGroup, logger: logger)
    }

    /// `HOST-PID`: unique among running daemons.
    public static func defaultMember() -> String {
        "\(ProcessInfo.processInfo.hostName)-\(getpid())"
    }

    deinit {
        // Not waited for: the last reference may go on an event loop, where waiting traps.
        // The closure holds each connection until it is closed (PostgresNIO asserts that a
        // connection is closed before it goes).
        for slot in [self.general, self.leases] {
            if let connection = slot.connection { Self.close(connection) }
        }
    }

    // MARK: - Connection

    private var configuration: PostgresConnection.Configuration {
        var configuration = PostgresConnection.Configuration(
            host: self.location.host,
            port: self.location.port,
            username: self.location.user,
            password: self.location.password,
            database: self.location.database,
            tls: .disable
        )
        configuration.options.connectTimeout = self.queryTimeout
        // A daemon cut off inside a transaction must not keep its row locks: the server ends
        // such a session (the lease keeper's reclaim skips locked rows).
        let idle = max(1, Int(self.queryTimeout.nanoseconds / 1_000_000_000) * 2)
        configuration.options.additionalStartupParameters = [("idle_in_transaction_session_timeout", "\(idle)s")]
        return configuration
    }

    private func withConnection<T>(_ slot: Slot, _ body: (PostgresConnection) throws -> T) throws -> T {
        try slot.lock.withLock {
            slot.activity.withLock { $0 = (.now, .starting) }
            defer { slot.activity.withLock { $0 = nil } }
            let connection: PostgresConnection
            if let open = slot.connection, !open.isClosed {
                connection = open
            } else {
                slot.note(.connecting)
                do {
                    let connecting: EventLoopFuture<PostgresConnection> = PostgresConnection.connect(
                        on: self.eventLoopGroup.any(),
                        configuration: self.configuration,
                        id: slot.id,
                        logger: self.logger
                    )
                    connection = try self.wait(for: connecting, what: "connecting") { connecting.whenSuccess { Self.close($0) } }
                } catch let unanswered as Unanswered {
                    throw unanswered.error
                } catch {
                    throw StoreError("cannot reach the store \(self.location): \(Self.describe(error))")
                }
                slot.connection = connection
            }
            do {
                return try body(connection)
            } catch let unanswered as Unanswered {
                // Closed by the time out, perhaps not yet (its loop may be stuck): not used again.
                slot.connection = nil
                throw unanswered.error
            } catch let error as StoreError {
                throw error
            } catch let error as QueueLeaseLost {
                throw error
            } catch {
                // An ERROR the server reported (a constraint, a cancelled statement) leaves the
                // connection usable. Anything else does not, closed or not yet: the statement's
                // time out closes it on its loop, a FATAL ends the session, and the waiting
                // caller can see the failure before the connection reads as closed. Kept, it
                // failed the next call too (a CI run: the call after a healed partition got the
                // closing connection's error).
                if connection.isClosed || (error as? PSQLError)?.serverInfo?[.severity] != "ERROR" {
                    if !connection.isClosed { Self.close(connection) }
                    slot.connection = nil
                }
                throw StoreError("the store \(self.location) failed: \(Self.describe(error))")
            }
        }
    }

    /// The server's message when there is one, else what failed and why (`PSQLError` and
    /// `PostgresDecodingError` hide both from `description`). A statement sent to a connection
    /// that was closing carries the error that closed it (a `PSQLError` in a `PSQLError`).
    static func describe(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            if let message = error.serverInfo?[.message] { return message }
            if let underlying = error.underlying { return "\(error.code): \(Self.describe(underlying))" }
            return "\(error.code)"
        }
        if error is PostgresDecodingError { return String(reflecting: error) }
        return "\(error)"
    }

    /// One statement, waited for at most ``queryTimeout``: then the connection is closed
    /// (which fails the statement) and opened again by the next call.
    @discardableResult
    private func run(_ connection: PostgresConnection, _ query: PostgresQuery) throws -> PostgresQueryResult {
        (connection.id == self.leases.id ? self.leases : self.general).note(.running(sql: query.sql))
        let result = connection.query(query, logger: self.logger)
        let timeout = connection.eventLoop.scheduleTask(in: self.queryTimeout) { Self.close(connection) }
        defer { timeout.cancel() }
        return try self.wait(for: result, what: "\(Slot.Step.running(sql: query.sql))") { Self.close(connection) }
    }

    /// The value of `future`, waited for at most ``queryTimeout`` and a second, on this
    /// thread's clock. The event loop's own timers (the connect timeout, the statement's
    /// timeout closing the connection) answer first; this bound holds even if the loop that
    /// would answer is stuck, and a caller such as the lease keeper never waits for ever. On
    /// time out, `abandon` runs (closing the connection) and a ``StoreError`` saying what had
    /// no answer is thrown, logged as a warning.
    private func wait<Value: Sendable>(for future: EventLoopFuture<Value>, what: @autoclosure () -> String, abandon: () -> Void) throws -> Value {
        let answered = DispatchSemaphore(value: 0)
        let result = Mutex<Result<Value, any Error>?>(nil)
        future.whenComplete { outcome in
            result.withLock { $0 = outcome }
            answered.signal()
        }
        let limit = Double(self.queryTimeout.nanoseconds) / 1e9 + 1
        if answered.wait(timeout: .now() + limit) == .timedOut {
            abandon()
            let error = StoreError("no answer from the store \(self.location) in \(limit) s (\(what()))")
            self.logger.warning("store: \(error)")
            throw Unanswered(error: error)
        }
        return try result.withLock { $0! }.get()
    }

    /// Closes `connection` without waiting, and keeps it until it is closed: PostgresNIO traps
    /// when a connection goes before it is closed (and its loop may be busy for a while).
    private static func close(_ connection: PostgresConnection) {
        let closing: EventLoopFuture<Void> = connection.close()
        closing.whenComplete { _ in withExtendedLifetime(connection) {} }
    }

    /// A call given up by ``wait(for:what:abandon:)``: its connection is not used again.
    private struct Unanswered: Error {
        let error: StoreError
    }

    /// The first words of a statement, for a log line.
    fileprivate static func summary(of sql: String) -> String {
        let words = sql.split(whereSeparator: \.isWhitespace)
        let first = words.prefix(6).joined(separator: " ")
        return words.count > 6 ? "'\(first) …'" : "'\(first)'"
    }

    public func callsInFlight(longerThan limit: Duration) -> [String] {
        let now = ContinuousClock.Instant.now
        return [self.general, self.leases].compactMap { slot in
            guard let (began, step) = slot.activity.withLock({ $0 }), now - began > limit else { return nil }
            let seconds = Double((now - began).components.seconds) + Double((now - began).components.attoseconds) * 1e-18
            return "\(slot.name): \(step), for \(String(format: "%.1f", seconds)) s"
        }
    }

    /// `body` in a transaction: committed when it returns, rolled back when it throws.
    private func transaction<T>(_ slot: Slot, _ body: (PostgresConnection) throws -> T) throws -> T {
        try self.withConnection(slot) { connection in
            try self.run(connection, "BEGIN")
            do {
                let value = try body(connection)
                try self.run(connection, "COMMIT")
                return value
            } catch {
                _ = try? self.run(connection, "ROLLBACK")
                throw error
            }
        }
    }

    /// Tells the other daemons what changed (delivered at commit).
    private func announce(_ connection: PostgresConnection, _ what: String) throws {
        let payload = "\(self.member) \(what)"
        try self.run(connection, "SELECT pg_notify(\(Self.channel), \(payload))")
    }

    // MARK: - Schema

    /// Migrations in order; each runs once per database, in a transaction.
    static let migrations: [(name: String, sql: [String])] = [
        (
            "v1: download queue and settings",
            [
                """
                CREATE TABLE haul_queued_download (
                    id BIGSERIAL PRIMARY KEY,
                    gid TEXT NOT NULL UNIQUE,
                    state TEXT NOT NULL,
                    data TEXT NOT NULL
                )
                """,
                "CREATE INDEX haul_queued_download_state ON haul_queued_download (state)",
                "CREATE TABLE haul_queue_settings (id INTEGER PRIMARY KEY, json TEXT NOT NULL)",
            ]
        ),
        (
            "v2: leases and daemons of a fleet",
            [
                """
                ALTER TABLE haul_queued_download
                    ADD COLUMN runner TEXT,
                    ADD COLUMN lease_until TIMESTAMPTZ,
                    ADD COLUMN generation BIGINT NOT NULL DEFAULT 0,
                    ADD COLUMN host TEXT,
                    ADD COLUMN claimed_connections INTEGER NOT NULL DEFAULT 0
                """,
                "CREATE INDEX haul_queued_download_lease ON haul_queued_download (lease_until) WHERE runner IS NOT NULL",
                "CREATE INDEX haul_queued_download_host ON haul_queued_download (host) WHERE runner IS NOT NULL",
                """
                CREATE TABLE haul_daemon (
                    name TEXT PRIMARY KEY,
                    pid INTEGER NOT NULL,
                    started_at TIMESTAMPTZ NOT NULL,
                    seen_at TIMESTAMPTZ NOT NULL
                )
                """,
            ]
        ),
        ("v3: claims in one statement", [claimFunction]),
        (
            // The budget's read walks the host's index, not a bitmap of it: rows claimed and
            // released by the thousand leave dead entries there that a bitmap scan reads each
            // time (until a vacuum) and an index scan marks once and skips after. 3 daemons,
            // 6,000 small files: the claim's statement 0.36 → 0.13 ms.
            "v4: the claim's budget read by an index scan",
            ["ALTER FUNCTION haul_claim(BIGINT, BIGINT, TEXT, TEXT, TEXT, TEXT, DOUBLE PRECISION, TEXT, BIGINT, BIGINT, TEXT, TEXT) SET enable_bitmapscan = off"]
        ),
    ]

    private func migrate(_ connection: PostgresConnection) throws {
        try self.run(connection, "BEGIN")
        do {
            // Daemons starting together wait for each other here.
            try self.run(connection, "SELECT pg_advisory_xact_lock(727100001)")
            try self.run(connection, "CREATE TABLE IF NOT EXISTS haul_migration (name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
            var applied = Set<String>()
            for row in try self.run(connection, "SELECT name FROM haul_migration").rows {
                applied.insert(try row.decode(String.self))
            }
            for migration in Self.migrations where !applied.contains(migration.name) {
                for statement in migration.sql { try self.run(connection, PostgresQuery(unsafeSQL: statement)) }
                try self.run(connection, "INSERT INTO haul_migration (name) VALUES (\(migration.name))")
                self.logger.info("store: migrated \(migration.name)")
            }
            try self.run(connection, "COMMIT")
        } catch {
            _ = try? self.run(connection, "ROLLBACK")
            throw error
        }
    }

    // MARK: - Rows

    private static func encode(_ download: StoredDownload) throws -> String {
        var download = download
        download.runner = nil  // a column of its own, never part of the JSON
        return String(decoding: try Self.encoder.encode(download), as: UTF8.self)
    }

    /// The columns every read selects: `id, data`, the holder when its lease is live, the
    /// generation and the holder whatever the lease's age.
    private static let columns = "id, data, CASE WHEN lease_until > now() THEN runner END, generation, runner"

    private struct Fetched {
        var download: StoredDownload
        /// The row's JSON as stored (a claim writes only over the row as it read it).
        var data: String
        var generation: Int64
        /// The holder, even when its lease expired.
        var holder: String?
    }

    private static func decode(_ row: PostgresRow) throws -> Fetched {
        let (id, data, live, generation, holder) = try row.decode((Int64, String, String?, Int64, String?).self)
        var download = try Self.decoder.decode(StoredDownload.self, from: Data(data.utf8))
        download.id = id
        download.runner = live
        return Fetched(download: download, data: data, generation: generation, holder: holder)
    }

    private enum Lock { case none, update }

    private func fetch(_ connection: PostgresConnection, id: Int64, lock: Lock) throws -> Fetched? {
        let query: PostgresQuery
        switch lock {
        case .none: query = "SELECT \(unescaped: Self.columns) FROM haul_queued_download WHERE id = \(id)"
        case .update: query = "SELECT \(unescaped: Self.columns) FROM haul_queued_download WHERE id = \(id) FOR UPDATE"
        }
        guard let row = try self.run(connection, query).rows.first else { return nil }
        return try Self.decode(row)
    }

    /// Batches larger than this are announced as one `r` (read everything again) instead of a
    /// notification per download: a listener then reads the list once, in pages, instead of
    /// each row on its own.
    static let largestAnnouncedBatch = 50

    /// Writes the row's fields, and announces it in the same statement unless `announce` is
    /// false (the caller announces the batch); with `releasing`, its lease goes too. With
    /// `over` (the row's JSON as the caller read it, and the lease it writes under), only while
    /// the stored row is still that, under that lease. Returns whether the row was written.
    @discardableResult
    private func save(
        _ connection: PostgresConnection,
        _ download: StoredDownload,
        releasing: Bool = false,
        announce: Bool = true,
        over read: (data: String, lease: QueueLease)? = nil
    ) throws -> Bool {
        guard let id = download.id else { throw StoreError("a download without an id cannot be updated") }
        let data = try Self.encode(download)
        let state = download.state.rawValue
        let releasing = releasing ? ", runner = NULL, lease_until = NULL, claimed_connections = 0" : ""
        let (expected, daemon, generation) = (read?.data, read?.lease.daemon, read?.lease.generation)
        let payload = announce ? "\(self.member) d \(id)" : nil
        return try self.run(
            connection,
            """
            WITH written AS (
                UPDATE haul_queued_download SET gid = \(download.gid), state = \(state), data = \(data)\(unescaped: releasing)
                WHERE id = \(id) AND (\(expected)::TEXT IS NULL OR (data = \(expected) AND runner = \(daemon) AND generation = \(generation)))
                RETURNING id
            )
            SELECT id, CASE WHEN \(payload)::TEXT IS NOT NULL THEN pg_notify(\(Self.channel), \(payload)) END FROM written
            """
        ).rows.count == 1
    }

    /// Announces changes of `ids`: one by one, or as one `r` for a large batch.
    private func announce(_ connection: PostgresConnection, ids: [Int64]) throws {
        if ids.count > Self.largestAnnouncedBatch {
            try self.announce(connection, "r")
        } else {
            for id in ids { try self.announce(connection, "d \(id)") }
        }
    }

    // MARK: - QueueStore

    public func download(id: Int64) throws -> StoredDownload? {
        try self.withConnection(self.general) { connection in try self.fetch(connection, id: id, lock: .none)?.download }
    }

    public func downloads(ids: [Int64]) throws -> [StoredDownload] {
        guard !ids.isEmpty else { return [] }
        return try self.withConnection(self.general) { connection in
            try self.run(connection, "SELECT \(unescaped: Self.columns) FROM haul_queued_download WHERE id = ANY(\(ids)::BIGINT[])")
                .rows.map { try Self.decode($0).download }
        }
    }

    public func forEachDownload(_ body: (StoredDownload) throws -> Void) throws {
        // Pages of 1,000 by id: a queue of 100,000 is never held at once.
        var after: Int64 = 0
        while true {
            let page = try self.withConnection(self.general) { connection in
                try self.run(connection, "SELECT \(unescaped: Self.columns) FROM haul_queued_download WHERE id > \(after) ORDER BY id LIMIT 1000")
                    .rows.map { try Self.decode($0).download }
            }
            for download in page { try body(download) }
            guard let last = page.last?.id, page.count == 1000 else { return }
            after = last
        }
    }

    @discardableResult
    public func updateDownload(id: Int64, _ change: @Sendable (inout StoredDownload) throws -> Void) throws -> StoredDownload? {
        try self.transaction(self.general) { connection in
            guard var download = try self.fetch(connection, id: id, lock: .update)?.download else { return nil }
            try change(&download)
            try self.save(connection, download)
            return download
        }
    }

    /// Reads the row, checks the lease (its holder and generation: the fencing token), changes
    /// it here and writes it in one statement that takes effect only over the row as read,
    /// under the same lease (a change made since, or a lease reclaimed since, reads again).
    /// With `last` (the row as the caller last saw it stored), a change is first written over
    /// that without a read: one round trip while nobody else changed the row. Two at most
    /// otherwise, where a transaction holding the row's lock took six (`BEGIN`, the read, the
    /// update, the announcement, `COMMIT`): a fleet's daemon writes a small file's row twice
    /// (where it goes, then its end).
    @discardableResult
    public func updateDownload(id: Int64, lease: QueueLease, release: Bool, last: StoredDownload?, _ change: @Sendable (inout StoredDownload) throws -> Void) throws -> StoredDownload? {
        try self.withConnection(self.general) { connection in
            // The caller's copy stands for the first read.
            var copy = last?.id == id ? last : nil
            for _ in 0..<Self.raceAttempts {
                let fetched: Fetched
                let fromCopy = copy != nil
                if var row = copy {
                    copy = nil
                    row.runner = lease.daemon
                    fetched = Fetched(download: row, data: try Self.encode(row), generation: lease.generation, holder: lease.daemon)
                } else {
                    guard let read = try self.fetch(connection, id: id, lock: .none) else { return nil }
                    guard read.holder == lease.daemon, read.generation == lease.generation else {
                        throw QueueLeaseLost(downloadID: id, lease: lease, holder: read.download.runner)
                    }
                    fetched = read
                }
                var download = fetched.download
                try change(&download)
                // A check of the lease that changes nothing (before a file is placed) writes and
                // announces nothing; it reads the row (a copy checks no lease).
                guard release || download != fetched.download else {
                    if fromCopy { continue }
                    return download
                }
                // Taken or changed since the read: read again.
                guard try self.save(connection, download, releasing: release, over: (fetched.data, lease)) else { continue }
                if release { download.runner = nil }
                return download
            }
            throw StoreError("download \(id) changed under every try to write it (\(Self.raceAttempts))")
        }
    }

    public func confirmLease(id: Int64, lease: QueueLease) throws {
        // A change that changes nothing reads the row, checks the lease and writes nothing.
        _ = try self.updateDownload(id: id, lease: lease, release: false) { _ in }
    }

    public func updateDownloads(ids: [Int64], _ change: (inout StoredDownload) throws -> Bool) throws -> [StoredDownload] {
        try self.transaction(self.general) { connection in
            var changed: [StoredDownload] = []
            for id in ids {
                guard var download = try self.fetch(connection, id: id, lock: .update)?.download, try change(&download) else { continue }
                try self.save(connection, download, announce: false)
                changed.append(download)
            }
            try self.announce(connection, ids: changed.compactMap(\.id))
            return changed
        }
    }

    public func insert(_ downloads: [StoredDownload]) throws -> [StoredDownload] {
        guard !downloads.isEmpty else { return [] }
        return try self.transaction(self.general) { connection in
            let inserted = try downloads.map { download in
                var download = download
                if download.gid.isEmpty { download.gid = DownloadGID.random() }
                download.id = nil
                let data = try Self.encode(download)
                let state = download.state.rawValue
                let rows = try self.run(connection, "INSERT INTO haul_queued_download (gid, state, data) VALUES (\(download.gid), \(state), \(data)) RETURNING id").rows
                guard let row = rows.first else { throw StoreError("the store returned no id for a new download") }
                download.id = try row.decode(Int64.self)
                return download
            }
            try self.announce(connection, ids: inserted.compactMap(\.id))
            return inserted
        }
    }

    public func reviveInterruptedDownloads(of daemon: String) throws {
        try self.transaction(self.general) { connection in
            // Its own (a restart under the same name), and active ones whose holder is gone;
            // never what another live daemon holds.
            let rows = try self.run(
                connection,
                """
                SELECT \(unescaped: Self.columns) FROM haul_queued_download
                WHERE (state = 'active' AND (runner IS NULL OR lease_until < now())) OR runner = \(daemon)
                FOR UPDATE
                """
            ).rows.map(Self.decode)
            for fetched in rows {
                var download = fetched.download
                if download.state == .active {
                    download.state = .waiting
                    download.notBefore = nil
                }
                try self.save(connection, download, releasing: true)
            }
        }
    }

    /// How often a claim, or a write under a lease, reads again after losing a race for its row
    /// (another claim took it, or a write changed it between the read and the one statement
    /// that writes it).
    static let raceAttempts = 4

    /// Reads the download asked for and its alternatives (one query), makes the claimed row from
    /// the one asked for or the first free alternative here, then claims it in one statement
    /// (``claimFunction``), outside any transaction of its own: the host's turn
    /// (`pg_advisory_xact_lock`) is held for that statement alone, checked against the row as
    /// read (its generation and data: a change made since is never written over). A claim used
    /// to take the host's turn first and hold it over five round trips (the read, the budget,
    /// the update, the announcement, the commit): one host's claims went one at a time across
    /// the fleet, ~320 a second with three daemons.
    public func claim(_ claim: QueueClaim, _ change: @Sendable (inout StoredDownload) throws -> Void) throws -> QueueClaimOutcome {
        try self.withConnection(self.general) { connection in
            var refusal: QueueClaimOutcome = .heldElsewhere(nil, nil)
            for _ in 0..<Self.raceAttempts {
                // The download asked for and its alternatives, in one read; only the rows used are
                // decoded: the one asked for (a refusal carries it), and the one claimed.
                let candidates = [claim.downloadID] + claim.alternatives
                let rows = try self.run(
                    connection,
                    """
                    SELECT \(unescaped: Self.columns), state FROM haul_queued_download
                    WHERE id = ANY(\(candidates)::BIGINT[]) ORDER BY array_position(\(candidates)::BIGINT[], id)
                    """
                ).rows
                var chosen: Fetched?
                if let row = rows.first, try row.decode(Int64.self, context: .default) == claim.downloadID {
                    let asked = try Self.decode(row)
                    if let holder = asked.download.runner {
                        refusal = .heldElsewhere(holder, asked.download)
                    } else if asked.download.state != .waiting {
                        refusal = .notWaiting(asked.download)
                    } else {
                        chosen = asked
                    }
                } else {
                    refusal = .notWaiting(nil)
                }
                if chosen == nil {
                    // The first alternative that waits and nobody holds (its state and live holder
                    // read from their columns).
                    let free = try rows.first { row in
                        let (id, _, live, _, _, state) = try row.decode((Int64, String, String?, Int64, String?, String).self)
                        return id != claim.downloadID && live == nil && state == QueuedDownloadState.waiting.rawValue
                    }
                    guard let free else { return refusal }
                    chosen = try Self.decode(free)
                }
                let fetched = chosen!
                let id = fetched.download.id!
                var download = fetched.download
                try change(&download)
                let data = try Self.encode(download)
                let state = download.state.rawValue
                let wanted = Int64(max(1, claim.connections))
                let payload = "\(self.member) d \(id)"
                let answer = try self.run(
                    connection,
                    """
                    SELECT claimed_generation, granted FROM haul_claim(
                        \(id), \(fetched.generation), \(fetched.data), \(data), \(state), \(claim.daemon), \(claim.leaseSeconds),
                        \(claim.host), \(wanted), \(Int64(claim.maximumPerHost)), \(Self.channel), \(payload))
                    """
                ).rows.first?.decode((Int64?, Int64).self)
                guard let (generation, granted) = answer else { throw StoreError("the store did not answer the claim of download \(id)") }
                guard granted > 0 else { return .hostBusy }
                // Taken or changed since the read: read again.
                guard let generation else { continue }
                download.runner = claim.daemon
                return .claimed(download, QueueLease(daemon: claim.daemon, generation: generation), connections: Int(granted))
            }
            return refusal
        }
    }

    /// The claim's one statement (``claim(_:_:)``), run as a transaction of its own: with a
    /// per-host limit, the host's turn (an advisory lock held until this statement commits),
    /// the connections the fleet's live leases hold to it (read after the turn is had: each
    /// statement of the function sees what committed before it), then the row, only as it was
    /// read (generation, data, waiting, no live holder) and announced. `granted` 0: the host's
    /// budget is used up; `claimed_generation` NULL: the row is not as read any more.
    static let claimFunction = """
        CREATE OR REPLACE FUNCTION haul_claim(
            p_id BIGINT, p_generation BIGINT, p_read TEXT, p_data TEXT, p_state TEXT, p_daemon TEXT,
            p_lease_seconds DOUBLE PRECISION, p_host TEXT, p_wanted BIGINT, p_maximum BIGINT,
            p_channel TEXT, p_payload TEXT, OUT claimed_generation BIGINT, OUT granted BIGINT
        ) LANGUAGE plpgsql AS $$
        DECLARE
            used BIGINT;
        BEGIN
            granted := p_wanted;
            IF p_maximum > 0 THEN
                PERFORM pg_advisory_xact_lock(727100002, hashtext(p_host));
                SELECT COALESCE(sum(claimed_connections), 0) INTO used FROM haul_queued_download
                    WHERE host = p_host AND runner IS NOT NULL AND lease_until > now() AND id <> p_id;
                granted := LEAST(granted, p_maximum - used);
                IF granted < 1 THEN
                    granted := 0;
                    RETURN;
                END IF;
            END IF;
            UPDATE haul_queued_download SET state = p_state, data = p_data, runner = p_daemon,
                lease_until = now() + make_interval(secs => p_lease_seconds), generation = generation + 1,
                host = p_host, claimed_connections = granted
            WHERE id = p_id AND generation = p_generation AND data = p_read AND state = 'waiting'
                AND (runner IS NULL OR lease_until <= now())
            RETURNING generation INTO claimed_generation;
            IF FOUND THEN
                PERFORM pg_notify(p_channel, p_payload);
            END IF;
        END
        $$
        """

    public func renewLeases(_ leases: [Int64: QueueLease], seconds: Double) throws -> Set<Int64> {
        guard let daemon = leases.first?.value.daemon else { return [] }
        let ids = leases.keys.sorted()
        let generations = ids.map { leases[$0]!.generation }
        return try self.withConnection(self.leases) { connection in
            let rows = try self.run(
                connection,
                """
                UPDATE haul_queued_download AS q SET lease_until = now() + make_interval(secs => \(seconds))
                FROM unnest(\(ids)::BIGINT[], \(generations)::BIGINT[]) AS l(id, generation)
                WHERE q.id = l.id AND q.generation = l.generation AND q.runner = \(daemon) AND q.lease_until > now()
                RETURNING q.id
                """
            ).rows
            return Set(try rows.map { try $0.decode(Int64.self) })
        }
    }

    public func reclaimExpiredLeases() throws -> [(download: StoredDownload, previousHolder: String)] {
        try self.transaction(self.leases) { connection in
            let rows = try self.run(
                connection,
                "SELECT \(unescaped: Self.columns) FROM haul_queued_download WHERE runner IS NOT NULL AND lease_until < now() FOR UPDATE SKIP LOCKED"
            ).rows.map(Self.decode)
            return try rows.map { fetched in
                var download = fetched.download
                if download.state == .active {
                    download.state = .waiting
                    download.notBefore = nil
                }
                try self.save(connection, download, releasing: true)
                return (download, fetched.holder ?? "?")
            }
        }
    }

    public func heartbeat(daemon: String, pid: Int32, startedAt: Date, liveSeconds: Double) throws -> [DaemonPresence] {
        try self.withConnection(self.leases) { connection in
            try self.run(
                connection,
                """
                INSERT INTO haul_daemon (name, pid, started_at, seen_at) VALUES (\(daemon), \(pid), \(startedAt), now())
                ON CONFLICT (name) DO UPDATE SET pid = EXCLUDED.pid, started_at = EXCLUDED.started_at, seen_at = now()
                """
            )
            let rows = try self.run(
                connection,
                """
                SELECT d.name, d.pid, d.started_at, d.seen_at,
                    COALESCE(array_agg(q.id ORDER BY q.id) FILTER (WHERE q.id IS NOT NULL), '{}')::BIGINT[]
                FROM haul_daemon d LEFT JOIN haul_queued_download q ON q.runner = d.name AND q.lease_until > now()
                WHERE d.seen_at > now() - make_interval(secs => \(liveSeconds))
                GROUP BY d.name, d.pid, d.started_at, d.seen_at ORDER BY d.name
                """
            ).rows
            return try rows.map { row in
                let (name, pid, started, seen, downloads) = try row.decode((String, Int32, Date, Date, [Int64]).self)
                return DaemonPresence(name: name, pid: pid, startedAt: started, seenAt: seen, downloads: downloads)
            }
        }
    }

    public func leave(daemon: String) throws {
        try self.withConnection(self.leases) { connection in
            try self.run(connection, "DELETE FROM haul_daemon WHERE name = \(daemon)")
        }
    }

    /// Runs `body` as it is: every call stays a transaction of its own. A fleet's claims and
    /// leases are decided under row locks, which one transaction across many downloads would
    /// hold for all of them while other daemons wait.
    public func batch<T>(_ body: () throws -> T) throws -> T {
        try body()
    }

    public func purgeFinishedDownloads() throws -> Int {
        try self.transaction(self.general) { connection in
            let result = try self.run(connection, "DELETE FROM haul_queued_download WHERE state IN ('complete', 'error', 'removed')")
            try self.announce(connection, "r")
            return result.metadata.rows ?? 0
        }
    }

    public func deleteDownload(id: Int64) throws {
        try self.transaction(self.general) { connection in
            try self.run(connection, "DELETE FROM haul_queued_download WHERE id = \(id)")
            try self.announce(connection, "d \(id)")
        }
    }

    public func queueSettings() throws -> QueueSettings? {
        try self.withConnection(self.general) { connection in
            guard let row = try self.run(connection, "SELECT json FROM haul_queue_settings WHERE id = 1").rows.first else { return nil }
            return try Self.decoder.decode(QueueSettings.self, from: Data(try row.decode(String.self).utf8))
        }
    }

    public func save(_ settings: QueueSettings) throws {
        let json = String(decoding: try Self.encoder.encode(settings), as: UTF8.self)
        try self.transaction(self.general) { connection in
            try self.run(connection, "INSERT INTO haul_queue_settings (id, json) VALUES (1, \(json)) ON CONFLICT (id) DO UPDATE SET json = EXCLUDED.json")
            try self.announce(connection, "s")
        }
    }

    // MARK: - Changes of other daemons

    public func observeChanges(_ handler: @escaping @Sendable (QueueStoreChange) -> Void) -> (any QueueStoreObservation)? {
        let configuration = self.configuration
        let logger = self.logger
        let member = self.member
        let limit = Double(self.queryTimeout.nanoseconds) / 1e9 + 1
        let group = self.eventLoopGroup
        let location = self.location
        let task = Task {
            var delay = 0.25
            while !Task.isCancelled {
                do {
                    let connecting: EventLoopFuture<PostgresConnection> = PostgresConnection.connect(
                        on: group.any(), configuration: configuration, id: 3, logger: logger
                    )
                    let connection = try await Self.value(of: connecting, within: limit, what: "the store \(location), connecting") {
                        connecting.whenSuccess { Self.close($0) }
                    }
                    do {
                        try await connection.listen(on: Self.channel) { notifications in
                            delay = 0.25
                            // Whatever happened while nobody listened is read again.
                            handler(.resync)
                            for try await notification in notifications {
                                if let change = Self.change(notification.payload, skipping: member) { handler(change) }
                            }
                        }
                    } catch {
                        try? await connection.close()
                        throw error
                    }
                    try? await connection.close()
                } catch {
                    if Task.isCancelled { return }
                    logger.notice("store: change listener lost (\(Self.describe(error))); listening again in \(delay) s")
                }
                try? await Task.sleep(for: .seconds(delay))
                delay = min(8, delay * 2)
            }
        }
        return Observation(task: task)
    }

    /// `future`'s value, or a ``StoreError`` after `seconds` on a dispatch timer (not the
    /// future's event loop, which may be the one that is stuck); then `abandon` runs.
    private static func value<Value: Sendable>(
        of future: EventLoopFuture<Value>,
        within seconds: Double,
        what: String,
        abandon: @escaping @Sendable () -> Void
    ) async throws -> Value {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Value, any Error>) in
            let pending = Mutex<CheckedContinuation<Value, any Error>?>(continuation)
            future.whenComplete { outcome in pending.withLock { $0.take() }?.resume(with: outcome) }
            DispatchQueue.global().asyncAfter(deadline: .now() + seconds) {
                guard let waiting = pending.withLock({ $0.take() }) else { return }
                abandon()
                waiting.resume(throwing: StoreError("no answer in \(seconds) s (\(what))"))
            }
        }
    }

    /// A notification's change, `nil` for this daemon's own (or one it cannot read).
    static func change(_ payload: String, skipping member: String) -> QueueStoreChange? {
        let parts = payload.split(separator: " ")
        guard parts.count >= 2, parts[0] != member else { return nil }
        switch parts[1] {
        case "d": return parts.count == 3 ? Int64(parts[2]).map(QueueStoreChange.download) : nil
        case "s": return .settings
        case "r": return .resync
        default: return nil
        }
    }

    private struct Observation: QueueStoreObservation {
        let task: Task<Void, Never>
        func cancel() { self.task.cancel() }
    }
}
