import Foundation
import HaulEngine
import Testing

@Suite("NoOverwriteMove")
struct NoOverwriteMoveTests {
    static func directory() throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("haul-move-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    @Test("A move never replaces a file; the source stays when the name is taken; taken names get numbers")
    func neverReplaces() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let source = directory + "/a.part"
        let taken = directory + "/report.pdf"
        try Data("new".utf8).write(to: URL(fileURLWithPath: source))
        try Data("old".utf8).write(to: URL(fileURLWithPath: taken))
        #expect(throws: NoOverwriteMove.Failure.self) { try NoOverwriteMove.move(source, to: taken) }
        #expect(try String(contentsOfFile: taken, encoding: .utf8) == "old", "the existing file is untouched")
        #expect(FileManager.default.fileExists(atPath: source), "and the source is still there")

        let placed = try NoOverwriteMove.moveChoosingFreeName(source, directory: directory, name: "report.pdf")
        #expect(placed == directory + "/report (1).pdf")
        #expect(try String(contentsOfFile: placed, encoding: .utf8) == "new")
        #expect(!FileManager.default.fileExists(atPath: source))

        try Data("x".utf8).write(to: URL(fileURLWithPath: source))
        try NoOverwriteMove.move(source, to: directory + "/free.bin")
        #expect(!FileManager.default.fileExists(atPath: source))
        #expect(try String(contentsOfFile: directory + "/free.bin", encoding: .utf8) == "x")
        // A missing source is an error, not a silent success.
        #expect(throws: NoOverwriteMove.Failure.self) { try NoOverwriteMove.move(directory + "/none", to: directory + "/other") }
    }
}
