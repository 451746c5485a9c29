import Foundation
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusServiceAPI
import SubstatusServiceCore
import SubstatusWire

// MARK: IngestService

extension SubstatusService: Substatus_V1_IngestService.ServiceProtocol {
  public func submitReceipt(_ request: Substatus_V1_SubmitReceiptRequest, _ context: ServerContext) async throws -> Substatus_V1_SubmitReceiptResponse {
    let cached = try await app(request.appID, context)
    try requireID(request.userID, "user_id", limits: limits)
    guard !request.receiptData.isEmpty else { throw invalidArgument("receipt_data", "must not be empty") }
    guard request.receiptData.utf8.count <= 4 << 20 else { throw invalidArgument("receipt_data", "larger than 4 MiB") }
    // The modern path: an app with an In-App Purchase key syncs from the App Store Server API.
    if let synced = try await submitReceiptThroughServerAPI(request, cached) { return synced }
    let secrets = try await stored { () throws(StoreError) in try await catalogStore.sharedSecrets(appId: request.appID) }
    guard let secret = secrets?.current.secret else {
      throw RPCError(code: .failedPrecondition, message: "app \(ErrorText.quoted(request.appID)) has no shared secret: set one with SetSharedSecret")
    }
    let started = environment.clock.monotonicNow
    let response: VerifyReceiptResponse
    do {
      response = try await verifyReceipt.verify(
        receiptData: request.receiptData, password: secret, excludeOldTransactions: request.excludeOldTransactions)
      metrics.upstream(status: "0", seconds: (environment.clock.monotonicNow - started).seconds)
    } catch {
      metrics.upstream(status: error.status.map { String($0.code) } ?? "error", seconds: (environment.clock.monotonicNow - started).seconds)
      switch error.kind {
      case .wrongSharedSecret:
        throw RPCError(code: .failedPrecondition, message: "Apple rejected the shared secret of app \(ErrorText.quoted(request.appID)) (status 21004): set the right one with SetSharedSecret")
      case .unavailable:
        throw RPCError(code: .unavailable, message: error.message)
      case .rejected:
        throw invalidArgument("receipt_data", error.message)
      }
    }
    let ingested = try await ingestVerified(response, for: request.userID, in: cached, submission: true)
    let status = try IngestedStatus(userID: request.userID, ingested)
    try await saveReceipt(
      submitted: request.receiptData, response: response,
      user: UserKey(appId: request.appID, environment: status.environment, userId: request.userID),
      evaluation: status.evaluation)
    return status.response()
  }

  public func importReceiptResponse(_ request: Substatus_V1_ImportReceiptResponseRequest, _ context: ServerContext) async throws -> Substatus_V1_ImportReceiptResponseResponse {
    let cached = try await app(request.appID, context)
    try requireID(request.userID, "user_id", limits: limits)
    guard !request.verifyReceiptResponseJson.isEmpty else {
      throw invalidArgument("verify_receipt_response_json", "must not be empty")
    }
    let response: VerifyReceiptResponse
    do {
      response = try VerifyReceiptResponse(parsing: request.verifyReceiptResponseJson)
    } catch {
      if let status = error.verifyReceiptStatus, status.action == .checkSharedSecret {
        throw RPCError(code: .failedPrecondition, message: "the response has status 21004: the shared secret used to obtain it was wrong")
      }
      let field = error.field.map { "verify_receipt_response_json.\($0)" } ?? "verify_receipt_response_json"
      throw invalidArgument(field, error.message)
    }
    return try IngestedStatus(
      userID: request.userID, try await ingestVerified(response, for: request.userID, in: cached, submission: true)
    ).response()
  }

  /// What SubmitReceipt and ImportReceiptResponse answer: the user's fresh status and counts.
  struct IngestedStatus {
    var userID: String
    var environment: SubscriptionDomain.Environment
    var total: Int
    var written: Int
    var evaluation: SubscriptionEvaluation
    /// Original transactions not stored for the user (purchase sharing).
    var refused: [String] = []

    init(
      userID: String, environment: SubscriptionDomain.Environment, total: Int, written: Int,
      evaluation: SubscriptionEvaluation, refused: [String] = []
    ) {
      self.userID = userID
      self.environment = environment
      self.total = total
      self.written = written
      self.evaluation = evaluation
      self.refused = refused
    }

