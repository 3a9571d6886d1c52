import ArgumentParser
@testable import HaulCommands
import Testing

@Suite("The haul command's tree")
struct HaulCommandTests {
    /// `HaulCommand.runAndExit` awaits `get` and the root and runs every other command on its
    /// thread, without the cast to `any AsyncParsableCommand` (a scan of every conformance
    /// record of the program): an asynchronous subcommand would not be awaited.
    @Test("Every subcommand but get is synchronous, and each is named as a pseudo-command of haul")
    func subcommandShapes() {
        for subcommand in HaulCommand.configuration.subcommands {
            let name = subcommand.configuration.commandName ?? "?"
            if subcommand == GetCommand.self {
                #expect(subcommand is any AsyncParsableCommand.Type)
            } else {
                #expect(!(subcommand is any AsyncParsableCommand.Type), "haul \(name) is asynchronous: run it with await in HaulCommand.runAndExit")
            }
            // Parsed as the root when its name comes first: its usage must still read `haul NAME`.
            #expect(subcommand.configuration._superCommandName == "haul", "haul \(name)")
        }
    }

    @Test("A subcommand's usage reads haul NAME when it is parsed alone", arguments: ["get", "add", "ls", "pause", "wait", "daemon"])
    func usageNamesHaul(name: String) throws {
        let subcommand = try #require(HaulCommand.configuration.subcommands.first { $0.configuration.commandName == name })
        #expect(subcommand.helpMessage().contains("USAGE: haul \(name)"), "\(subcommand.helpMessage())")
    }
}
