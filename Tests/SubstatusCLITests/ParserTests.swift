import SubstatusCLI
import Testing

/// A command line that must be refused with exit status 2 before any connection.
struct UsageCase: Sendable, CustomTestStringConvertible {
  let arguments: [String]
  let message: String
  var variables: [String: String] = ["SUBSTATUS_API_KEY": "sk_test"]
  var testDescription: String { arguments.joined(separator: " ") }
}

let usageCases: [UsageCase] = [
  UsageCase(arguments: ["frobnicate"], message: "substatus: unknown command 'frobnicate'"),
  UsageCase(
    arguments: ["app"],
    message: "substatus app: missing subcommand: register, list, show, update, set-secret, set-policy, set-iap-key"),
  UsageCase(arguments: ["app", "frob"], message: "substatus: unknown command 'frob' for 'app'"),
  UsageCase(
    arguments: ["tenant", "create"], message: "substatus tenant create: missing argument NAME"),
  UsageCase(
    arguments: ["tenant", "create", "a", "b"],
    message: "substatus tenant create: unexpected argument 'b'"),
  UsageCase(arguments: ["app", "show"], message: "substatus app show: missing argument APP"),
  UsageCase(arguments: ["app", "update", "a"], message: "substatus app update: give --apple-app-id, --name or --small-business"),
  UsageCase(
    arguments: ["tenant", "disable"],
    message: "substatus tenant disable: missing argument TENANT_ID"),
  UsageCase(
    arguments: ["app", "show", "a", "b"], message: "substatus app show: unexpected argument 'b'"),
  UsageCase(
    arguments: ["app", "list", "extra"], message: "substatus app list: unexpected argument 'extra'"),
  UsageCase(
    arguments: ["app", "register"],
    message: "substatus app register: missing required flag --bundle-id ID"),
  UsageCase(
    arguments: ["app", "register", "--bundle-id"],
    message: "substatus app register: flag --bundle-id needs a value (--bundle-id ID)"),
  UsageCase(
    arguments: ["app", "register", "--bundle-id", "x", "--apple-app-id", "abc"],
    message: "substatus app register: --apple-app-id needs an integer of at least 0, not 'abc'"),
  UsageCase(
    arguments: ["app", "register", "--bundle-id", "x", "--bundle-id", "y"],
    message: "substatus app register: flag --bundle-id given more than once"),
  UsageCase(
    arguments: ["app", "list", "--bogus"],
    message: "substatus app list: unknown flag --bogus for 'app list'"),
  UsageCase(arguments: ["--bogus", "app", "list"], message: "substatus: unknown flag --bogus"),
  UsageCase(
    arguments: ["app", "list", "-x"], message: "substatus app list: unknown flag -x for 'app list'"),
  UsageCase(
    arguments: ["app", "set-secret", "a", "--secret", "hunter2"],
    message: "substatus app set-secret: unknown flag --secret for 'app set-secret'"),
  UsageCase(
    arguments: ["app", "set-policy", "a"],
    message:
      "substatus app set-policy: give at least one of --refunds-block-intro, --lapsed-subscribers-get-intro, --billing-retry-entitled, --promo-scope"
  ),
  UsageCase(
    arguments: ["app", "set-policy", "a", "--refunds-block-intro", "maybe"],
    message: "substatus app set-policy: --refunds-block-intro needs true or false, not 'maybe'"),
  UsageCase(
    arguments: ["app", "set-policy", "a", "--promo-scope", "world"],
    message: "substatus app set-policy: --promo-scope must be one of group, app, not 'world'"),
  UsageCase(
    arguments: ["product", "put", "a"],
    message: "substatus product put: missing required flag --file CATALOG.json"),
  UsageCase(
    arguments: ["product", "put", "a", "--file", "/nonexistent/catalog.json"],
    message: "substatus product put: cannot read the catalog from '/nonexistent/catalog.json'"),
  UsageCase(
    arguments: ["product", "list"], message: "substatus product list: missing argument APP"),
  UsageCase(
    arguments: ["key", "create"],
    message: "substatus key create: missing required flag --role admin|ingest|read"),
  UsageCase(
    arguments: ["key", "create", "--role", "root"],
    message: "substatus key create: --role must be one of admin, ingest, read, not 'root'"),
  UsageCase(
    arguments: ["key", "revoke"], message: "substatus key revoke: missing argument KEY_ID"),
  UsageCase(
    arguments: ["receipt", "submit", "a", "u"],
    message: "substatus receipt submit: missing required flag --receipt-file F|-"),
  UsageCase(
    arguments: ["receipt", "import", "a"],
    message: "substatus receipt import: missing argument USER"),
  UsageCase(
    arguments: ["receipt", "import"],
    message: "substatus receipt import: missing arguments APP USER"),
  UsageCase(
    arguments: ["eligibility", "a", "u"], message: "substatus eligibility: missing argument PRODUCT"
  ),
  UsageCase(
    arguments: ["eligibility", "a", "u", "p", "--as-of", "-5"],
    message: "substatus eligibility: --as-of needs an integer of at least 0, not '-5'"),
  UsageCase(
    arguments: ["status", "a", "u", "--environment", "staging"],
    message: "substatus status: --environment must be one of production, sandbox, not 'staging'"),
  UsageCase(
    arguments: ["history", "a", "u", "--as-of", "5"],
    message: "substatus history: unknown flag --as-of for 'history'"),
  UsageCase(arguments: ["report"], message: "substatus report: missing argument APP"),
  UsageCase(
    arguments: ["health", "extra"], message: "substatus health: unexpected argument 'extra'"),
  UsageCase(
    arguments: ["status", "a", "u", "--timeout", "0"],
    message: "substatus status: --timeout needs a positive number of seconds, not '0'"),
  UsageCase(
    arguments: ["status", "a", "u", "--addr", "nohost"],
    message: "substatus status: --addr must be HOST:PORT, not 'nohost'"),
  UsageCase(
    arguments: ["status", "a", "u"],
    message: "substatus status: --addr must be HOST:PORT, not 'h:99999'",
    variables: ["SUBSTATUS_API_KEY": "k", "SUBSTATUS_ADDR": "h:99999"]),
  UsageCase(
    arguments: ["status", "a", "u", "--json=yes"],
    message: "substatus status: flag --json takes no value"),
  UsageCase(
    arguments: ["status", "a", "u", "--addr", "h:1", "--addr", "h:2"],
    message: "substatus status: flag --addr given more than once"),
  UsageCase(
    arguments: ["status", "a", "u"],
    message: "substatus status: no API key: pass --key KEY or set SUBSTATUS_API_KEY",
    variables: [:]),
]

