// substatus-bench-server: subs.bench.v1.Bench (peer-bench/proto/bench.proto) on our gRPC runtime,
// with the WORKLOAD.md data set, for conformance (`loadgen -verify`) and load comparisons.
//
//   substatus-bench-server --listen HOST:PORT [--threads N] [--handlers loop|pool] [--fingerprint]
//                          [--tls-cert F --tls-key F]
//
// Echo and CheckEligibility never block (an in-memory data set), so by default they run on the
// event loop thread (`HandlerExecution.transportThread`); `--handlers pool` runs them on Swift's
// pool instead, for comparisons.
import Dispatch
import Foundation
import ProcessSignals
import RPCCore
import RPCHTTP2Transport
import SubstatusServiceAPI
import SubstatusWire

func usage() -> Never {
  FileHandle.standardError.write(
    Data(
      "usage: substatus-bench-server --listen HOST:PORT [--threads N] [--handlers loop|pool] [--fingerprint] [--tls-cert F --tls-key F]\n"
        .utf8))
  exit(2)
}

var listen = "127.0.0.1:57053"
var threads: Int?
var fingerprintOnly = false
var tlsCertificate: String?
var tlsKey: String?
var execution = HandlerExecution.transportThread
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
  switch argument {
  case "--listen":
    guard let value = arguments.popFirst() else { usage() }
    listen = value
  case "--threads":
    guard let value = arguments.popFirst().flatMap({ Int($0) }), value > 0 else { usage() }
    threads = value
  case "--handlers":
    switch arguments.popFirst() {
    case "loop": execution = .transportThread
    case "pool": execution = .pool
    default: usage()
    }
  case "--fingerprint": fingerprintOnly = true
  case "--tls-cert":
    guard let value = arguments.popFirst() else { usage() }
    tlsCertificate = value
  case "--tls-key":
    guard let value = arguments.popFirst() else { usage() }
    tlsKey = value
  default: usage()
  }
}

let workload = BenchWorkload()
let print = workload.fingerprint()
if fingerprintOnly {
  Swift.print("users=\(BenchWorkload.userCount) products=\(BenchWorkload.productCount) txs=\(print.transactions) intro_true=\(print.introTrue) promo_true=\(print.promoTrue)")
  exit(0)
}

guard let colon = listen.lastIndex(of: ":"), let port = Int(listen[listen.index(after: colon)...]) else { usage() }
var host = String(listen[..<colon])
if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }

/// The `subs.bench.v1.Bench` service over the synthetic workload.
struct BenchService: Subs_Bench_V1_Bench.ServiceProtocol {
  let workload: BenchWorkload

  func echo(_ request: Subs_Bench_V1_EchoRequest, _ context: ServerContext) async throws -> Subs_Bench_V1_EchoReply {
    var reply = Subs_Bench_V1_EchoReply()
    reply.payload = request.payload
    return reply
  }

  func checkEligibility(
    _ request: Subs_Bench_V1_EligibilityRequest, _ context: ServerContext
  ) async throws -> Subs_Bench_V1_EligibilityReply {
    var reply = Subs_Bench_V1_EligibilityReply()
    reply.results.reserveCapacity(request.productIDs.count)
    workload.check(userID: request.userID, productIDs: request.productIDs) { productID, intro, promo in
      var item = Subs_Bench_V1_ProductEligibility()
      item.productID = productID
      item.introEligible = intro
      item.promoEligible = promo
      reply.results.append(item)
    }
    return reply
  }
}

var router = RPCRouter()
Subs_Bench_V1_Bench.register(BenchService(workload: workload), in: &router) { _ in execution }
HealthService().register(into: &router)
ReflectionService(files: ProtoFiles.all).register(into: &router)

var configuration = HTTP2ServerTransport.Configuration(host: host, port: port)
if let threads { configuration.threads = threads }
if let tlsCertificate, let tlsKey {
  configuration.tls = TLSConfiguration(certificateChainPath: tlsCertificate, privateKeyPath: tlsKey)
} else if tlsCertificate != nil || tlsKey != nil {
  usage()
}
let transport: HTTP2ServerTransport
do {
  transport = try HTTP2ServerTransport(configuration: configuration)
} catch {
  FileHandle.standardError.write(Data("substatus-bench-server: \(error)\n".utf8))
  exit(1)
}
let server = RPCServer(transport: transport, router: router)

ProcessSignals.on([SIGTERM, SIGINT]) { [server] in server.beginGracefulShutdown() }

FileHandle.standardError.write(
  Data("substatus-bench-server listening on \(host):\(transport.port) (tls=\(configuration.tls != nil), threads=\(configuration.threads), handlers=\(execution == .pool ? "pool" : "loop"), txs=\(print.transactions) intro_true=\(print.introTrue) promo_true=\(print.promoTrue))\n".utf8))
try await server.run()
