import Foundation
import HaulCore
import Logging
import NIOCore
import NIOPosix
import PostgresNIO
import Synchronization

/// The download queue in a PostgreSQL database (`hauld --store postgres://USER@HOST:PORT/DB`).
///
/// One connection, used by one caller at a time (the queue's serial dispatch queue): each
/// method is one transaction and waits for it. A download is a row with its id, its gid, its
/// state (the columns other daemons will select on) and the rest of ``StoredDownload`` as JSON.
/// The schema is migrated at open, under an advisory lock, so daemons starting together on one
/// database migrate it once; shipped migrations are never edited.
///
/// A connection that fails is opened again on the next call (that call fails with the error).
public final class PostgresQueueStore: QueueStore, @unchecked Sendable {
    // @unchecked: `connection` is guarded by `lock`; calls are serialised by it too.

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
    private let logger: Logger
    private let lock = NSLock()
    private var connection: PostgresConnection?
    private static let encoder = JSONEncoder()
    private static let decoder = JSONDecoder()

    /// Connects and migrates the schema.
    ///
    /// - Throws: ``StoreError`` with the server's answer when it cannot be reached or refuses.
    public init(location: Location, logger: Logger) throws {
        self.location = location
        self.logger = logger
        try self.withConnection { connection in try Self.migrate(connection, logger: logger) }
    }

    public convenience init(url: String, logger: Logger) throws {
        try self.init(location: Location(url: url), logger: logger)
    }

    deinit {
        // Not waited for: the last reference may go on an event loop, where waiting traps.
        let _: EventLoopFuture<Void>? = self.connection?.close()
    }

    // MARK: - Connection