    /// A submission's answer. A submission writes whether or not the user was stored, so its
    /// ingest always evaluates; only a background refresh finds a user erased meanwhile.
    init(userID: String, _ ingested: VerifiedIngest) throws(RPCError) {
      guard let evaluation = ingested.evaluation else {
        throw RPCError(code: .internal, message: "user \(ErrorText.quoted(userID)) was erased while its receipt was ingested")
      }
      self.init(
        userID: userID, environment: ingested.environment, total: ingested.received, written: ingested.written,
        evaluation: evaluation, refused: ingested.refused)
    }

    func response<R: IngestedStatusResponse>() -> R {
      var out = R()
      out.userID = userID
      out.groups = evaluation.groups.map(\.wire)
      out.entitlements = evaluation.entitlements.map(\.wire)
      out.asOfMs = evaluation.time
      out.environment = environment.wire
      out.transactionCount = Int32(clamping: total)
      out.storedTransactionCount = Int32(clamping: written)
      out.refusedOriginalTransactions = refused.map(SubstatusService.refusedOriginalTransaction)
      return out
    }
  }

  /// Stores a verifyReceipt body's purchase data for a user and evaluates the fresh history.
  /// `submission`: the user submitted it now (the app's purchase sharing applies); false for the
  /// background refresh of a stored receipt, which changes no owner and writes nothing for a user
  /// erased meanwhile (then no history is read and the result has no evaluation).
  package func ingestVerified(_ response: VerifyReceiptResponse, for userId: String, in cached: CachedApp, submission: Bool)
    async throws(RPCError) -> VerifiedIngest
  {
    let environment = response.environment ?? .production
    let user = UserKey(appId: cached.app.appId, environment: environment, userId: userId)
    let summary = try await stored { () throws(StoreError) in
      try await purchaseStore.ingest([
        UserPurchases(
          user: user, transactions: response.transactions, renewalInfos: response.pendingRenewalInfo,
          renewalInfoSnapshot: response.renewalInfoSnapshot, submittedMs: submission ? self.environment.now() : nil,
          // A refresh of a stored receipt must not bring back a user erased meanwhile.
          onlyIfStored: !submission)
      ], atMs: self.environment.now())
    }
    metrics.ingested(summary.transactionsWritten)
    metrics.received(response.transactions)
    writeBackAppAccountTokens(summary.transfers)
    if summary.eventsAppended > 0 { eventsAppended(summary.eventsAppended, source: "ingest") }
    var result = VerifiedIngest(
      environment: environment, received: response.transactions.count, written: summary.transactionsWritten,
      evaluation: nil, refused: summary.refused.map(\.originalTransactionId))
    if summary.erasedMeanwhile.contains(user) { return result }
    let history = try await owning(try await stored { () throws(StoreError) in try await purchaseStore.history(of: user) }, cached)
    result.evaluation = evaluate(history, cached, at: self.environment.now())
    return result
  }

  public func importTransactions(_ request: Substatus_V1_ImportTransactionsRequest, _ context: ServerContext) async throws -> Substatus_V1_ImportTransactionsResponse {
    let cached = try await app(request.appID, context)
    try requireID(request.userID, "user_id", limits: limits)
    guard !request.transactions.isEmpty || !request.renewalInfos.isEmpty else {
      throw invalidArgument("transactions", "transactions and renewal_infos are both empty")
    }
    guard request.transactions.count <= limits.maxImportItems else {
      throw batchTooLarge("transactions", limit: limits.maxImportItems, count: request.transactions.count)
    }
    guard request.renewalInfos.count <= limits.maxImportItems else {
      throw batchTooLarge("renewal_infos", limit: limits.maxImportItems, count: request.renewalInfos.count)
    }
    // Validate each item on its own: one bad item is reported, the others are stored.
    var transactionResults: [Substatus_V1_TransactionImportResult] = []
    var accepted: [SubscriptionDomain.Environment: [SubscriptionDomain.Transaction]] = [:]
    for (n, wire) in request.transactions.enumerated() {
      var result = Substatus_V1_TransactionImportResult()
      result.transactionID = wire.transactionID
      do {
        let environment = try SubscriptionDomain.Environment(wire: wire.environment)
        accepted[environment, default: []].append(try SubscriptionDomain.Transaction(wire: wire, environment: environment, field: "transactions[\(n)]"))
      } catch {
        result.outcome = .rejected
        result.error = itemError(error)
      }
      transactionResults.append(result)
    }
    var renewalResults: [Substatus_V1_RenewalInfoImportResult] = []
    var acceptedRenewals: [SubscriptionDomain.Environment: [RenewalInfo]] = [:]
    for (n, wire) in request.renewalInfos.enumerated() {
      var result = Substatus_V1_RenewalInfoImportResult()
      result.originalTransactionID = wire.originalTransactionID
      do {
        let environment = try SubscriptionDomain.Environment(wire: wire.environment)
        acceptedRenewals[environment, default: []].append(try RenewalInfo(wire: wire, environment: environment, field: "renewal_infos[\(n)]"))
      } catch {
        result.outcome = .rejected
        result.error = itemError(error)
      }
      renewalResults.append(result)
    }
    let now = environment.now()
    let batch = Set(accepted.keys).union(acceptedRenewals.keys).sorted { $0.rawValue < $1.rawValue }.map {
      UserPurchases(
        user: UserKey(appId: cached.app.appId, environment: $0, userId: request.userID),
        transactions: accepted[$0] ?? [], renewalInfos: acceptedRenewals[$0] ?? [], submittedMs: now)
    }
    let outcomes = try await ingestWithOutcomes(batch)
    outcomes.fill(&transactionResults, &renewalResults)
    var response = Substatus_V1_ImportTransactionsResponse()
    response.transactionResults = transactionResults
    response.renewalInfoResults = renewalResults
    return response
  }

