/// Namespace of the RPCCore module; filled by its issue.
public enum RPCCoreModule {}