@Suite("substatus command line parsing")
struct ParserTests {
  @Test(
    "usage errors exit 2 with a precise message and a pointer to the help", arguments: usageCases)
  func usageError(_ testCase: UsageCase) async {
    let run = await runCLI(testCase.arguments, variables: testCase.variables)
    #expect(run.status == 2)
    #expect(run.stdout == "")
    let lines = run.stderr.split(separator: "\n").map(String.init)
    #expect(lines.count == 2)
    #expect(lines.first?.hasPrefix(testCase.message) == true, "stderr was: \(run.stderr)")
    #expect(lines.last?.hasPrefix("Run 'substatus") == true)
    #expect(run.connected.isEmpty)
  }

  @Test("no arguments prints the usage to stderr and exits 2")
  func noArguments() async {
    let run = await runCLI([])
    #expect(run.status == 2)
    #expect(run.stderr.hasPrefix("Usage: substatus COMMAND"))
  }

  static let commandWords: [[String]] = [
    ["tenant", "create"], ["tenant", "list"], ["tenant", "disable"], ["app", "register"],
    ["app", "list"], ["app", "show"], ["app", "set-secret"],
    ["app", "set-policy"], ["product", "put"], ["product", "list"], ["key", "create"],
    ["key", "list"],
    ["key", "revoke"], ["receipt", "submit"], ["receipt", "import"], ["eligibility"], ["status"],
    ["history"],
    ["report"], ["health"],
  ]

  @Test("every command has --help: its usage, flags and the global flags", arguments: commandWords)
  func commandHelp(_ words: [String]) async {
    for flag in ["--help", "-h"] {
      let run = await runCLI(words + [flag], variables: [:])
      #expect(run.status == 0)
      #expect(run.stdout.hasPrefix("Usage: substatus \(words.joined(separator: " "))"))
      for global in [
        "--addr HOST:PORT", "--key KEY", "--json", "--timeout SECONDS", "SUBSTATUS_ADDR",
        "SUBSTATUS_API_KEY",
      ] {
        #expect(run.stdout.contains(global))
      }
      #expect(run.connected.isEmpty)
    }
  }