  /// What an ingest did to each item, relative to what was stored before it.
  struct ItemOutcomes {
    var transactions: [String: Substatus_V1_ImportOutcome] = [:]
    var renewalInfos: [String: Substatus_V1_ImportOutcome] = [:]
    /// Transaction ids not stored because another user owns their original transaction, with it.
    var refusedTransactions: [String: String] = [:]
    /// Original transactions refused (purchase sharing), in the store's order.
    var refused: [String] = []
    /// Users of `onlyIfStored` updates erased since they were read: nothing of theirs was written.
    var erasedMeanwhile: [UserKey] = []

    /// Sets the outcome of every result that was not rejected; refused items become rejected
    /// with OWNED_BY_ANOTHER_USER.
    func fill(_ transactionResults: inout [Substatus_V1_TransactionImportResult], _ renewalResults: inout [Substatus_V1_RenewalInfoImportResult]) {
      let refusedIds = Set(refused)
      for i in transactionResults.indices where transactionResults[i].outcome != .rejected {
        if let otid = refusedTransactions[transactionResults[i].transactionID] {
          transactionResults[i].outcome = .rejected
          transactionResults[i].error = SubstatusService.ownedByAnotherUser(otid)
          continue
        }
        transactionResults[i].outcome = transactions[transactionResults[i].transactionID] ?? .unchanged
      }
      for i in renewalResults.indices where renewalResults[i].outcome != .rejected {
        if refusedIds.contains(renewalResults[i].originalTransactionID) {
          renewalResults[i].outcome = .rejected
          renewalResults[i].error = SubstatusService.ownedByAnotherUser(renewalResults[i].originalTransactionID)
          continue
        }
        renewalResults[i].outcome = renewalInfos[renewalResults[i].originalTransactionID] ?? .unchanged
      }
    }
  }

  /// Stores a batch in one durable commit and tells, per transaction id and original transaction
  /// id, whether it was created, updated or unchanged (a newer copy that says the same is
  /// unchanged).
  func ingestWithOutcomes(_ batch: [UserPurchases]) async throws(RPCError) -> ItemOutcomes {
    var outcomes = ItemOutcomes()
    for purchases in batch {
      let history = try await stored { () throws(StoreError) in try await purchaseStore.history(of: purchases.user) }
      let existing = Dictionary(history.transactions.map { ($0.transactionId, $0) }, uniquingKeysWith: { $1 })
      for t in purchases.transactions {
        outcomes.transactions[t.transactionId] = existing[t.transactionId].map { !t.supersedes($0) || t.saysSame(as: $0) ? .unchanged : .updated } ?? .created
      }
      let existingRenewals = Dictionary(history.renewalInfos.map { ($0.originalTransactionId, $0) }, uniquingKeysWith: { $1 })
      for r in purchases.renewalInfos {
        outcomes.renewalInfos[r.originalTransactionId] =
          existingRenewals[r.originalTransactionId].map { !r.supersedes($0) || r.saysSame(as: $0) ? .unchanged : .updated } ?? .created
      }
    }
    let summary = try await stored { () throws(StoreError) in try await purchaseStore.ingest(batch, atMs: self.environment.now()) }
    metrics.ingested(summary.transactionsWritten)
    writeBackAppAccountTokens(summary.transfers)
    for purchases in batch { metrics.received(purchases.transactions) }
    if summary.eventsAppended > 0 { eventsAppended(summary.eventsAppended, source: "ingest") }
    outcomes.refused = summary.refused.map(\.originalTransactionId)
    outcomes.erasedMeanwhile = summary.erasedMeanwhile
    let refused = Set(summary.refused.map { [$0.user.environment.rawValue, $0.originalTransactionId] })
    for purchases in batch {
      for t in purchases.transactions where refused.contains([purchases.user.environment.rawValue, t.originalTransactionId]) {
        outcomes.refusedTransactions[t.transactionId] = t.originalTransactionId
      }
    }
    return outcomes
  }

