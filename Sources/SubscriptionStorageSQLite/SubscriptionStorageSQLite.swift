/// Namespace of the SubscriptionStorageSQLite module; filled by its issue.
public enum SubscriptionStorageSQLiteModule {}
