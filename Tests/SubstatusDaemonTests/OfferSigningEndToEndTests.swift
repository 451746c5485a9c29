import Foundation
import Testing

/// Issue #9's acceptance test: a real substatusd over HTTP/2, driven by Python grpcio, whose offer
/// signatures Python's `cryptography` verifies with the public key from GetApp; then the same for
/// what the `substatus` CLI prints with `--json`.
@Suite(.serialized) struct OfferSigningEndToEndTests {
  @Test func offerSignaturesVerifyWithPythonCryptographyOverRealGRPC() async throws {
    let python = packageRoot.appendingPathComponent(".venv/bin/python").path
    try #require(FileManager.default.isExecutableFile(atPath: python), "run scripts/install-deps --test")
    let daemon = try await RunningDaemon()
    let fixtures = packageRoot.appendingPathComponent("Tests/SubstatusDaemonTests/Fixtures").path
    let protos = packageRoot.appendingPathComponent("Protos").path
    let script = fixtures + "/offer_signing_e2e.py"
    let rpc = try await runProcess(python, [script, daemon.grpc, daemon.operatorKey, fixtures, protos])
    #expect(rpc.0 == 0, "offer_signing_e2e.py failed:\n\(rpc.2)\n\(rpc.1)")
    let lines = rpc.1.split(separator: "\n")
    let app = lines.first { $0.hasPrefix("APP ") }?.split(separator: " ").map(String.init) ?? []

    // The CLI against the same server; Python checks what it printed.
    var cliChecked = false
    if app.count == 4 {
      let directory = FileManager.default.temporaryDirectory.appendingPathComponent("offer-cli-\(UUID().uuidString)")
      try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
      defer { try? FileManager.default.removeItem(at: directory) }
      let substatus = try builtExecutable("substatus")
      let global = ["--addr", daemon.grpc, "--key", app[3], "--json"]
      let promo = try await runProcess(
        substatus, ["offer", "sign-promo", app[1], "lapsed-user", "premium.monthly", "premium.winback"] + global)
      #expect(promo.0 == 0, "substatus offer sign-promo failed: \(promo.2)")
      let intro = try await runProcess(
        substatus,
        ["offer", "sign-intro", app[1], "new-user", "premium.monthly", "--transaction-id", "704289572311575926"] + global)
      #expect(intro.0 == 0, "substatus offer sign-intro failed: \(intro.2)")
      let promoFile = directory.appendingPathComponent("promo.json")
      let introFile = directory.appendingPathComponent("intro.json")
      try Data(promo.1.utf8).write(to: promoFile)
      try Data(intro.1.utf8).write(to: introFile)
      let show = try await runProcess(substatus, ["app", "show", app[1], "--addr", daemon.grpc, "--key", app[2]])
      #expect(show.0 == 0 && show.1.contains("2X9R4HXF34") && show.1.contains("sha256:"), "\(show.1)\(show.2)")
      let verified = try await runProcess(python, [script, daemon.grpc, app[2], app[1], protos, promoFile.path, introFile.path])
      #expect(verified.0 == 0, "offer_signing_e2e.py (CLI output) failed:\n\(verified.2)\n\(verified.1)")
      cliChecked = verified.0 == 0
    }
    let (status, log) = await daemon.stop()
    #expect(cliChecked)
    #expect(rpc.1.contains(" passed, 0 failed"))
    #expect(status == 0, "substatusd exited \(status)")
    // Neither the API keys nor any line of the private key reach the server's log.
    let secrets = lines.first { $0.hasPrefix("SECRETS ") }?.split(separator: " ").dropFirst() ?? []
    #expect(secrets.count >= 5)
    for secret in secrets { #expect(!log.contains(secret), "the log contains a secret") }
    #expect(log.contains("\"method\":\"/substatus.v1.EligibilityService/SignPromotionalOffer\""))
    #expect(log.contains("\"method\":\"/substatus.v1.AdminService/SetInAppPurchaseKey\""))
  }
}