  func itemError(_ error: RPCError) -> Substatus_V1_ItemError {
    var e = Substatus_V1_ItemError()
    e.code = Int32(error.code.rawValue)
    e.message = error.message
    // The field comes from the error's google.rpc.BadRequest (see `invalidArgument`), not its text.
    if let details = error.metadata.firstBinary(forKey: "grpc-status-details-bin"),
      let status = try? Google_Rpc_Status(serializedBytes: details),
      let badRequest = status.details.lazy.compactMap({ try? $0.unpack(Google_Rpc_BadRequest.self) }).first,
      let violation = badRequest.fieldViolations.first
    {
      e.field = violation.field
    }
    return e
  }
}

// MARK: EligibilityService

extension SubstatusService: Substatus_V1_EligibilityService.ServiceProtocol, Substatus_V1_StatusService.ServiceProtocol {
  /// The users of a CheckEligibility call read and evaluated between two yields to the event loop.
  static let eligibilitySlice = 8

  public func checkEligibility(_ request: Substatus_V1_CheckEligibilityRequest, _ context: ServerContext) async throws -> Substatus_V1_CheckEligibilityResponse {
    let cached = try await app(request.appID, context)
    guard !request.queries.isEmpty else { throw invalidArgument("queries", "must not be empty") }
    guard request.queries.count <= limits.maxEligibilityQueries else {
      throw batchTooLarge("queries", limit: limits.maxEligibilityQueries, count: request.queries.count)
    }
    var items = 0
    for (n, q) in request.queries.enumerated() {
      guard q.productIDs.count <= limits.maxProductsPerQuery else {
        throw batchTooLarge("queries[\(n)].product_ids", limit: limits.maxProductsPerQuery, count: q.productIDs.count, per: "user")
      }
      items += q.productIDs.isEmpty ? cached.catalog.products.count : q.productIDs.count
    }
    guard items <= limits.maxEligibilityItems else {
      throw batchTooLarge("queries", limit: limits.maxEligibilityItems, count: items, per: "call (user × product answers)")
    }
    let environment = try SubscriptionDomain.Environment(wire: request.environment)
    let time = try asOf(request.asOfMs)
    let atNow = request.asOfMs == 0 || request.asOfMs == self.environment.now()
    // Per-user problems are answered per user; the others are read in one store call.
    var valid: [String] = []
    var errors: [Int: RPCError] = [:]
    for (n, q) in request.queries.enumerated() {
      do { try requireID(q.userID, "queries[\(n)].user_id", limits: limits); valid.append(q.userID) } catch { errors[n] = error }
    }
    let unique = valid.count > 1 ? Array(Set(valid)) : valid
    // The users' summaries in one read; the users they do not answer for are read and evaluated
    // from their histories a slice at a time (``eligibilityAnswers(of:environment:_:at:rewrite:)``).
    let slice = Self.eligibilitySlice
    let answers = unique.isEmpty
      ? [:]
      : try await verifyingNewCustomers(
        try await eligibilityAnswers(of: unique, environment: environment, cached, at: time, rewrite: atNow),
        environment: environment, cached, at: time)
    var response = Substatus_V1_CheckEligibilityResponse()
    response.asOfMs = time
    response.users.reserveCapacity(request.queries.count)
    for (n, q) in request.queries.enumerated() {
      if n > 0, n % slice == 0 { await Task.yield() }
      var user = Substatus_V1_UserEligibility()
      user.userID = q.userID
      if let error = errors[n] {
        user.error = itemError(error)
      } else if let answers = answers[q.userID] {
        let ids = q.productIDs.isEmpty ? cached.catalog.products.map(\.productId) : q.productIDs
        // Each answer is written as it is made into its message, in place in the response: no
        // array of intermediate answers, and no message copied into the array.
        user.products = Array(repeating: Substatus_V1_ProductEligibility(), count: ids.count)
        for (k, id) in ids.enumerated() {
          answers.eligibility(for: id).write(to: &user.products[k], type: cached.catalog.productType(of: id))
        }
      }
      response.users.append(user)
    }
    metrics.evaluated(users: request.queries.count, items: items)
    return response
  }
}

