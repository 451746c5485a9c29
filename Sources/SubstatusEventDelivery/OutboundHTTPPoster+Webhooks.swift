import OutboundHTTP
import SubstatusServiceCore

extension OutboundHTTPPoster {
  /// For webhooks: no redirect (a receiver cannot send the POST on to an address the policy
  /// refuses; the 3xx is the answer), at most ``WebhookDispatcher/maxResponseBytes`` of an answer
  /// read (the status counts, the body is cut), and every address checked by
  /// ``WebhookURLPolicy/checkAddress(_:)`` as it is connected to, so a DNS answer that changes
  /// after any earlier check is never connected to unchecked.
  public static func webhooks(client: OutboundHTTPClient = .shared, policy: WebhookURLPolicy) -> OutboundHTTPPoster {
    OutboundHTTPPoster(
      client: client, maxRedirects: 0, maxResponseBytes: WebhookDispatcher.maxResponseBytes,
      returnsTruncatedAnswers: true, addressPolicy: policy.outboundAddressPolicy)
  }
}

extension WebhookURLPolicy {
  /// This policy's address check (``checkAddress(_:)``) as the outbound client calls it at
  /// connect time: `nil` allows, a reason refuses.
  public var outboundAddressPolicy: OutboundAddressPolicy {
    let policy = self
    return { address in
      guard let ip = WebhookIPAddress(bytes: address.bytes) else { return "an address of an unknown family" }
      do throws(WebhookURLRejection) {
        try policy.checkAddress(ip)
        return nil
      } catch {
        return error.reason
      }
    }
  }
}
