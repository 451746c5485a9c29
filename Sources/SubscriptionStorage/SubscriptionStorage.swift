/// Namespace of the SubscriptionStorage module; filled by its issue.
public enum SubscriptionStorageModule {}
