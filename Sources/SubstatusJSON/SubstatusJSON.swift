/// Namespace of the SubstatusJSON module; filled by its issue.
public enum SubstatusJSONModule {}
