// appstore-sim: a local stand-in for Apple's verifyReceipt and server notifications.
// All logic lives in the AppStoreSimulator library; see Sources/appstore-sim/README.md.
import AppStoreSimulator
import Foundation

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.contains("--help") || arguments.contains("-h") {
  print(SimulatorCommandLine.usage)
  exit(0)
}
do {
  try await SimulatorCommandLine(arguments: arguments).run()
} catch {
  FileHandle.standardError.write(Data("appstore-sim: \(error.message)\n\(SimulatorCommandLine.usage)\n".utf8))
  exit(2)
}
