#pragma once
#include <stdint.h>
#include <sys/socket.h>
#include <microhttpd.h>

// Thin shims over libmicrohttpd's variadic entry points, which Swift cannot call directly.
// `MHD_OPTION_STRICT_FOR_CLIENT` is left at 0: in libmicrohttpd 0.9.75 it answers a missing `Host`
// with its 400 written twice and closes on a space in the target without an answer; the strict
// framing rules are HTTPServer's (HTTPFraming.swift).
// Declarations and trivial forwarding only; all policy lives in the Swift HTTPServer module.

/// `MHD_OPTION_URI_LOG_CALLBACK`: sees each request's target as sent (before percent-decoding);
/// its result becomes the request's initial `*con_cls` (HTTPServer returns NULL).
typedef void *(*substatus_mhd_uri_log)(void *cls, const char *uri, struct MHD_Connection *connection);

/// Starts a daemon bound to `addr` with the options HTTPServer uses.
static inline struct MHD_Daemon *substatus_mhd_start(
    unsigned int flags, const struct sockaddr *addr, unsigned int connection_limit,
    unsigned int connection_timeout_seconds, size_t connection_memory_limit,
    unsigned int per_ip_connection_limit, MHD_AcceptPolicyCallback accept_policy, void *accept_policy_cls,
    substatus_mhd_uri_log uri_log, void *uri_log_cls,
    MHD_AccessHandlerCallback handler, void *handler_cls,
    MHD_RequestCompletedCallback completed, void *completed_cls,
    MHD_NotifyConnectionCallback notify, void *notify_cls) {
  return MHD_start_daemon(
      flags, 0, accept_policy, accept_policy_cls, handler, handler_cls,
      MHD_OPTION_SOCK_ADDR, addr,
      MHD_OPTION_CONNECTION_LIMIT, connection_limit,
      MHD_OPTION_CONNECTION_TIMEOUT, connection_timeout_seconds,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, connection_memory_limit,
      MHD_OPTION_NOTIFY_COMPLETED, completed, completed_cls,
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip_connection_limit,
      MHD_OPTION_NOTIFY_CONNECTION, notify, notify_cls,
      MHD_OPTION_URI_LOG_CALLBACK, uri_log, uri_log_cls,
      MHD_OPTION_END);
}

/// Like substatus_mhd_start, with HTTPS (GnuTLS): PEM certificate chain and key in memory
/// (libmicrohttpd loads them during the call; they need not outlive it).
static inline struct MHD_Daemon *substatus_mhd_start_tls(
    unsigned int flags, const struct sockaddr *addr, unsigned int connection_limit,
    unsigned int connection_timeout_seconds, size_t connection_memory_limit,
    unsigned int per_ip_connection_limit, MHD_AcceptPolicyCallback accept_policy, void *accept_policy_cls,
    substatus_mhd_uri_log uri_log, void *uri_log_cls,
    MHD_AccessHandlerCallback handler, void *handler_cls,
    MHD_RequestCompletedCallback completed, void *completed_cls,
    MHD_NotifyConnectionCallback notify, void *notify_cls,
    const char *certificate_pem, const char *key_pem) {
  return MHD_start_daemon(
      flags | MHD_USE_TLS, 0, accept_policy, accept_policy_cls, handler, handler_cls,
      MHD_OPTION_SOCK_ADDR, addr,
      MHD_OPTION_CONNECTION_LIMIT, connection_limit,
      MHD_OPTION_CONNECTION_TIMEOUT, connection_timeout_seconds,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, connection_memory_limit,
      MHD_OPTION_NOTIFY_COMPLETED, completed, completed_cls,
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip_connection_limit,
      MHD_OPTION_NOTIFY_CONNECTION, notify, notify_cls,
      MHD_OPTION_URI_LOG_CALLBACK, uri_log, uri_log_cls,
      MHD_OPTION_HTTPS_MEM_CERT, certificate_pem,
      MHD_OPTION_HTTPS_MEM_KEY, key_pem,
      MHD_OPTION_END);
}

/// Whether this libmicrohttpd was built with TLS.
static inline int substatus_mhd_supports_tls(void) {
  return MHD_is_feature_supported(MHD_FEATURE_TLS) == MHD_YES;
}

/// The port the daemon listens on (useful after binding port 0), or 0 if unknown.
static inline uint16_t substatus_mhd_bound_port(struct MHD_Daemon *daemon) {
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
  return info == NULL ? 0 : info->port;
}

/// The socket of a connection, or -1.
static inline int substatus_mhd_connection_fd(struct MHD_Connection *connection) {
  const union MHD_ConnectionInfo *info =
      MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
  return info == NULL ? -1 : info->connect_fd;
}

/// The client's address of a connection, or NULL.
static inline const struct sockaddr *substatus_mhd_connection_client_address(struct MHD_Connection *connection) {
  const union MHD_ConnectionInfo *info =
      MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  return info == NULL ? NULL : info->client_addr;
}
