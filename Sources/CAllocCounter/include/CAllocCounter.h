#ifndef SUBSTATUS_ALLOC_COUNTER_H
#define SUBSTATUS_ALLOC_COUNTER_H

#include <stdint.h>

/// What the process allocated between `substatus_alloc_counter_start` and
/// `substatus_alloc_counter_stop`, on every thread.
typedef struct {
  /// Calls that returned new memory: malloc, calloc, realloc (a non-null pointer and a size
  /// above zero, or a null pointer), reallocarray, posix_memalign, aligned_alloc, memalign,
  /// valloc, pvalloc.
  uint64_t allocations;
  /// The bytes those calls asked for.
  uint64_t bytes;
  /// Calls to free with a non-null pointer (and realloc to size zero).
  uint64_t frees;
} substatus_alloc_counts;

/// Zeroes the counters and starts counting.
void substatus_alloc_counter_start(void);

/// Stops counting and returns the counts since the last start.
substatus_alloc_counts substatus_alloc_counter_stop(void);

/// Writes the call stack of every counted allocation to `fd` (a file opened with O_APPEND), or
/// stops with -1: per allocation, one 64-bit word with the number of frames N, then N return
/// addresses, innermost first (the first ones are the interposer's own). Slow: for finding where
/// the allocations come from (scripts/alloc-sites), never while measuring the budgets.
void substatus_alloc_counter_trace_to(int fd);

/// Checks the interposer against glibc's contracts and its own counts: every entry point
/// (sizes, alignments, contents kept by realloc, errno and EINVAL/ENOMEM as glibc reports them,
/// free(NULL), realloc to size zero) and exact counts from 4 threads allocating at once.
/// Returns 0, or the number of failures with the first one described in `message`.
int substatus_alloc_counter_self_test(char *message, unsigned long capacity);

#endif
