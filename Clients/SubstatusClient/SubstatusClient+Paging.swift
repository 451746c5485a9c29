import RPCCore
public import SubstatusWire

extension SubstatusClient {
  /// Every page of the tenants (`TenantService.ListTenants`; operator key), fetched lazily.
  ///
  /// ```swift
  /// let tenants = try await operator.tenantPages().collect().flatMap(\.tenants)
  /// ```
  ///
  /// - Parameters:
  ///   - pageSize: The page size; 0 is the server's default (50).
  ///   - options: Deadline (per page) and metadata.
  /// - Returns: The pages, in order.
  public func tenantPages(
    pageSize: Int32 = 0, options: SubstatusCallOptions = SubstatusCallOptions()
  ) -> PagedSequence<Substatus_V1_ListTenantsResponse> {
    PagedSequence(nextPageToken: \.nextPageToken) { token throws(RPCError) in
      try await listTenants(pageSize: pageSize, pageToken: token, options: options)
    }
  }

  /// Every page of the tenant's apps (`AdminService.ListApps`), fetched lazily.
  ///
  /// ```swift
  /// for try await page in admin.appPages() {
  ///   for app in page.apps { print(app.appID, app.bundleID) }
  /// }
  /// ```
  ///
  /// - Parameters:
  ///   - pageSize: The page size; 0 is the server's default (50).
  ///   - options: Deadline (per page) and metadata.
  /// - Returns: The pages, in order.
  public func appPages(
    pageSize: Int32 = 0, options: SubstatusCallOptions = SubstatusCallOptions()
  ) -> PagedSequence<Substatus_V1_ListAppsResponse> {
    PagedSequence(nextPageToken: \.nextPageToken) { token throws(RPCError) in
      try await listApps(pageSize: pageSize, pageToken: token, options: options)
    }
  }

  /// Every page of the app's catalog (`AdminService.ListProducts`), fetched lazily.
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - subscriptionGroupID: When not empty, only this group's products.
  ///   - pageSize: The page size; 0 is the server's default (50).
  ///   - options: Deadline (per page) and metadata.
  /// - Returns: The pages, in order.
  public func productPages(
    appID: String, subscriptionGroupID: String = "", pageSize: Int32 = 0,
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) -> PagedSequence<Substatus_V1_ListProductsResponse> {
    PagedSequence(nextPageToken: \.nextPageToken) { token throws(RPCError) in
      try await listProducts(
        appID: appID, subscriptionGroupID: subscriptionGroupID, pageSize: pageSize,
        pageToken: token, options: options)
    }
  }

  /// Every page of the tenant's API keys (`AdminService.ListApiKeys`), fetched lazily.
  ///
  /// - Parameters:
  ///   - showRevoked: Whether revoked keys are listed too.
  ///   - pageSize: The page size; 0 is the server's default (50).
  ///   - options: Deadline (per page) and metadata.
  /// - Returns: The pages, in order.
  public func apiKeyPages(
    showRevoked: Bool = false, pageSize: Int32 = 0,
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) -> PagedSequence<Substatus_V1_ListApiKeysResponse> {
    PagedSequence(nextPageToken: \.nextPageToken) { token throws(RPCError) in
      try await listApiKeys(
        showRevoked: showRevoked, pageSize: pageSize, pageToken: token, options: options)
    }
  }
}
