// swift-tools-version:6.0
import PackageDescription

let strictSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
]

// The programs' own modules (HaulCommands, HaulDaemon, HaulStore and the two executables), built
// for release, reach the metadata of a generic type with concrete arguments (`[String: Int]`,
// `Result<Response, any Error>`, NIO's handler types) through its accessor, with the witness
// tables passed in, instead of by mangled name: the runtime resolves a mangled name's generic
// requirements by searching every protocol conformance record of the program (9,000 in `haul`,
// ~0.55 M instructions for each new type-and-protocol pair, once). Not the libraries' modules: a
// product with unsafe flags cannot be a versioned dependency of another package; nor
// dependencies, which SwiftPM builds without our flags. Measured (callgrind): a one-file `haul
// get` 36.3 → 35.0 M instructions (with the libraries' modules too it was 32.4 M), `haul add
// --list -w` of 1,000 URLs 30.2 → 29.2 M; `haul get`'s count a file unchanged. 300 alternating
// one-file `haul get`s: 13.97 → 13.16 ms (curl 10.07 in the same rounds).
let programSettings: [SwiftSetting] = strictSettings + [
    .unsafeFlags(["-Xfrontend", "-disable-concrete-type-metadata-mangled-name-accessors"], .when(configuration: .release)),
]

// Release builds of `haul` link the Swift runtime and Foundation statically (the libraries
// `--static-swift-stdlib` would add, named here so that `swift run -c release haul` does it):
// no shared-library lookups and relocations at start, and only the parts of Foundation the
// program reaches are mapped. Measured (scripts/bench): start 10 ms sooner, 3-7 MiB less
// resident. The executable stays position-independent (ASLR). Debug builds link as usual.
//
// Linked by lld, for three things that keep the resident set small (measured with
// /proc/PID/pagemap against the sections, README "Performance"):
// - `-z pack-relative-relocs`: the ~120,000 relative relocations of a position-independent
//   executable as a bitmap (DT_RELR, glibc 2.36+) — 23 KB read at start instead of 2.8 MB;
// - `--no-export-dynamic`: no 32,000-entry dynamic symbol table (1.1 MB with its strings and
//   hash) for the loader to search; nothing looks symbols up in the executable;
// - `--symbol-ordering-file`: the functions a download runs, listed by `scripts/link-order`,
//   placed together, so the kernel's 64 KiB fault-around maps them instead of the cold code
//   around them. Names that no longer exist are skipped (stale list: more memory, same program).
let staticProgramSettings: [LinkerSetting] = [
    .unsafeFlags(
        [
            "-static-stdlib", "-lCoreFoundation", "-l_FoundationICU", "-l_FoundationCollections",
            "-l_FoundationCShims",
            "-use-ld=lld",
            "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs",
            "-Xlinker", "--no-export-dynamic",
            "-Xlinker", "--symbol-ordering-file=\(Context.packageDirectory)/Sources/haul/haul.order",
            "-Xlinker", "--no-warn-symbol-ordering",
        ],
        .when(platforms: [.linux], configuration: .release)
    ),
]

// The daemon links the Swift runtime and Foundation statically too (it never uses
// FoundationNetworking, whose libcurl has no static build here), with the same two loader
// savings as `haul`; SQLite stays the system's. Measured against the shared-library build
// (`scripts/queue-bench`-style A/B, 1,000 × 16 KiB, 8 alternating rounds each, twice):
// 360 → 340 and 320 → 295 µs of CPU a file (calls into the runtime are direct, not through the
// PLT), 60-70 → 40 ms of CPU to start, idle RSS 9.4 → 9.7-10.2 MiB (its own pages instead of
// shared libraries'). Its own symbol ordering file (`scripts/link-order`: what a daemon runs for
// list downloads, downloads per URL, a large file, pause and resume): a list of 1,000 × 16 KiB
// peaks at 22.2-23.8 MiB resident instead of 26.5-28.7. Its CPU a file came out 3-7 % lower in
// two alternating runs, which is within this machine's noise: kept for the memory.
let daemonProgramSettings: [LinkerSetting] = [
    .unsafeFlags(
        [
            "-static-stdlib", "-lCoreFoundation", "-l_FoundationICU", "-l_FoundationCollections",
            "-l_FoundationCShims",
            "-use-ld=lld", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs", "-Xlinker", "--no-export-dynamic",
            "-Xlinker", "--symbol-ordering-file=\(Context.packageDirectory)/Sources/hauld/hauld.order",
            "-Xlinker", "--no-warn-symbol-ordering",
        ],
        .when(platforms: [.linux], configuration: .release)
    ),
]

