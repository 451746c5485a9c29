/// Namespace of the RPCInProcessTransport module; filled by its issue.
public enum RPCInProcessTransportModule {}