// MARK: StatusService

extension SubstatusService {
  func userEvaluation(appID: String, userID: String, environment wire: Substatus_V1_Environment, asOfMs: Int64, _ context: ServerContext)
    async throws(RPCError) -> UserEvaluation
  {
    let cached = try await app(appID, context)
    try requireID(userID, "user_id", limits: limits)
    let environment = try SubscriptionDomain.Environment(wire: wire)
    let time = try asOf(asOfMs)
    // The summary answers groups, entitlements and named entitlements; without one (a past
    // as_of_ms before it), the history.
    let atNow = asOfMs == 0 || asOfMs == self.environment.now()
    let answers = try await answers(of: [userID], environment: environment, cached, at: time, rewrite: atNow)
    if let answer = answers[userID], answer.summary != nil || cached.entitlements.isEmpty {
      return UserEvaluation(
        environment: environment, app: cached,
        history: UserHistory(user: UserKey(appId: appID, environment: environment, userId: userID)),
        evaluation: answer.evaluation, summary: answer.summary)
    }
    let history = try await owning(
      try await stored { () throws(StoreError) in
        try await purchaseStore.history(of: UserKey(appId: appID, environment: environment, userId: userID))
      }, cached
    ).owned(at: time)
    return UserEvaluation(environment: environment, app: cached, history: history, evaluation: evaluate(history, cached, at: time))
  }

  /// One user's evaluation with what it was made from.
  struct UserEvaluation {
    var environment: SubscriptionDomain.Environment
    var app: CachedApp
    /// The history evaluated; empty when the summary answered.
    var history: UserHistory
    var evaluation: SubscriptionEvaluation
    /// The summary that answered (it answers named entitlements too); `nil`: the history did.
    var summary: UserSummary? = nil
  }

  public func getStatus(_ request: Substatus_V1_GetStatusRequest, _ context: ServerContext) async throws -> Substatus_V1_GetStatusResponse {
    let user = try await userEvaluation(
      appID: request.appID, userID: request.userID, environment: request.environment, asOfMs: request.asOfMs, context)
    var response = Substatus_V1_GetStatusResponse()
    response.userID = request.userID
    response.groups = user.evaluation.groups.map(\.wire)
    response.entitlements = user.evaluation.entitlements.map(\.wire)
    response.namedEntitlements = try await grantingPaidApp(
      try namedEntitlements(user.evaluation, history: user.history, app: user.app, summary: user.summary),
      userId: request.userID, environment: user.environment, app: user.app, at: user.evaluation.time)
    response.asOfMs = user.evaluation.time
    response.environment = user.environment.wire
    return response
  }

  public func getEntitlements(_ request: Substatus_V1_GetEntitlementsRequest, _ context: ServerContext) async throws -> Substatus_V1_GetEntitlementsResponse {
    let user = try await userEvaluation(
      appID: request.appID, userID: request.userID, environment: request.environment, asOfMs: request.asOfMs, context)
    var response = Substatus_V1_GetEntitlementsResponse()
    response.userID = request.userID
    response.entitlements = user.evaluation.entitlements.map(\.wire)
    response.namedEntitlements = try await grantingPaidApp(
      try namedEntitlements(
        user.evaluation, history: user.history, app: user.app, filter: request.entitlementIDs, summary: user.summary),
      userId: request.userID, environment: user.environment, app: user.app, at: user.evaluation.time)
    response.asOfMs = user.evaluation.time
    response.environment = user.environment.wire
    return response
  }

