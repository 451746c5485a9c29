// The `substatus` command-line client; the logic lives in SubstatusCLI.
import Foundation
import RPCCore
import SubstatusCLI

let environment = CLIEnvironment(
  variables: ProcessInfo.processInfo.environment,
  standardOutput: { FileHandle.standardOutput.write(Data($0.utf8)) },
  standardError: { FileHandle.standardError.write(Data($0.utf8)) },
  readStandardInput: { [UInt8](FileHandle.standardInput.readDataToEndOfFile()) },
  connect: { address throws -> any ClientTransport in
    // The HTTP/2 client transport (RPCHTTP2Transport) is not on this branch yet.
    throw RPCError(code: .unavailable, message: "no HTTP/2 client transport in this build (\(address))")
  })
exit(await SubstatusCLI.run(Array(CommandLine.arguments.dropFirst()), environment: environment))
