// substatusd: the substatus server. See `substatusd --help` and SubstatusDaemon.
import Foundation
import SubstatusDaemon

let configuration: DaemonConfiguration
do {
  guard let parsed = try DaemonConfiguration.parse(
    arguments: Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment)
  else {
    print(DaemonConfiguration.help)
    exit(0)
  }
  configuration = parsed
} catch {
  FileHandle.standardError.write(Data("substatusd: \(error)\n".utf8))
  exit(2)
}
exit(await SubstatusDaemon.run(configuration, environment: ProcessInfo.processInfo.environment))