    private func withConnection<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        try self.lock.withLock {
            let connection: PostgresConnection
            if let open = self.connection, !open.isClosed {
                connection = open
            } else {
                var configuration = PostgresConnection.Configuration(
                    host: self.location.host,
                    port: self.location.port,
                    username: self.location.user,
                    password: self.location.password,
                    database: self.location.database,
                    tls: .disable
                )
                configuration.options.connectTimeout = .seconds(5)
                do {
                    connection = try PostgresConnection.connect(
                        on: MultiThreadedEventLoopGroup.singleton.any(),
                        configuration: configuration,
                        id: 1,
                        logger: self.logger
                    ).wait()
                } catch {
                    throw StoreError("cannot reach the store \(self.location): \(Self.describe(error))")
                }
                self.connection = connection
            }
            do {
                return try body(connection)
            } catch let error as StoreError {
                throw error
            } catch {
                if connection.isClosed { self.connection = nil }
                throw StoreError("the store \(self.location) failed: \(Self.describe(error))")
            }
        }
    }

    /// The server's message when there is one (`PSQLError` hides it from `description`).
    static func describe(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            if let message = error.serverInfo?[.message] { return message }
            if let underlying = error.underlying { return "\(underlying)" }
            return "\(error.code)"
        }
        return "\(error)"
    }

    @discardableResult
    private func run(_ connection: PostgresConnection, _ query: PostgresQuery) throws -> PostgresQueryResult {
        try connection.query(query, logger: self.logger).wait()
    }

    /// `body` in a transaction: committed when it returns, rolled back when it throws.
    private func transaction<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        try self.withConnection { connection in
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
        )
    ]

    private static func migrate(_ connection: PostgresConnection, logger: Logger) throws {
        func run(_ query: PostgresQuery) throws -> PostgresQueryResult {
            try connection.query(query, logger: logger).wait()
        }
        _ = try run("BEGIN")
        do {
            // Daemons starting together wait for each other here.
            _ = try run("SELECT pg_advisory_xact_lock(727100001)")
            _ = try run("CREATE TABLE IF NOT EXISTS haul_migration (name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
            var applied = Set<String>()
            for row in try run("SELECT name FROM haul_migration").rows {
                applied.insert(try row.decode(String.self))
            }
            for migration in Self.migrations where !applied.contains(migration.name) {
                for statement in migration.sql { _ = try run(PostgresQuery(unsafeSQL: statement)) }
                _ = try run("INSERT INTO haul_migration (name) VALUES (\(migration.name))")
                logger.info("store: migrated \(migration.name)")
            }
            _ = try run("COMMIT")
        } catch {
            _ = try? run("ROLLBACK")
            throw error
        }
    }

    // MARK: - Rows

    private static func encode(_ download: StoredDownload) throws -> String {
        String(decoding: try Self.encoder.encode(download), as: UTF8.self)
    }

    private static func decode(_ row: PostgresRow) throws -> StoredDownload {
        let (id, data) = try row.decode((Int64, String).self)
        var download = try Self.decoder.decode(StoredDownload.self, from: Data(data.utf8))
        download.id = id
        return download
    }

    private func fetch(_ connection: PostgresConnection, id: Int64, forUpdate: Bool) throws -> StoredDownload? {
        let query: PostgresQuery =
            forUpdate
            ? "SELECT id, data FROM haul_queued_download WHERE id = \(id) FOR UPDATE"
            : "SELECT id, data FROM haul_queued_download WHERE id = \(id)"
        guard let row = try self.run(connection, query).rows.first else { return nil }
        return try Self.decode(row)
    }

    private func save(_ connection: PostgresConnection, _ download: StoredDownload) throws {
        guard let id = download.id else { throw StoreError("a download without an id cannot be updated") }
        let data = try Self.encode(download)
        let state = download.state.rawValue
        try self.run(connection, "UPDATE haul_queued_download SET gid = \(download.gid), state = \(state), data = \(data) WHERE id = \(id)")
    }

    // MARK: - QueueStore

    public func download(id: Int64) throws -> StoredDownload? {
        try self.withConnection { connection in try self.fetch(connection, id: id, forUpdate: false) }
    }

    public func forEachDownload(_ body: (StoredDownload) throws -> Void) throws {
        // Pages of 1,000 by id: a queue of 100,000 is never held at once.
        var after: Int64 = 0
        while true {
            let page = try self.withConnection { connection in
                try self.run(connection, "SELECT id, data FROM haul_queued_download WHERE id > \(after) ORDER BY id LIMIT 1000").rows.map(Self.decode)
            }
            for download in page { try body(download) }
            guard let last = page.last?.id, page.count == 1000 else { return }
            after = last
        }
    }

    @discardableResult
    public func updateDownload(id: Int64, _ change: @Sendable (inout StoredDownload) throws -> Void) throws -> StoredDownload? {
        try self.transaction { connection in
            guard var download = try self.fetch(connection, id: id, forUpdate: true) else { return nil }
            try change(&download)
            try self.save(connection, download)
            return download
        }
    }

    public func updateDownloads(ids: [Int64], _ change: (inout StoredDownload) throws -> Bool) throws -> [StoredDownload] {
        try self.transaction { connection in
            var changed: [StoredDownload] = []
            for id in ids {
                guard var download = try self.fetch(connection, id: id, forUpdate: true), try change(&download) else { continue }
                try self.save(connection, download)
                changed.append(download)
            }
            return changed
        }
    }

    public func insert(_ downloads: [StoredDownload]) throws -> [StoredDownload] {
        guard !downloads.isEmpty else { return [] }
        return try self.transaction { connection in
            try downloads.map { download in
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
        }
    }

    public func reviveInterruptedDownloads() throws {
        try self.transaction { connection in
            let active = try self.run(connection, "SELECT id, data FROM haul_queued_download WHERE state = 'active' FOR UPDATE").rows.map(Self.decode)
            for var download in active {
                download.state = .waiting
                download.notBefore = nil
                try self.save(connection, download)
            }
        }
    }

    public func purgeFinishedDownloads() throws -> Int {
        try self.withConnection { connection in
            let result = try self.run(connection, "DELETE FROM haul_queued_download WHERE state IN ('complete', 'error', 'removed')")
            return result.metadata.rows ?? 0
        }
    }

    public func deleteDownload(id: Int64) throws {
        try self.withConnection { connection in
            try self.run(connection, "DELETE FROM haul_queued_download WHERE id = \(id)")
        }
    }

    public func queueSettings() throws -> QueueSettings? {
        try self.withConnection { connection in
            guard let row = try self.run(connection, "SELECT json FROM haul_queue_settings WHERE id = 1").rows.first else { return nil }
            return try Self.decoder.decode(QueueSettings.self, from: Data(try row.decode(String.self).utf8))
        }
    }

    public func save(_ settings: QueueSettings) throws {
        let json = String(decoding: try Self.encoder.encode(settings), as: UTF8.self)
        try self.withConnection { connection in
            try self.run(connection, "INSERT INTO haul_queue_settings (id, json) VALUES (1, \(json)) ON CONFLICT (id) DO UPDATE SET json = EXCLUDED.json")
        }
    }
}
