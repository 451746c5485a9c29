public import RPCCore
public import SubstatusWire

// MARK: - Kept notifications (rule 25): every verified V2 notification, as Apple sent it

extension SubstatusClient {
  /// One page of the app's kept App Store Server Notifications V2
  /// (`AdminService.ListKeptNotifications`), oldest received first. Idempotent.
  ///
  /// ```swift
  /// var token = ""
  /// repeat {
  ///   let page = try await admin.listKeptNotifications(appID: app, notificationType: "DID_RENEW", pageToken: token)
  ///   for n in page.notifications { print(n.receivedMs, n.notificationType, n.notificationUUID) }
  ///   token = page.nextPageToken
  /// } while !token.isEmpty
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - notificationType: Only this Apple `notificationType`; empty: every type.
  ///   - receivedFromMs: Only those received at or after this time (UNIX ms); 0: no bound.
  ///   - receivedBeforeMs: Only those received before this time (UNIX ms); 0: no bound.
  ///   - pageSize: At most this many (0: the server's default, 50; at most 1000).
  ///   - pageToken: The previous page's `nextPageToken`; empty for the first page.
  ///   - options: Deadline and metadata.
  /// - Returns: The page and the token of the next one (empty on the last page).
  /// - Throws: `RPCError` (`NOT_FOUND` for an unknown app, `INVALID_ARGUMENT` naming a bad field).
  public func listKeptNotifications(
    appID: String, notificationType: String = "", receivedFromMs: Int64 = 0, receivedBeforeMs: Int64 = 0,
    pageSize: Int32 = 0, pageToken: String = "", options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_ListKeptNotificationsResponse {
    var request = Substatus_V1_ListKeptNotificationsRequest()
    request.appID = appID
    request.notificationType = notificationType
    request.receivedFromMs = receivedFromMs
    request.receivedBeforeMs = receivedBeforeMs
    request.pageSize = pageSize
    request.pageToken = pageToken
    return try await service(
      Substatus_V1_AdminService.Client.self, idempotency: .idempotent, options: options
    ).listKeptNotifications(request)
  }
}
