#pragma once
// Linux system calls that Swift's Glibc module does not export (epoll, eventfd, accept4).
// Declarations only; code lives in shims.c so that no two modules inline libc-heavy code.
#include <stdint.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <netinet/in.h>

/// accept4(2) with SOCK_NONBLOCK | SOCK_CLOEXEC.
int clinux_accept_nonblocking(int fd, struct sockaddr *addr, socklen_t *len);

/// epoll_create1(EPOLL_CLOEXEC).
int clinux_epoll_create(void);
/// epoll_ctl with a 64-bit token; op is 1 add, 2 delete, 3 modify. events: 1 in, 4 out (EPOLLIN/OUT).
int clinux_epoll_ctl(int epfd, int op, int fd, uint32_t events, uint64_t token);
/// epoll_wait writing tokens and event masks into two arrays of `max` entries.
int clinux_epoll_wait(int epfd, uint64_t *tokens, uint32_t *events, int max, int timeout_ms);
/// eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC).
int clinux_eventfd(void);
/// Adds 1 to an eventfd.
void clinux_eventfd_signal(int fd);
/// Resets an eventfd.
void clinux_eventfd_drain(int fd);
/// CLOCK_MONOTONIC in nanoseconds.
uint64_t clinux_monotonic_ns(void);

/// The event loop running on the calling thread (a thread-local set by the loop), or NULL.
void *clinux_current_loop(void);
/// Sets the calling thread's event loop (NULL when the loop ends).
void clinux_set_current_loop(void *loop);
/// Sets SO_REUSEADDR, and SO_REUSEPORT when `reuse_port` is non-zero.
int clinux_set_reuse(int fd, int reuse_port);
/// Sets TCP_NODELAY.
int clinux_set_nodelay(int fd);
/// Creates a nonblocking, close-on-exec TCP socket for the family.
int clinux_tcp_socket(int family);
/// Ignores SIGPIPE process-wide.
void clinux_ignore_sigpipe(void);
/// Counts the open file descriptors of this process (entries of /proc/self/fd), or -1.
int clinux_count_open_fds(void);

/// The number of CPUs the calling thread may run on (sched_getaffinity: `taskset`, cpusets), or -1.
int clinux_available_cpus(void);

/// Catches `signo` with a handler that writes its number to a pipe (created on first use) and
/// returns the pipe's read end, or -1. Unlike SIG_IGN plus a Dispatch signal source, a signal
/// that arrives before anyone reads the pipe is kept, never dropped.
int clinux_catch_signal(int signo);
/// Blocks until a caught signal arrives on the pipe `fd`; returns its number, or -1.
int clinux_next_signal(int fd);

/// Raises the soft RLIMIT_NOFILE to the hard limit; returns the soft limit in force afterwards
/// (unchanged when raising fails), or -1.
long clinux_raise_open_files_limit(void);
/// Returns freed heap pages to the system (glibc malloc_trim(0)); returns 1 if memory was released.
int clinux_malloc_trim(void);

/// glibc malloc's heap (mallinfo2): bytes handed out (arena chunks in use plus mmapped blocks),
/// bytes free inside the arenas (kept by malloc, counted in RSS when touched), and the arenas' size.
void clinux_heap_bytes(long *allocated, long *free_bytes, long *arenas);

/// Caps glibc malloc's arenas at `count` (mallopt M_ARENA_MAX) unless the environment already sets
/// MALLOC_ARENA_MAX (the operator's choice wins). Returns 1 when set, 0 otherwise. Arenas made
/// before the call stay: call it early, before the threads that allocate most start.
int clinux_limit_malloc_arenas(int count);
/// The resident set size of this process in bytes (/proc/self/statm), or -1.
long clinux_resident_bytes(void);

/// A free-list allocator for one owner thread (an HTTP/2 session's `nghttp2_mem`): blocks of up
/// to 4 KiB are rounded up to a power of two (64 bytes at least) and, when freed, kept on their
/// size's list for the next allocation of that size, up to `max_cached_bytes` kept in all; larger
/// blocks and those over the bound go to malloc and free. Not thread-safe. Under AddressSanitizer
/// nothing is kept, so that a use after free is still reported.
struct clinux_pool;
/// A new pool keeping at most `max_cached_bytes` of freed blocks, or NULL.
struct clinux_pool *clinux_pool_create(size_t max_cached_bytes);
/// Frees the pool and the blocks it keeps (blocks still handed out must have been freed).
void clinux_pool_destroy(struct clinux_pool *pool);
/// malloc from the pool (`nghttp2_malloc`'s signature: the pool is the user data).
void *clinux_pool_malloc(size_t size, void *pool);
/// free to the pool (`nghttp2_free`).
void clinux_pool_free(void *ptr, void *pool);
/// calloc from the pool (`nghttp2_calloc`).
void *clinux_pool_calloc(size_t count, size_t size, void *pool);
/// realloc within the pool (`nghttp2_realloc`).
void *clinux_pool_realloc(void *ptr, size_t size, void *pool);
/// The bytes of freed blocks the pool keeps now.
size_t clinux_pool_cached_bytes(const struct clinux_pool *pool);
/// 1 when pools keep freed blocks, 0 in an AddressSanitizer build.
int clinux_pool_keeps_blocks(void);