let package = Package(
    name: "Haul",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Haul", targets: ["Haul"]),
        .library(name: "HaulCore", targets: ["HaulCore"]),
        .executable(name: "haul", targets: ["haul"]),
        .executable(name: "hauld", targets: ["hauld"]),
    ],
    dependencies: [
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.3"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
    ],
    targets: [
        // Pure decision logic: resume rules, resume-data codec, retry policy, file naming, state machines.
        // No I/O, no networking dependencies: everything here is tested without a socket.
        .target(
            name: "HaulCore",
            swiftSettings: strictSettings
        ),
        // The transfer engine: runs HaulCore's decisions on AsyncHTTPClient and writes bodies to disk.
        .target(
            name: "HaulEngine",
            dependencies: [
                "HaulCore",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strictSettings
        ),
        // The client side of hauld's Unix socket (JSON lines): background sessions and the
        // `haul` queue commands talk to the daemon through it.
        .target(
            name: "HaulDaemonClient",
            dependencies: [
                "HaulCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: strictSettings
        ),
        // The public, URLSession-shaped API.
        .target(
            name: "Haul",
            dependencies: [
                "HaulCore",
                "HaulEngine",
                "HaulDaemonClient",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strictSettings
        ),
        // The daemon's durable task store: SQLite through GRDB, with migrations.
        .target(
            name: "HaulStore",
            dependencies: [
                "HaulCore",
                .product(name: "GRDB", package: "GRDB.swift"),
                // Rows of downloads are read straight off SQLite's statement (see StoredDownload).
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: programSettings
        ),
        // hauld: background transfers that outlive their clients, served over a Unix socket.
        .target(
            name: "HaulDaemon",
            dependencies: [
                "HaulCore",
                "HaulDaemonClient",
                "HaulEngine",
                "HaulStore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOExtras", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
            ],
            swiftSettings: programSettings
        ),
        .executableTarget(
            name: "hauld",
            dependencies: [
                "HaulDaemon",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            exclude: ["hauld.order"],
            swiftSettings: programSettings,
            linkerSettings: daemonProgramSettings
        ),
        // Everything the `haul` command does; the executable only calls into it. Not the Haul
        // library: `haul get` runs on the engine itself, and the program stays free of
        // FoundationNetworking (libcurl and its dozens of libraries) — time and memory at start.
        .target(
            name: "HaulCommands",
            dependencies: [
                "HaulCore",
                "HaulEngine",
                "HaulDaemonClient",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: programSettings
        ),
        .executableTarget(
            name: "haul",
            dependencies: ["HaulCommands"],
            exclude: ["haul.order"],
            swiftSettings: programSettings,
            linkerSettings: staticProgramSettings
        ),
        // The README's background-session example as a program: `start` queues downloads and
        // exits, `collect` picks the results up later (also used by the tests).
        .executableTarget(
            name: "haul-background-demo",
            dependencies: ["Haul"],
            path: "Sources/HaulBackgroundDemo",
            swiftSettings: strictSettings
        ),
        // The fault-injecting HTTP server shared by tests and benchmarks.
        .target(
            name: "HaulTestSupport",
            dependencies: [
                "HaulCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPCompression", package: "swift-nio-extras"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "haul-test-server",
            dependencies: ["HaulTestSupport"],
            path: "Sources/HaulTestServer",
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "HaulCoreTests",
            dependencies: ["HaulCore"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "HaulEngineTests",
            dependencies: [
                "HaulEngine",
                "HaulTestSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "HaulTests",
            dependencies: [
                "Haul",
                "HaulCore",
                "HaulTestSupport",
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "HaulDaemonTests",
            dependencies: [
                "Haul",
                "HaulDaemon",
                "HaulStore",
                "HaulCore",
                "HaulTestSupport",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strictSettings
        ),
        // URLSession code renamed by sed (scripts/port-corpus): compiling it is the test. Ported
        // app code is written in Swift 5 mode without upcoming features, as apps are.
        .testTarget(
            name: "PortCorpusTests",
            dependencies: ["Haul", "HaulTestSupport"],
            swiftSettings: [.swiftLanguageMode(.v5)]
        ),
        .testTarget(
            name: "HaulCommandsTests",
            dependencies: [
                "HaulCommands",
                "HaulTestSupport",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strictSettings
        ),
    ]
)
