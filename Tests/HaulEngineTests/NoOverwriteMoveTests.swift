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

    @Test("Many files of one name: each gets the next free number, and a freed name is used again")
    func manyFilesOfOneName() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // A directory left by an earlier run: data.bin, data (1).bin … data (299).bin.
        FileManager.default.createFile(atPath: directory + "/data.bin", contents: Data("0".utf8))
        for number in 1..<300 {
            FileManager.default.createFile(atPath: directory + "/data (\(number)).bin", contents: Data("\(number)".utf8))
        }
        func place(_ text: String) throws -> String {
            let source = directory + "/incoming.part"
            try Data(text.utf8).write(to: URL(fileURLWithPath: source))
            return try NoOverwriteMove.moveChoosingFreeName(source, directory: directory, name: "data.bin")
        }
        for number in 300..<340 {
            let placed = try place("new \(number)")
            #expect(placed == directory + "/data (\(number)).bin")
            #expect(try String(contentsOfFile: placed, encoding: .utf8) == "new \(number)")
        }
        // Nothing was replaced on the way.
        for number in 1..<300 {
            #expect(try String(contentsOfFile: directory + "/data (\(number)).bin", encoding: .utf8) == "\(number)")
        }
        // Someone else takes the next number between two placements: skipped, not replaced.
        FileManager.default.createFile(atPath: directory + "/data (340).bin", contents: Data("theirs".utf8))
        #expect(try place("mine") == directory + "/data (341).bin")
        #expect(try String(contentsOfFile: directory + "/data (340).bin", encoding: .utf8) == "theirs")
        // The numbered files are deleted: the numbers are free again, the plain name is not.
        for number in 1...341 { unlink(directory + "/data (\(number)).bin") }
        #expect(try place("again") == directory + "/data (1).bin")
        // Everything is deleted: the plain name first.
        unlink(directory + "/data.bin")
        unlink(directory + "/data (1).bin")
        #expect(try place("fresh") == directory + "/data.bin")
    }
}
