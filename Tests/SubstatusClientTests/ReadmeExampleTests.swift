import SubstatusClientTestKit
import RPCCore
import SubstatusClient
import SubstatusWire
import Testing

/// The README's example, verbatim from "let user" on: what a paywall backend does with the client.
func paywallExample(client: SubstatusClient) async throws -> [String] {
  var lines: [String] = []
  let user = try await client.checkEligibility(
    appID: "app_1", userID: "user-42", productIDs: ["pro.monthly", "pro.yearly"])
  for product in user.products {
    let trial = product.introductory?.eligible == true
    lines.append("\(product.productID): \(trial ? "show the free trial" : "full price")")
    if let winBack = product.winBackOffers.first(where: \.eligible) {
      lines.append("  Apple offers the win-back offer \(winBack.offerID)")
    }
  }
  let status = try await client.status(appID: "app_1", userID: "user-42")
  if status.groups.contains(where: \.billingIssue) {
    lines.append("ask the user to update their payment method")
  }
  for try await page in client.transactionHistoryPages(appID: "app_1", userID: "user-42") {
    for transaction in page.transactions {
      lines.append("\(transaction.transactionID) \(transaction.productID)")
    }
  }
  return lines
}

@Suite("README example")
struct ReadmeExampleTests {
  @Test("the README example runs against a server")
  func readme() async throws {
    let log = CallLog()
    var router = RPCRouter()
    router.fake(Substatus_V1_EligibilityService.checkEligibility, log: log) { request, _ in
      var response = Substatus_V1_CheckEligibilityResponse()
      var user = Substatus_V1_UserEligibility()
      user.userID = request.queries[0].userID
      user.products = request.queries[0].productIDs.map { id in
        var product = Substatus_V1_ProductEligibility()
        product.productID = id
        var intro = Substatus_V1_OfferEligibility()
        intro.eligible = id == "pro.yearly"
        product.introductory = intro
        if id == "pro.monthly" {
          var notOffered = Substatus_V1_WinBackOfferEligibility()
          notOffered.offerID = "pro.comeback.free"
          notOffered.reason = .winBackNotOffered
          var offered = Substatus_V1_WinBackOfferEligibility()
          offered.offerID = "pro.comeback.half"
          offered.eligible = true
          offered.reason = .winBackOffered
          product.winBackOffers = [notOffered, offered]
        }
        return product
      }
      response.users = [user]
      return response
    }
    var status = Substatus_V1_GetStatusResponse()
    var group = Substatus_V1_GroupStatus()
    group.billingIssue = true
    status.groups = [group]
    router.fake(Substatus_V1_StatusService.getStatus, log: log, reply: status)
    var history = Substatus_V1_GetTransactionHistoryResponse()
    var transaction = Substatus_V1_Transaction()
    transaction.transactionID = "1000"
    transaction.productID = "pro.monthly"
    history.transactions = [transaction]
    router.fake(Substatus_V1_StatusService.getTransactionHistory, log: log, reply: history)
    let lines = try await withFakeServer(router) { transport in
      try await paywallExample(client: SubstatusClient(transport: transport, apiKey: "sk_read"))
    }
    #expect(
      lines == [
        "pro.monthly: full price", "  Apple offers the win-back offer pro.comeback.half",
        "pro.yearly: show the free trial",
        "ask the user to update their payment method",
        "1000 pro.monthly",
      ])
  }
}
