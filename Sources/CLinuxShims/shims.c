#define _GNU_SOURCE
#include "CLinuxShims.h"
#include <dirent.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <stdlib.h>
#include <stdio.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

int clinux_accept_nonblocking(int fd, struct sockaddr *addr, socklen_t *len) {
  return accept4(fd, addr, len, SOCK_NONBLOCK | SOCK_CLOEXEC);
}

int clinux_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

int clinux_epoll_ctl(int epfd, int op, int fd, uint32_t events, uint64_t token) {
  struct epoll_event ev;
  ev.events = events;
  ev.data.u64 = token;
  int cop = op == 1 ? EPOLL_CTL_ADD : op == 2 ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
  return epoll_ctl(epfd, cop, fd, &ev);
}

int clinux_epoll_wait(int epfd, uint64_t *tokens, uint32_t *events, int max, int timeout_ms) {
  struct epoll_event evs[256];
  if (max > 256) max = 256;
  int n;
  do {
    n = epoll_wait(epfd, evs, max, timeout_ms);
  } while (n < 0 && errno == EINTR);
  for (int i = 0; i < n; i++) {
    tokens[i] = evs[i].data.u64;
    events[i] = evs[i].events;
  }
  return n;
}

int clinux_eventfd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

void clinux_eventfd_signal(int fd) {
  uint64_t one = 1;
  ssize_t r = write(fd, &one, sizeof one);
  (void)r;
}

void clinux_eventfd_drain(int fd) {
  uint64_t value;
  ssize_t r = read(fd, &value, sizeof value);
  (void)r;
}

static __thread void *current_loop;

void *clinux_current_loop(void) { return current_loop; }

void clinux_set_current_loop(void *loop) { current_loop = loop; }

uint64_t clinux_monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int clinux_set_reuse(int fd, int reuse_port) {
  int one = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0) return -1;
  return reuse_port ? setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) : 0;
}

int clinux_set_nodelay(int fd) {
  int one = 1;
  return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int clinux_tcp_socket(int family) {
  return socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}

void clinux_ignore_sigpipe(void) { signal(SIGPIPE, SIG_IGN); }

int clinux_count_open_fds(void) {
  DIR *dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int count = 0;
  struct dirent *entry;
  while ((entry = readdir(dir)) != NULL) {
    if (entry->d_name[0] != '.') count++;
  }
  closedir(dir);
  return count - 1;  // the directory stream itself
}

int clinux_available_cpus(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return -1;
  return CPU_COUNT(&set);
}

static int signal_pipe[2] = {-1, -1};
static pthread_once_t signal_pipe_once = PTHREAD_ONCE_INIT;

static void make_signal_pipe(void) {
  if (pipe2(signal_pipe, O_CLOEXEC) != 0) {
    signal_pipe[0] = signal_pipe[1] = -1;
    return;
  }
  // The handler must never block: a full pipe (signals nobody reads) drops the extra ones.
  fcntl(signal_pipe[1], F_SETFL, O_NONBLOCK);
}

static void write_signal(int signo) {
  int saved = errno;
  unsigned char byte = (unsigned char)signo;
  (void)!write(signal_pipe[1], &byte, 1);
  errno = saved;
}

int clinux_catch_signal(int signo) {
  pthread_once(&signal_pipe_once, make_signal_pipe);
  if (signal_pipe[0] < 0) return -1;
  struct sigaction action;
  memset(&action, 0, sizeof(action));
  action.sa_handler = write_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (sigaction(signo, &action, NULL) != 0) return -1;
  return signal_pipe[0];
}

int clinux_next_signal(int fd) {
  unsigned char byte;
  for (;;) {
    ssize_t n = read(fd, &byte, 1);
    if (n == 1) return byte;
    if (n < 0 && errno == EINTR) continue;
    return -1;
  }
}

long clinux_raise_open_files_limit(void) {
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return -1;
  if (limit.rlim_cur < limit.rlim_max) {
    struct rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur > (rlim_t)LONG_MAX) return LONG_MAX;
  return (long)limit.rlim_cur;
}

int clinux_malloc_trim(void) { return malloc_trim(0); }

void clinux_heap_bytes(long *allocated, long *free_bytes, long *arenas) {
  struct mallinfo2 info = mallinfo2();
  *allocated = (long)(info.uordblks + info.hblkhd);
  *free_bytes = (long)info.fordblks;
  *arenas = (long)info.arena;
}

int clinux_limit_malloc_arenas(int count) {
  const char *set = getenv("MALLOC_ARENA_MAX");
  if (set != NULL && set[0] != '\0') return 0;
  return mallopt(M_ARENA_MAX, count);
}

long clinux_resident_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "re");
  if (f == NULL) return -1;
  long size = 0, resident = 0;
  int n = fscanf(f, "%ld %ld", &size, &resident);
  fclose(f);
  return n == 2 ? resident * sysconf(_SC_PAGESIZE) : -1;
}
