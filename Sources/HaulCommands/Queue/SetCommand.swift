import ArgumentParser
import Foundation
import HaulCore

/// `haul set [KEY VALUE]`: show or change the daemon's global settings.
struct SetCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "set",
        abstract: "Show or change global settings of the download queue.",
        discussion: "Keys:\n" + QueueSettings.keys.map { "  \($0.key): \($0.help)" }.joined(separator: "\n")
    ).haulSubcommand

    @Argument(help: "The setting to change (omit both to show all).")
    var key: String?

    @Argument(help: "Its new value.")
    var value: String?

    @OptionGroup var connection: QueueConnectionOptions

    func validate() throws {
        if (self.key == nil) != (self.value == nil) { throw ValidationError("give both KEY and VALUE, or neither") }
        if let key, let value {
            var probe = QueueSettings(defaultDirectory: "/")
            do { try probe.set(key, to: value) } catch { throw ValidationError("\(error)") }
        }
    }

    func run() throws {
        let client = try QueueClient.connect(start: self.connection.start)
        defer { client.close() }
        let change = self.key.flatMap { key in self.value.map { DaemonRequest.SettingChange(settingKey: key, settingValue: $0) } }
        let response = try client.call(.queueSettings(change))
        if let settings = response.settings { print(QueueFormatting.settings(settings)) }
    }
}
