import Foundation
import Testing

/// Issue 30's attacks on the HTTP/1.1 listener of a real substatusd (`Fixtures/http_edge.py`, raw
/// sockets): request smuggling through ambiguous framing (attack 6), and many keep-alive
/// connections from one address, directly or through a trusted reverse proxy (attack 9), with a
/// real nginx in front for the last.
@Suite(.serialized) struct HTTPEdgeTests {
  /// Runs one scenario of http_edge.py against `daemon`, off the cooperative pool; stops the
  /// daemon and returns the script's output and the daemon's log.
  func run(_ arguments: [String], _ daemon: RunningDaemon) async throws -> (out: String, log: String) {
    let python = packageRoot.appendingPathComponent(".venv/bin/python").path
    try #require(FileManager.default.isExecutableFile(atPath: python), "run scripts/install-deps --test")
    let script = packageRoot.appendingPathComponent("Tests/SubstatusDaemonTests/Fixtures/http_edge.py").path
    let (status, out, err) = try await runProcess(python, [script, arguments[0], daemon.http] + arguments.dropFirst())
    let (exit, log) = await daemon.stop()
    #expect(status == 0, "http_edge.py \(arguments) failed:\n\(err)\n\(out)")
    #expect(out.contains("PASS \(arguments[0])"))
    #expect(exit == 0, "substatusd exited \(exit):\n\(log.suffix(2000))")
    return (out, log)
  }

  /// Each ambiguous head gets its status and `Connection: close`, and the request smuggled behind
  /// it is never answered.
  @Test(arguments: [
    "content_length_and_chunked", "chunked_and_content_length", "xchunked", "chunked_identity", "chunked_twice",
    "two_content_lengths", "obs_fold_space", "obs_fold_tab", "obs_fold_first_line", "nul_in_value", "nul_in_name",
    "bare_lf_everywhere", "bare_lf_request_line", "bare_lf_one_field", "bare_lf_end_of_head", "bare_cr_in_value",
    "space_before_colon", "space_in_target", "control_in_target",
  ])
  func ambiguousFramingIsRefusedAndTheConnectionClosed(framing: String) async throws {
    let daemon = try await RunningDaemon(extraArguments: ["--refresh-interval", "0"])
    _ = try await run(["framing", framing], daemon)
  }

  /// Well-formed requests (chunked bodies, empty values, cookies, HTTP/1.0) are still served on a
  /// kept connection.
  @Test func wellFormedRequestsAreServed() async throws {
    let daemon = try await RunningDaemon(extraArguments: ["--refresh-interval", "0"])
    _ = try await run(["well_formed"], daemon)
  }

  /// 64 keep-alive connections from one address, 3 requests each, against the default cap of 16:
  /// every request is answered, 200 or 503 with Retry-After; none is closed without an answer.
  @Test func keepAliveConnectionsFromOneAddressAreAllAnswered() async throws {
    let daemon = try await RunningDaemon(extraArguments: ["--refresh-interval", "0"])
    let (_, log) = try await run(["keepalive_flood"], daemon)
    #expect(log.contains("\"msg\":\"http request refused\""), "\(log.suffix(2000))")
    #expect(log.contains("\"client\":\"ipv4:127.0.0.3:"), "\(log.suffix(2000))")
  }

  /// The same through a trusted proxy's address: the cap counts each forwarded client.
  @Test func keepAliveConnectionsThroughATrustedProxyAreAllAnswered() async throws {
    let daemon = try await RunningDaemon(
      extraArguments: ["--refresh-interval", "0", "--trusted-proxies", "127.0.0.1/32"])
    _ = try await run(["proxied_flood"], daemon)
  }

  /// A real nginx (Debian's) in front of the HTTP listener, with README's configuration.
  @Test func behindNginx() async throws {
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"].first { FileManager.default.isExecutableFile(atPath: $0) }
    let binary = try #require(nginx, "nginx is not installed: run scripts/install-deps --test")
    let daemon = try await RunningDaemon(
      extraArguments: ["--refresh-interval", "0", "--trusted-proxies", "127.0.0.1/32"])
    let (out, log) = try await run(["nginx", binary], daemon)
    #expect(out.contains("CLIENTS "))
    // The log names the forwarded clients: the refused flooder and the RPC's caller.
    #expect(log.contains("\"client\":\"ipv4:198.51.100.66\""), "\(log.suffix(3000))")
    #expect(log.contains("\"peer\":\"ipv4:198.51.100.78\""), "\(log.suffix(3000))")
  }
}
