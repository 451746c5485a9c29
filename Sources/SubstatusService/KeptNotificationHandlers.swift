// Rule 25's kept notifications, read (docs/architecture.md "Domain rules", "The API"):
// `AdminService.ListKeptNotifications` pages an app's kept V2 notifications by received time.
import Foundation
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusServiceCore
import SubstatusWire

extension SubstatusService {
  /// `AdminService.ListKeptNotifications`: the app's kept V2 notifications, oldest received
  /// first, filtered by type and received time, paged by an opaque token naming the last one
  /// returned (`received_ms:sequence`; a full page always has one, so the last page may be empty).
  public func listKeptNotifications(
    _ request: Substatus_V1_ListKeptNotificationsRequest, _ context: ServerContext
  ) async throws -> Substatus_V1_ListKeptNotificationsResponse {
    _ = try await app(request.appID, context)
    if request.notificationType.utf8.count > 256 {
      throw invalidArgument("notification_type", "longer than 256 bytes")
    }
    let from = request.receivedFromMs > 0 ? request.receivedFromMs : nil
    let before = request.receivedBeforeMs != 0 ? request.receivedBeforeMs : nil
    if let before, before <= (from ?? 0) {
      throw invalidArgument("received_before_ms", "must be after received_from_ms")
    }
    let page = try PageToken.page(size: request.pageSize, token: request.pageToken, limits: limits)
    var after: KeptNotificationPosition?
    if let cursor = page.cursor {
      let parts = cursor.split(separator: ":")
      guard parts.count == 2, let received = Int64(parts[0]), let sequence = Int64(parts[1]) else {
        throw invalidArgument("page_token", "not a page token returned by this service")
      }
      after = KeptNotificationPosition(receivedMs: received, sequence: sequence)
    }
    let query = KeptNotificationQuery(
      appId: request.appID, notificationType: request.notificationType.isEmpty ? nil : request.notificationType,
      receivedFromMs: from, receivedBeforeMs: before, after: after, limit: page.size)
    let found = try await stored { () throws(StoreError) in try await keptNotificationRetentionStore.listKeptNotifications(query) }
    // A full page may be followed by more: its last one is where the next page starts.
    let more = found.count >= query.pageSize
    var response = Substatus_V1_ListKeptNotificationsResponse()
    response.notifications = found.map { n in
      var wire = Substatus_V1_KeptNotification()
      wire.notificationUUID = n.notificationUUID
      wire.notificationType = n.notificationType
      wire.subtype = n.subtype ?? ""
      wire.environment = n.environment.wire
      wire.signedDateMs = n.signedDateMs ?? 0
      wire.receivedMs = n.receivedMs
      wire.signedPayload = n.signedPayload
      return wire
    }
    if more, let last = found.last {
      response.nextPageToken = PageToken.encode("\(last.receivedMs):\(last.sequence)")
    }
    return response
  }
}
