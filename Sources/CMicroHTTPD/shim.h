#pragma once
#include <stdint.h>
#include <sys/socket.h>
#include <microhttpd.h>

// Thin shims over libmicrohttpd's variadic entry points, which Swift cannot call directly.
// Declarations and trivial forwarding only; all policy lives in the Swift HTTPServer module.

/// Starts a daemon bound to `addr` with the options HTTPServer uses.
static inline struct MHD_Daemon *substatus_mhd_start(
    unsigned int flags, const struct sockaddr *addr, unsigned int connection_limit,
    unsigned int connection_timeout_seconds, size_t connection_memory_limit,
    MHD_AccessHandlerCallback handler, void *handler_cls,
    MHD_RequestCompletedCallback completed, void *completed_cls) {
  return MHD_start_daemon(
      flags, 0, NULL, NULL, handler, handler_cls,
      MHD_OPTION_SOCK_ADDR, addr,
      MHD_OPTION_CONNECTION_LIMIT, connection_limit,
      MHD_OPTION_CONNECTION_TIMEOUT, connection_timeout_seconds,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, connection_memory_limit,
      MHD_OPTION_NOTIFY_COMPLETED, completed, completed_cls,
      MHD_OPTION_END);
}

/// The port the daemon listens on (useful after binding port 0), or 0 if unknown.
static inline uint16_t substatus_mhd_bound_port(struct MHD_Daemon *daemon) {
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
  return info == NULL ? 0 : info->port;
}
