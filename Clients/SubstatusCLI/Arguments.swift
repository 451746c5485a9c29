/// One flag a command accepts.
struct OptionSpec: Sendable {
  /// The flag with its dashes, such as `--bundle-id`.
  let name: String
  /// The value's placeholder (`ID`, `BOOL`); `nil` for a flag without a value.
  let value: String?
  /// One line of help.
  let help: String
  /// Whether the command fails without it.
  var required = false
  /// Whether it may be given more than once.
  var repeatable = false
}

/// What a command does, as the help and the parser see it.
struct CommandSpec: Sendable {
  /// The command's words, such as `["app", "register"]`.
  let words: [String]
  /// The positional arguments' placeholders; a trailing `...` takes one or more values.
  let positionals: [String]
  /// The flags of the command (the global flags come on top).
  let options: [OptionSpec]
  /// One line of help.
  let summary: String
  /// More help, printed below the usage.
  var details: String = ""
  /// Whether the command sends an API key (all but `health`).
  var needsKey = true

  var name: String { words.joined(separator: " ") }

  var usage: String {
    var parts = ["substatus"] + words + positionals
    for option in options {
      let text = option.value.map { "\(option.name) \($0)" } ?? option.name
      parts.append(option.required ? text : "[\(text)]")
    }
    return parts.joined(separator: " ")
  }
}

/// A command line, parsed against the command table.
struct ParsedArguments: Sendable {
  /// The command, or `nil` for `substatus --help` alone.
  var command: CommandSpec?
  /// The positional values, in order.
  var positionals: [String] = []
  /// The values of each flag given (an empty string for flags without a value).
  var options: [String: [String]] = [:]
  /// Whether `--help` or `-h` was given.
  var help = false
  /// The command words given when they name a group of commands, for group help.
  var group: [String] = []

  /// The last value of a flag.
  func value(_ name: String) -> String? { options[name]?.last }
  /// Whether a flag was given.
  func has(_ name: String) -> Bool { options[name] != nil }
}

/// A mistake in the command line: printed with a pointer to the help, exit status 2.
struct UsageError: Error, Sendable {
  /// What is wrong, in one line.
  let message: String
  /// The command concerned, for the pointer to its help.
  let command: String?
}

/// The global flags, accepted before or after the command.
let globalOptions: [OptionSpec] = [
  OptionSpec(
    name: "--addr", value: "HOST:PORT",
    help: "the server's gRPC address (env SUBSTATUS_ADDR; default \(SubstatusCLI.defaultAddress))"),
  OptionSpec(name: "--key", value: "KEY", help: "the API key (env SUBSTATUS_API_KEY)"),
  OptionSpec(
    name: "--json", value: nil,
    help: "print the response message as canonical proto3 JSON instead of tables"),
  OptionSpec(
    name: "--timeout", value: "SECONDS",
    help:
      "the deadline of the call, retries included (default \(SubstatusCLI.defaultTimeoutSeconds))"),
  OptionSpec(name: "--tls", value: nil, help: "connect with TLS (verified against the system CAs)"),
  OptionSpec(name: "--ca-file", value: "F", help: "verify the server against these CAs (PEM; implies --tls)"),
  OptionSpec(name: "--client-cert", value: "F", help: "present this client certificate (PEM; mTLS, implies --tls)"),
  OptionSpec(name: "--client-key", value: "F", help: "the client certificate's private key (PEM)"),
  OptionSpec(name: "--help", value: nil, help: "show help for the command"),
]

