/// Namespace of the HTTPServer module; filled by its issue.
public enum HTTPServerModule {}
