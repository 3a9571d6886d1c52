import Foundation
import HaulTestSupport

// Runs the fault-injecting test server in the foreground for scripts and manual testing.
// Usage: haul-test-server [PORT]   (prints the port it listens on)
let requestedPort = CommandLine.arguments.dropFirst().first.flatMap(Int.init) ?? 0
let server = try await FaultInjectingHTTPServer.start(port: requestedPort)
FileHandle.standardOutput.write(Data("listening on 127.0.0.1:\(server.port)\n".utf8))
while true {
    try await Task.sleep(for: .seconds(3600))
}
