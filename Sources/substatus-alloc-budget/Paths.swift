import CAllocCounter
import HTTPServer
import RPCCore
import SubstatusServiceAPI
import SubstatusWire

/// The allocations counted in one window of calls.
struct Counts: Sendable {
  var calls: Int
  var allocations: UInt64
  var bytes: UInt64
  var frees: UInt64
}

/// Counts what the whole process allocates while `body` runs `calls` calls one after another.
func counting(calls: Int, _ body: () async throws -> Void) async throws -> Counts {
  substatus_alloc_counter_start()
  do { try await body() } catch {
    _ = substatus_alloc_counter_stop()
    throw error
  }
  let counts = substatus_alloc_counter_stop()
  return Counts(calls: calls, allocations: counts.allocations, bytes: counts.bytes, frees: counts.frees)
}

/// Calls `method` with each of `requests` in a counted window, through the client end of the
/// in-process transport: the requests are encoded before the window and the answers decoded and
/// checked after it, so the count is the transport's and the server's (what a call costs
/// `substatusd`), not a client's encoding and decoding.
func countedCalls<Request: ProtobufMessage, Response: ProtobufMessage>(
  _ world: BudgetWorld, _ method: ProtoMethodDescriptor<Request, Response>, _ requests: [Request],
  _ metadata: Metadata, check: (Request, Response) throws -> Void
) async throws -> Counts {
  let encoded = requests.map { $0.serializedBytes() }
  let path = method.path
  let options = CallOptions()
  var replies: [[UInt8]] = []
  replies.reserveCapacity(encoded.count)
  let counts = try await counting(calls: encoded.count) {
    for bytes in encoded {
      replies.append(try await world.transport.unary(method: path, request: bytes, metadata: metadata, options: options).message)
    }
  }
  for (request, reply) in zip(requests, replies) { try check(request, try Response(serializedBytes: reply)) }
  return counts
}

/// One measured path: `round(first, count)` makes the requests of calls `first..<first+count`
/// (not counted), then makes the calls in a counted window, checking every answer.
struct MeasuredPath: Sendable {
  /// The name in the budget file.
  var name: String
  /// Calls per counted round.
  var calls: Int
  var round: @Sendable (_ first: Int, _ count: Int) async throws -> Counts
}

