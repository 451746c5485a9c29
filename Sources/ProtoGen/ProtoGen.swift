/// Namespace of the ProtoGen module; filled by its issue.
public enum ProtoGenModule {}
