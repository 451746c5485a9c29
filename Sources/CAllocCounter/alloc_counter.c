// A counting malloc interposer for `substatus-alloc-budget` (and nothing else: no other product
// may depend on this target, since it replaces the allocator entry points of the whole process).
//
// The executable defines malloc, free, calloc, realloc, reallocarray, posix_memalign,
// aligned_alloc, memalign, valloc and pvalloc; the dynamic linker binds every library's calls
// (the Swift runtime, SQLite, glibc's own strdup and friends) to these. Each one forwards to
// glibc's allocator through its `__libc_*` entry point, so the memory and its layout are glibc's
// as without the interposer (malloc_usable_size, which the Swift runtime uses, keeps working and
// needs no wrapper), and counts while counting is on. No wrapper allocates, locks or calls back
// into Swift; the counters are relaxed atomics. glibc documents this replacement in "Replacing
// malloc" (the GNU C Library manual, 3.2.5).
#include "CAllocCounter.h"

#include <errno.h>
#include <execinfo.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

extern void *__libc_malloc(size_t size);
extern void __libc_free(void *pointer);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *pointer, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void *__libc_valloc(size_t size);
extern void *__libc_pvalloc(size_t size);

static atomic_bool counting = false;
static atomic_uint_fast64_t allocations = 0;
static atomic_uint_fast64_t bytes = 0;
static atomic_uint_fast64_t frees = 0;

// Tracing (substatus_alloc_counter_trace_to): the descriptor the counted allocations' call
// stacks go to, -1 when off.
static atomic_int trace_fd = -1;
static _Thread_local int tracing_here;

enum { TRACE_DEPTH = 24 };

// Writes one record: the frame count, then the return addresses (native-endian 64-bit words).
// backtrace() walks the unwind tables without allocating once libgcc_s is loaded (warmed up in
// substatus_alloc_counter_trace_to); `tracing_here` keeps an allocation made while tracing from
// being traced.
static void trace(int fd) {
  if (tracing_here) return;
  tracing_here = 1;
  void *frames[TRACE_DEPTH + 1];
  int n = backtrace(frames + 1, TRACE_DEPTH);
  frames[0] = (void *)(uintptr_t)n;
  size_t length = (size_t)(n + 1) * sizeof(void *);
  // One write per record: records from threads allocating at once do not interleave (O_APPEND,
  // a regular file).
  ssize_t written = write(fd, frames, length);
  (void)written;
  tracing_here = 0;
}

static inline void count_allocation(size_t size) {
  if (atomic_load_explicit(&counting, memory_order_relaxed)) {
    atomic_fetch_add_explicit(&allocations, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&bytes, size, memory_order_relaxed);
    int fd = atomic_load_explicit(&trace_fd, memory_order_relaxed);
    if (fd >= 0) trace(fd);
  }
}

static inline void count_free(void) {
  if (atomic_load_explicit(&counting, memory_order_relaxed)) {
    atomic_fetch_add_explicit(&frees, 1, memory_order_relaxed);
  }
}

void *malloc(size_t size) {
  count_allocation(size);
  return __libc_malloc(size);
}

void free(void *pointer) {
  if (pointer != NULL) count_free();
  __libc_free(pointer);
}

void *calloc(size_t count, size_t size) {
  size_t total;
  count_allocation(__builtin_mul_overflow(count, size, &total) ? SIZE_MAX : total);
  return __libc_calloc(count, size);  // it reports the overflow (ENOMEM)
}

void *realloc(void *pointer, size_t size) {
  if (pointer != NULL && size == 0) {
    count_free();  // glibc frees the block and returns NULL
  } else {
    count_allocation(size);  // a new block, or one that may move
  }
  return __libc_realloc(pointer, size);
}

void *reallocarray(void *pointer, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return realloc(pointer, total);
}

void *memalign(size_t alignment, size_t size) {
  count_allocation(size);
  return __libc_memalign(alignment, size);
}

// glibc 2.36's aligned_alloc is memalign (the same symbol address); so is this one.
void *aligned_alloc(size_t alignment, size_t size) {
  count_allocation(size);
  return __libc_memalign(alignment, size);
}

int posix_memalign(void **result, size_t alignment, size_t size) {
  // As glibc: the alignment must be a power of two and a multiple of sizeof(void *).
  if (alignment % sizeof(void *) != 0 || (alignment & (alignment - 1)) != 0 || alignment == 0) {
    return EINVAL;
  }
  int saved = errno;
  count_allocation(size);
  void *pointer = __libc_memalign(alignment, size);
  if (pointer == NULL) {
    errno = saved;  // posix_memalign reports through its result, and leaves errno alone
    return ENOMEM;
  }
  *result = pointer;
  return 0;
}

void *valloc(size_t size) {
  count_allocation(size);
  return __libc_valloc(size);
}

void *pvalloc(size_t size) {
  count_allocation(size);
  return __libc_pvalloc(size);
}

void substatus_alloc_counter_trace_to(int fd) {
  if (fd >= 0) {
    // The first backtrace loads libgcc_s (and allocates): done here, not while counting.
    void *frames[4];
    tracing_here = 1;
    backtrace(frames, 4);
    tracing_here = 0;
  }
  atomic_store(&trace_fd, fd);
}

void substatus_alloc_counter_start(void) {
  atomic_store_explicit(&allocations, 0, memory_order_relaxed);
  atomic_store_explicit(&bytes, 0, memory_order_relaxed);
  atomic_store_explicit(&frees, 0, memory_order_relaxed);
  atomic_store_explicit(&counting, true, memory_order_seq_cst);
}

substatus_alloc_counts substatus_alloc_counter_stop(void) {
  atomic_store_explicit(&counting, false, memory_order_seq_cst);
  substatus_alloc_counts counts = {
    .allocations = atomic_load_explicit(&allocations, memory_order_relaxed),
    .bytes = atomic_load_explicit(&bytes, memory_order_relaxed),
    .frees = atomic_load_explicit(&frees, memory_order_relaxed),
  };
  return counts;
}