/// The paths, by name: CheckEligibility 1 user and 50 users × 20 products, GetStatus,
/// ImportTransactions of 10 transactions (a new user each call) and an App Store Server
/// Notification V1 (DID_RENEW, a new renewal of an existing subscription each call).
func measuredPaths(world: BudgetWorld, fixture: Fixture, scale: Int) -> [MeasuredPath] {
  let users = fixture.users
  let products = fixture.productIDs

  @Sendable func eligibilityRequest(_ i: Int, users count: Int) -> Substatus_V1_CheckEligibilityRequest {
    var request = Substatus_V1_CheckEligibilityRequest()
    request.appID = fixture.appID
    request.queries = (0..<count).map { u in
      var query = Substatus_V1_EligibilityQuery()
      query.userID = users[(i + u) % users.count]
      // The 20 products, from a different first one each call (as the benchmark asks).
      query.productIDs = (0..<products.count).map { products[($0 + i) % products.count] }
      return query
    }
    return request
  }

  func eligibility(name: String, users count: Int, calls: Int) -> MeasuredPath {
    MeasuredPath(name: name, calls: calls) { first, n in
      let requests = (first..<first + n).map { eligibilityRequest($0, users: count) }
      return try await countedCalls(world, Substatus_V1_EligibilityService.checkEligibility, requests, fixture.read) {
        request, response in
        guard response.users.map(\.userID) == request.queries.map(\.userID),
          response.users.allSatisfy({ $0.products.count == products.count && $0.error == nil })
        else { throw BudgetError("\(name): an incomplete answer: \(response)") }
      }
    }
  }

  let getStatus = MeasuredPath(name: "get_status", calls: 50 * scale) { first, n in
    let requests = (first..<first + n).map { i in
      var request = Substatus_V1_GetStatusRequest()
      request.appID = fixture.appID
      request.userID = users[i % users.count]
      return request
    }
    return try await countedCalls(world, Substatus_V1_StatusService.getStatus, requests, fixture.read) {
      request, response in
      // Every user has purchases; the catalog has 4 groups.
      guard response.userID == request.userID, response.groups.count >= 4 else {
        throw BudgetError("get_status: an unexpected answer: \(response)")
      }
    }
  }

  // A new user per call with a monthly subscription of 10 renewals and its renewal info (as the
  // end-to-end benchmark's ingest), the ids unique in the run.
  let importTransactions = MeasuredPath(name: "import_transactions_10", calls: 50 * scale) { first, n in
    let requests = (first..<first + n).map { i in
      var rng = SplitMix64(state: 0x1_0000 &+ UInt64(i))
      var request = Substatus_V1_ImportTransactionsRequest()
      request.appID = fixture.appID
      request.userID = Fixture.uuid(&rng)
      let g = i % 4
      request.transactions = Fixture.chain(
        product: Fixture.productID(g, 1), group: Fixture.groupID(g), periodMs: Fixture.periods[1].ms, count: 10,
        lastExpires: Fixture.now + Int64(1 + i % 25) * Fixture.day, trial: true, firstID: 1_000_000 + i * 32)
      request.renewalInfos = [Fixture.renewal(of: request.transactions[9], autoRenew: true)]
      return request
    }
    return try await countedCalls(world, Substatus_V1_IngestService.importTransactions, requests, fixture.ingest) {
      _, response in
      guard response.transactionResults.count == 10, response.transactionResults.allSatisfy({ $0.outcome == .created })
      else { throw BudgetError("import_transactions_10: not 10 created: \(response)") }
    }
  }

  // DID_RENEW: each call renews, once, a subscription of 10 transactions made for it (a history
  // that grew from round to round would cost more each round).
  let chains = fixture.chains
  let notification = MeasuredPath(name: "notification_v1", calls: 50 * scale) { first, n in
    guard first + n <= chains.count else {
      throw BudgetError("notification_v1: \(chains.count) subscriptions for calls up to \(first + n)")
    }
    let requests = (first..<first + n).map { i in
      let chain = chains[i]
      let at = chain.expiresMs
      let expires = at + Fixture.periods[1].ms
      let transaction = """
        {"quantity":"1","product_id":"\(chain.productID)","transaction_id":"\(Fixture.transactionID(50_000_000 + i))",\
        "original_transaction_id":"\(chain.originalTransactionID)","purchase_date_ms":"\(at)",\
        "original_purchase_date_ms":"\(at)","expires_date_ms":"\(expires)","is_trial_period":"false",\
        "is_in_intro_offer_period":"false","web_order_line_item_id":"\(Fixture.transactionID(60_000_000 + i))",\
        "in_app_ownership_type":"PURCHASED","subscription_group_identifier":"\(chain.groupID)"}
        """
      let body = """
        {"notification_type":"DID_RENEW","password":"\(BudgetWorld.sharedSecret)","environment":"PROD",\
        "bid":"\(BudgetWorld.bundleID)","auto_renew_status":"true","auto_renew_product_id":"\(chain.productID)",\
        "unified_receipt":{"status":0,"environment":"Production","latest_receipt_info":[\(transaction)],\
        "pending_renewal_info":[{"auto_renew_product_id":"\(chain.productID)","product_id":"\(chain.productID)",\
        "original_transaction_id":"\(chain.originalTransactionID)","auto_renew_status":"1"}]}}
        """
      return HTTPRequest(
        method: "POST", path: "/v1/apps/\(fixture.appID)/apple/notifications",
        headers: ["Content-Type": "application/json"], body: Array(body.utf8))
    }
    let applied = Array(#"{"status":"applied"}"#.utf8)
    return try await counting(calls: n) {
      for request in requests {
        let response = await world.notifications.respond(to: request)
        guard response.status == 200, response.body == applied else {
          throw BudgetError(
            "notification_v1: HTTP \(response.status): \(String(decoding: response.body, as: UTF8.self))")
        }
      }
    }
  }

  return [
    eligibility(name: "check_eligibility_1x20", users: 1, calls: 50 * scale),
    eligibility(name: "check_eligibility_50x20", users: 50, calls: 5 * scale),
    getStatus, importTransactions, notification,
  ]
}
