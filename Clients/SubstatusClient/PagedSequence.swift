public import RPCCore

/// The pages of a paged list or history call (AIP-158), fetched one by one as the sequence is
/// iterated; it ends after the first page whose `next_page_token` is empty.
///
/// ```swift
/// let apps = PagedSequence(nextPageToken: \Substatus_V1_ListAppsResponse.nextPageToken) { token in
///   try await admin.listApps(pageToken: token)
/// }
/// for try await page in apps { print(page.apps.count) }
/// let everything = try await apps.collect()   // every page, in order
/// ```
public struct PagedSequence<Page: Sendable>: AsyncSequence, Sendable {
  /// The element: one page.
  public typealias Element = Page
  /// Iteration throws `RPCError`.
  public typealias Failure = RPCError

  private let fetch: @Sendable (String) async throws(RPCError) -> Page
  private let nextPageToken: @Sendable (Page) -> String

  /// Creates a sequence.
  ///
  /// - Parameters:
  ///   - nextPageToken: Reads the token of the page after a page; empty on the last page.
  ///   - fetch: Fetches the page of a token; the first page has the empty token.
  public init(
    nextPageToken: @escaping @Sendable (Page) -> String,
    fetch: @escaping @Sendable (String) async throws(RPCError) -> Page
  ) {
    self.fetch = fetch
    self.nextPageToken = nextPageToken
  }

  /// Every page, in order.
  ///
  /// - Returns: The pages.
  /// - Throws: The first `RPCError` of a page fetch.
  public func collect() async throws(RPCError) -> [Page] {
    var pages: [Page] = []
    var iterator = makeAsyncIterator()
    while let page = try await iterator.nextPage() { pages.append(page) }
    return pages
  }

  /// Fetches the pages in order.
  public struct AsyncIterator: AsyncIteratorProtocol {
    /// The element: one page.
    public typealias Element = Page
    /// Iteration throws `RPCError`.
    public typealias Failure = RPCError

    let sequence: PagedSequence
    var token: String? = ""

    /// The next page, or `nil` after the last.
    public mutating func next() async throws(RPCError) -> Page? { try await nextPage() }

    mutating func nextPage() async throws(RPCError) -> Page? {
      guard let current = token else { return nil }
      let page = try await sequence.fetch(current)
      let next = sequence.nextPageToken(page)
      if next.isEmpty || next == current {
        token = nil
      } else {
        token = next
      }
      return page
    }
  }

  /// Returns an iterator starting at the first page.
  public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(sequence: self) }
}
