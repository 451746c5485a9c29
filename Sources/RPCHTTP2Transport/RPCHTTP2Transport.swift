/// Namespace of the RPCHTTP2Transport module; filled by its issue.
public enum RPCHTTP2TransportModule {}