  @Test("the exact flags of the CLI contract are in the help")
  func contractFlags() async {
    let expected: [([String], [String])] = [
      (["app", "register"], ["--bundle-id ID", "[--name N]", "[--apple-app-id N]"]),
      (["app", "set-secret"], ["APP [--secret-file F]"]),
      (
        ["app", "set-policy"],
        [
          "[--refunds-block-intro BOOL]", "[--lapsed-subscribers-get-intro BOOL]",
          "[--billing-retry-entitled BOOL]",
          "[--promo-scope group|app]",
        ]
      ),
      (["product", "put"], ["APP --file CATALOG.json"]),
      (["key", "create"], ["--role admin|ingest|read", "[--app APP]"]),
      (["key", "revoke"], ["KEY_ID"]),
      (["receipt", "submit"], ["APP USER --receipt-file F|-"]),
      (["receipt", "import"], ["APP USER --file RESPONSE.json|-"]),
      (["eligibility"], ["APP USER PRODUCT... [--as-of MS] [--environment production|sandbox]"]),
      (["status"], ["APP USER [--as-of MS] [--environment production|sandbox]"]),
      (["history"], ["APP USER [--environment production|sandbox]"]),
      (["report"], ["APP [--as-of MS]"]),
    ]
    for (words, fragments) in expected {
      let usage =
        await runCLI(words + ["--help"]).stdout.split(separator: "\n").first.map(String.init) ?? ""
      for fragment in fragments {
        #expect(usage.contains(fragment), "\(usage) lacks \(fragment)")
      }
    }
  }

  @Test("substatus --help lists every command; a group's help lists its subcommands")
  func programHelp() async {
    let all = await runCLI(["--help"])
    #expect(all.status == 0)
    for words in Self.commandWords {
      #expect(all.stdout.contains("  " + words.joined(separator: " ")))
    }
    let app = await runCLI(["app", "--help"])
    #expect(app.status == 0)
    #expect(app.stdout.hasPrefix("Usage: substatus app COMMAND"))
    #expect(app.stdout.contains("app set-policy APP"))
    #expect(!app.stdout.contains("tenant create"))
  }

  @Test("global flags work before and after the command, with = or a separate value")
  func globalFlagPositions() async {
    for arguments in [
      ["--addr", "10.0.0.1:7000", "--key=k", "status", "a", "u"],
      ["status", "--addr=10.0.0.1:7000", "a", "--key", "k", "u"],
      ["status", "a", "u", "--addr", "10.0.0.1:7000", "--key", "k"],
    ] {
      let run = await runCLI(arguments + ["--timeout", "0.05"], variables: [:])
      #expect(Set(run.connected) == ["10.0.0.1:7000"])
      #expect(run.status == 1)  // no server: UNAVAILABLE
      #expect(run.stderr == "substatus: UNAVAILABLE: connection refused (10.0.0.1:7000)\n")
    }
  }

  @Test("the address comes from --addr, else SUBSTATUS_ADDR, else the default")
  func addressResolution() async {
    let fast = ["--timeout", "0.05"]
    #expect(
      Set(await runCLI(["health"] + fast, variables: [:]).connected) == [
        SubstatusCLI.defaultAddress
      ])
    #expect(
      Set(await runCLI(["health"] + fast, variables: ["SUBSTATUS_ADDR": "h:1"]).connected) == [
        "h:1"
      ])
    #expect(
      Set(
        await runCLI(["health", "--addr", "[::1]:2"] + fast, variables: ["SUBSTATUS_ADDR": "h:1"])
          .connected)
        == ["[::1]:2"])
  }

  @Test("`--` ends the flags, and `-` is a value")
  func doubleDash() async {
    // Both parse, so they get as far as connecting (to no server).
    let run = await runCLI(["eligibility", "a", "u", "--timeout", "0.05", "--", "--weird-product"])
    #expect(run.status == 1 && !run.connected.isEmpty)
    let dash = await runCLI(["receipt", "import", "a", "u", "--timeout", "0.05", "--file", "-"])
    #expect(dash.status == 1 && !dash.connected.isEmpty)
  }
}
