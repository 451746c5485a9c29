import Testing
@testable import SubstatusWire

@Suite struct JSONMappingTests {
  @Test func canonicalNamesEnumsAndInt64Strings() throws {
    var request = Substatus_V1_CheckEligibilityRequest()
    request.appID = "app_1"
    request.asOfMs = 1_700_000_000_000
    request.environment = .sandbox
    var query = Substatus_V1_EligibilityQuery()
    query.userID = "u1"
    query.productIDs = ["pro.monthly", "pro.yearly"]
    request.queries = [query]
    #expect(request.jsonString() == #"{"appId":"app_1","queries":[{"userId":"u1","productIds":["pro.monthly","pro.yearly"]}],"asOfMs":"1700000000000","environment":"ENVIRONMENT_SANDBOX"}"#)
    #expect(try Substatus_V1_CheckEligibilityRequest(jsonString: request.jsonString()) == request)
  }

  @Test func acceptsOriginalNamesNumbersForInt64AndEnumNumbers() throws {
    let request = try Substatus_V1_CheckEligibilityRequest(
      jsonString: #"{"app_id":"a","as_of_ms":1700000000000,"environment":2,"queries":null}"#)
    #expect(request.appID == "a")
    #expect(request.asOfMs == 1_700_000_000_000)
    #expect(request.environment == .sandbox)
  }

  @Test("rejects JSON that does not fit, naming the field", arguments: [
    (#"{"appId":"a","bogus":1}"#, "bogus"),
    (#"{"appId":5}"#, "appId"),
    (#"{"asOfMs":"12x"}"#, "asOfMs"),
    (#"{"environment":"ENVIRONMENT_MARS"}"#, "environment"),
    (#"{"queries":[{"userId":"u","productIds":[1]}]}"#, "productIds[0]"),
    (#"[]"#, "CheckEligibilityRequest"),
    (#"{"appId":"a""#, "invalid JSON"),
  ])
  func rejects(json: String, mentioned: String) {
    do {
      _ = try Substatus_V1_CheckEligibilityRequest(jsonString: json)
      Issue.record("accepted \(json)")
    } catch {
      #expect(error.code == .invalidJSON)
      #expect(error.message.contains(mentioned), "\(error.message)")
    }
  }

  @Test func int32RangeIsChecked() {
    #expect(throws: WireError.self) {
      try Substatus_Conformance_V1_AllTypes(jsonString: #"{"fInt32": 2147483648}"#)
    }
    #expect((try? Substatus_Conformance_V1_AllTypes(jsonString: #"{"fInt32": -2147483648, "fUint64": "18446744073709551615"}"#)) != nil)
  }

  @Test func durationAndAnyUseTheirOwnJSONForms() throws {
    var violation = Google_Rpc_BadRequest.FieldViolation()
    violation.field = "queries[0].user_id"
    violation.description = "must not be empty"
    var badRequest = Google_Rpc_BadRequest()
    badRequest.fieldViolations = [violation]
    var status = Google_Rpc_Status()
    status.code = 3
    status.details = [Google_Protobuf_Any(packing: badRequest)]
    let json = status.jsonString()
    #expect(json.contains(#""@type":"type.googleapis.com/google.rpc.BadRequest""#))
    #expect(try Google_Rpc_Status(jsonString: json) == status)
    #expect(try status.details[0].unpack(Google_Rpc_BadRequest.self) == badRequest)

    var retry = Google_Rpc_RetryInfo()
    retry.retryDelay = .init()
    retry.retryDelay?.seconds = 1
    retry.retryDelay?.nanos = 500_000_000
    #expect(retry.jsonString() == #"{"retryDelay":"1.500s"}"#)
    #expect(try Google_Rpc_RetryInfo(jsonString: #"{"retryDelay":"-0.000000001s"}"#).retryDelay?.nanos == -1)
  }
}

/// Win-back offers (docs/architecture.md rule 19) in the canonical JSON mapping: lowerCamelCase
/// names, enum value names.
@Suite struct WinBackJSONMappingTests {
  @Test func productEligibilityCarriesWinBackOffers() throws {
    var offered = Substatus_V1_WinBackOfferEligibility()
    offered.offerID = "wb.half"
    offered.eligible = true
    offered.reason = .winBackOffered
    offered.evidenceTransactionID = "1000"
    var notOffered = Substatus_V1_WinBackOfferEligibility()
    notOffered.offerID = "wb.free"
    notOffered.reason = .winBackNotOffered
    var product = Substatus_V1_ProductEligibility()
    product.productID = "pro.monthly"
    product.winBackOffers = [offered, notOffered]
    #expect(
      product.jsonString()
        == #"{"productId":"pro.monthly","winBackOffers":[{"offerId":"wb.half","eligible":true,"reason":"ELIGIBILITY_REASON_WIN_BACK_OFFERED","evidenceTransactionId":"1000"},{"offerId":"wb.free","reason":"ELIGIBILITY_REASON_WIN_BACK_NOT_OFFERED"}]}"#
    )
    #expect(try Substatus_V1_ProductEligibility(jsonString: product.jsonString()) == product)
  }

  @Test func catalogProductCarriesWinBackOfferIds() throws {
    let product = try Substatus_V1_Product(
      jsonString: #"{"productId":"pro.monthly","type":"PRODUCT_TYPE_AUTO_RENEWABLE","winBackOfferIds":["wb.half","wb.free"]}"#
    )
    #expect(product.winBackOfferIDs == ["wb.half", "wb.free"])
    #expect(
      try Substatus_V1_Product(jsonString: #"{"win_back_offer_ids":["wb.half"]}"#).winBackOfferIDs
        == ["wb.half"])
    #expect(product.jsonString().contains(#""winBackOfferIds":["wb.half","wb.free"]"#))
  }
}
