/// Namespace of the SubscriptionDomain module; filled by its issue.
public enum SubscriptionDomainModule {}