/// Parses a command line against the command table.
///
/// Global flags may come anywhere; a command's flags after its words. `--flag=value` and
/// `--flag value` are both accepted; `--` ends the flags; `-` is an ordinary value.
func parseArguments(_ arguments: [String], commands: [CommandSpec]) throws(UsageError)
  -> ParsedArguments
{
  var parsed = ParsedArguments()
  var words: [String] = []
  var onlyPositionals = false
  var index = 0
  while index < arguments.count {
    let argument = arguments[index]
    index += 1
    if !onlyPositionals && argument == "--" {
      onlyPositionals = true
      continue
    }
    if !onlyPositionals && (argument == "-h" || argument == "--help") {
      parsed.help = true
      continue
    }
    if !onlyPositionals && argument.hasPrefix("-") && argument != "-" {
      let name: String
      var inline: String?
      if let equals = argument.firstIndex(of: "=") {
        name = String(argument[..<equals])
        inline = String(argument[argument.index(after: equals)...])
      } else {
        name = argument
      }
      let spec =
        globalOptions.first { $0.name == name } ?? parsed.command?.options.first { $0.name == name }
      guard let spec else {
        if let command = parsed.command {
          throw UsageError(
            message: "unknown flag \(name) for '\(command.name)'", command: command.name)
        }
        if !words.isEmpty,
          commands.contains(where: { Array($0.words.prefix(words.count)) == words })
        {
          throw UsageError(
            message:
              "unknown flag \(name) before the command is complete ('\(words.joined(separator: " "))')",
            command: nil)
        }
        throw UsageError(message: "unknown flag \(name)", command: nil)
      }
      let value: String
      if let placeholder = spec.value {
        if let inline {
          value = inline
        } else {
          guard index < arguments.count else {
            throw UsageError(
              message: "flag \(name) needs a value (\(name) \(placeholder))",
              command: parsed.command?.name)
          }
          value = arguments[index]
          index += 1
        }
      } else {
        guard inline == nil else {
          throw UsageError(message: "flag \(name) takes no value", command: parsed.command?.name)
        }
        value = ""
      }
      if parsed.options[name] != nil && !spec.repeatable && spec.value != nil {
        throw UsageError(
          message: "flag \(name) given more than once", command: parsed.command?.name)
      }
      parsed.options[name, default: []].append(value)
      continue
    }
    if parsed.command == nil {
      words.append(argument)
      // A command may be the start of a longer one (`report APP`, `report trends APP`): the next
      // argument continues the words when some command's words go on with it.
      let continues =
        index < arguments.count
        && commands.contains { Array($0.words.prefix(words.count + 1)) == words + [arguments[index]] }
      if continues { continue }
      if let command = commands.first(where: { $0.words == words }) {
        parsed.command = command
        continue
      }
      let group = commands.filter { Array($0.words.prefix(words.count)) == words }
      if group.isEmpty {
        let known = words.count == 1 ? "" : " for '\(words.dropLast().joined(separator: " "))'"
        throw UsageError(message: "unknown command '\(argument)'\(known)", command: nil)
      }
      continue
    }
    parsed.positionals.append(argument)
  }
  if parsed.command == nil && !words.isEmpty {
    parsed.group = words
    if !parsed.help {
      let choices = commands.filter { Array($0.words.prefix(words.count)) == words }
        .map { $0.words[words.count] }
      throw UsageError(
        message: "missing subcommand: \(choices.joined(separator: ", "))",
        command: words.joined(separator: " "))
    }
  }
  guard let command = parsed.command, !parsed.help else { return parsed }

  // Positionals: exact count, or at least the count with a trailing `...`.
  let variadic = command.positionals.last?.hasSuffix("...") ?? false
  let fixed = variadic ? command.positionals.count - 1 : command.positionals.count
  if parsed.positionals.count < command.positionals.count {
    let missing = command.positionals[parsed.positionals.count...].map {
      $0.hasSuffix("...") ? String($0.dropLast(3)) : $0
    }
    throw UsageError(
      message: "missing argument\(missing.count > 1 ? "s" : "") \(missing.joined(separator: " "))",
      command: command.name)
  }
  if !variadic && parsed.positionals.count > fixed {
    throw UsageError(
      message: "unexpected argument '\(parsed.positionals[fixed])'", command: command.name)
  }
  for option in command.options where option.required && !parsed.has(option.name) {
    throw UsageError(
      message: "missing required flag \(option.name) \(option.value ?? "")", command: command.name)
  }
  return parsed
}

/// The help of one command.
func help(for command: CommandSpec) -> String {
  var text = "Usage: \(command.usage)\n\n\(command.summary)\n"
  if !command.details.isEmpty { text += "\n\(command.details)\n" }
  if !command.options.isEmpty {
    text += "\nFlags:\n" + optionTable(command.options)
  }
  text += "\nGlobal flags:\n" + optionTable(globalOptions)
  return text
}

/// The help of the whole program, or of a group of commands (`substatus app --help`).
func help(commands: [CommandSpec], group: [String] = []) -> String {
  let shown = commands.filter { Array($0.words.prefix(group.count)) == group }
  let title = group.isEmpty ? "substatus" : "substatus \(group.joined(separator: " "))"
  var text = "Usage: \(title) COMMAND [ARGUMENTS] [FLAGS]\n\n"
  if group.isEmpty {
    text += "The command-line client of a substatus server (gRPC).\n\n"
  }
  text += "Commands:\n"
  let rows = shown.map { ["  " + ($0.words + $0.positionals).joined(separator: " "), $0.summary] }
  text += formatColumns(rows)
  text += "\nGlobal flags:\n" + optionTable(globalOptions)
  text += "\nRun 'substatus COMMAND --help' for a command's flags.\n"
  text +=
    "Exit status: 0 success, 1 the call failed (the message names the gRPC status), 2 usage.\n"
  return text
}

private func optionTable(_ options: [OptionSpec]) -> String {
  formatColumns(
    options.map { option in
      ["  " + (option.value.map { "\(option.name) \($0)" } ?? option.name), option.help]
    })
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
func formatColumns(_ rows: [[String]]) -> String {
  // Cells are the server's strings: shown, never acted on by the terminal (and measured so).
  let rows = rows.map { $0.map(TerminalText.visible) }
  guard let columns = rows.map(\.count).max() else { return "" }
  var widths = [Int](repeating: 0, count: columns)
  for row in rows {
    for (n, cell) in row.enumerated() { widths[n] = max(widths[n], cell.count) }
  }
  var text = ""
  for row in rows {
    var line = ""
    for (n, cell) in row.enumerated() {
      if n == row.count - 1 {
        line += cell
      } else {
        line += cell + String(repeating: " ", count: widths[n] - cell.count + 2)
      }
    }
    while line.hasSuffix(" ") { line.removeLast() }
    text += line + "\n"
  }
  return text
}
