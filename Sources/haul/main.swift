import HaulCommands

await HaulCommand.runAndExit()