  public func getTransactionHistory(_ request: Substatus_V1_GetTransactionHistoryRequest, _ context: ServerContext) async throws -> Substatus_V1_GetTransactionHistoryResponse {
    _ = try await app(request.appID, context)
    try requireID(request.userID, "user_id", limits: limits)
    let environment = try SubscriptionDomain.Environment(wire: request.environment)
    let page = try PageToken.page(size: request.pageSize, token: request.pageToken, limits: limits)
    let user = UserKey(appId: request.appID, environment: environment, userId: request.userID)
    // What the page will hold, reserved before the store is read (README "Limits").
    try reserveWorkingSet(WorkingSetEstimate.transactionPage(pageSize: page.limit, firstPage: page.cursor == nil), context)
    var response = Substatus_V1_GetTransactionHistoryResponse()
    do {
      let result = try await stored { () throws(StoreError) in try await purchaseStore.transactions(of: user, page: page) }
      response.transactions = result.items.map(\.wire)
      response.nextPageToken = PageToken.encode(result.nextCursor)
    }
    if page.cursor == nil {
      // The renewal infos come with the first page, read alone: a page of a long history never
      // decodes the whole of it.
      response.renewalInfos = try await stored { () throws(StoreError) in try await purchaseStore.renewalInfos(of: user) }.map(\.wire)
    }
    return response
  }
}

// MARK: ReportService

extension SubstatusService: Substatus_V1_ReportService.ServiceProtocol {
  public func getReport(_ request: Substatus_V1_GetReportRequest, _ context: ServerContext) async throws -> Substatus_V1_GetReportResponse {
    let cached = try await app(request.appID, context)
    let environment = try SubscriptionDomain.Environment(wire: request.environment)
    let time = try asOf(request.asOfMs)
    var counts = ReportCounts()
    var users: Int64 = 0
    var subscriptions: Int64 = 0
    var cursor: String? = nil
    repeat {
      let page = try await stored { () throws(StoreError) in
        try await purchaseStore.listUsers(appId: request.appID, environment: environment, page: PageRequest(size: 500, cursor: cursor))
      }
      let histories = try await owning(
        try await stored { () throws(StoreError) in
          try await purchaseStore.histories(appId: request.appID, environment: environment, userIds: page.items)
        }, cached)
      for h in histories {
        let evaluation = evaluate(h, cached, at: time)
        counts += evaluation.reportCounts
        users += 1
        subscriptions += Int64(evaluation.groups.filter { $0.state != .neverSubscribed }.count)
      }
      cursor = page.nextCursor
      try Task.checkCancellation()
    } while cursor != nil
    var report = Substatus_V1_Report()
    report.appID = request.appID
    report.environment = environment.wire
    report.asOfMs = time
    report.users = users
    report.subscriptions = subscriptions
    report.active = Int64(counts.active)
    report.inTrial = Int64(counts.inTrial)
    report.inIntro = Int64(counts.inIntroOffer)
    report.inGrace = Int64(counts.inGracePeriod)
    report.inBillingRetry = Int64(counts.inBillingRetry)
    report.expired = Int64(counts.expired)
    report.refunded = Int64(counts.refunded)
    report.familySharedBeneficiaries = Int64(counts.familySharedBeneficiaries)
    report.familyAccessRevoked = Int64(counts.familyAccessRevoked)
    report.assignedBeneficiaries = Int64(counts.assignedBeneficiaries)
    var response = Substatus_V1_GetReportResponse()
    response.report = report
    return response
  }
}

/// The responses of SubmitReceipt and ImportReceiptResponse share their fields (and numbers).
protocol IngestedStatusResponse {
  init()
  var userID: String { get set }
  var groups: [Substatus_V1_GroupStatus] { get set }
  var entitlements: [Substatus_V1_Entitlement] { get set }
  var asOfMs: Int64 { get set }
  var environment: Substatus_V1_Environment { get set }
  var transactionCount: Int32 { get set }
  var storedTransactionCount: Int32 { get set }
  var refusedOriginalTransactions: [Substatus_V1_RefusedOriginalTransaction] { get set }
}

extension Substatus_V1_SubmitReceiptResponse: IngestedStatusResponse {}
extension Substatus_V1_ImportReceiptResponseResponse: IngestedStatusResponse {}

extension SubstatusService {
  /// Keeps the user's receipt for the background refresh after a successful SubmitReceipt: Apple's
  /// `latest_receipt` if it sent one, else the submitted receipt; due as ``ReceiptRefreshPolicy``
  /// decides.
  func saveReceipt(
    submitted: String, response: VerifyReceiptResponse, user: UserKey,
    evaluation: SubscriptionEvaluation
  ) async throws(RPCError) {
    let receipt = StoredReceipt(
      user: user,
      receiptData: response.latestReceipt.flatMap { $0.isEmpty ? nil : $0 } ?? submitted,
      lastVerifiedMs: evaluation.time,
      nextDueMs: limits.receiptRefresh.nextDue(evaluation, response), failureCount: 0)
    try await stored { () throws(StoreError) in try await receiptStore.saveReceipt(receipt) }
  }
}
