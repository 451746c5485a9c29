#pragma once
// Linux system calls that Swift's Glibc module does not export (epoll, eventfd, accept4).
// Declarations only; code lives in shims.c so that no two modules inline libc-heavy code.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

/// accept4(2) with SOCK_NONBLOCK | SOCK_CLOEXEC.
int clinux_accept_nonblocking(int fd, struct sockaddr *addr, socklen_t *len);
