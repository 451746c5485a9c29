import RPCCore
import SubscriptionStorage
import SubscriptionStorageTesting
import SubstatusServiceAPI
import SubstatusWire
import Testing
@testable import SubstatusService

/// The service registers, through the generated code, every method of every substatus.v1 service
/// that `Protos/` declares, and runs the hot path on the transport's I/O thread.
@Suite struct RegistrationTests {
  @Test func everyMethodOfEverySubstatusServiceIsRegistered() {
    var router = RPCRouter()
    SubstatusService(store: InMemoryStore()).register(in: &router)
    let declared = Set(ProtoFiles.all.filter { $0.package == "substatus.v1" }.flatMap(\.services))
    #expect(Set(router.serviceNames) == declared)
    let methods = [
      Substatus_V1_TenantService.methodPaths, Substatus_V1_AdminService.methodPaths,
      Substatus_V1_IngestService.methodPaths, Substatus_V1_EligibilityService.methodPaths,
      Substatus_V1_StatusService.methodPaths, Substatus_V1_ReportService.methodPaths,
      Substatus_V1_EventService.methodPaths,
    ].flatMap { $0 }
    #expect(Set(methods.map { String($0.dropFirst().prefix { $0 != "/" }) }) == declared)
    #expect(router.methods == methods.sorted())
    for method in methods {
      let hot = [
        Substatus_V1_EligibilityService.checkEligibility.path, Substatus_V1_StatusService.getStatus.path,
        Substatus_V1_StatusService.getEntitlements.path,
      ].contains(method)
      #expect(router.execution(for: method) == (hot ? .transportThread : .pool), "\(method)")
    }
  }
}
