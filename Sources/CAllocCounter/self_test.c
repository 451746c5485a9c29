// The interposer's self-test (`substatus-alloc-budget --self-test`, run by the allocation budget
// tests): glibc's contracts through every wrapper, and the counts.
#define _GNU_SOURCE
#include "CAllocCounter.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Unoptimized: the optimizer removes a malloc and free pair whose memory it can see through,
// and every pair here must reach the wrappers.
#pragma clang optimize off

static int failures;
static char *failure_message;
static unsigned long failure_capacity;

#define CHECK(condition, ...)                                               \
  do {                                                                      \
    if (!(condition)) {                                                     \
      if (failures++ == 0) snprintf(failure_message, failure_capacity, __VA_ARGS__); \
    }                                                                       \
  } while (0)

static int aligned(void *pointer, size_t alignment) {
  return pointer != NULL && ((uintptr_t)pointer % alignment) == 0;
}

enum { THREADS = 4, PER_THREAD = 10000 };
static atomic_bool go;

static void *allocate_in_a_loop(void *unused) {
  (void)unused;
  while (!atomic_load(&go)) {
  }
  for (int i = 0; i < PER_THREAD; i++) {
    // A volatile pointer: the compiler may not pair and remove the malloc and free.
    void *volatile pointer = malloc(24);
    free(pointer);
  }
  return NULL;
}

int substatus_alloc_counter_self_test(char *message, unsigned long capacity) {
  failures = 0;
  failure_message = message;
  failure_capacity = capacity;
  if (capacity > 0) message[0] = 0;
  substatus_alloc_counts counts;
  void *volatile p;

  substatus_alloc_counter_start();
  p = malloc(100);
  memset(p, 1, 100);
  free(p);
  free(NULL);
  counts = substatus_alloc_counter_stop();
  CHECK(counts.allocations == 1 && counts.bytes == 100 && counts.frees == 1,
        "malloc+free: %llu allocations, %llu bytes, %llu frees", (unsigned long long)counts.allocations,
        (unsigned long long)counts.bytes, (unsigned long long)counts.frees);

  substatus_alloc_counter_start();
  unsigned char *zeroed = calloc(10, 10);
  int all_zero = zeroed != NULL;
  for (int i = 0; zeroed != NULL && i < 100; i++) all_zero &= zeroed[i] == 0;
  free(zeroed);
  counts = substatus_alloc_counter_stop();
  CHECK(all_zero && counts.allocations == 1 && counts.bytes == 100 && counts.frees == 1, "calloc(10, 10)");

  errno = 0;
  size_t huge = SIZE_MAX / 2;
  p = calloc(huge, 4);
  CHECK(p == NULL && errno == ENOMEM, "calloc overflow: %p, errno %d", p, errno);

  substatus_alloc_counter_start();
  char *grown = realloc(NULL, 50);
  memset(grown, 'x', 50);
  grown = realloc(grown, 5000);
  int kept = grown != NULL;
  for (int i = 0; grown != NULL && i < 50; i++) kept &= grown[i] == 'x';
  p = realloc(grown, 0);
  counts = substatus_alloc_counter_stop();
  CHECK(kept && p == NULL, "realloc: contents not kept or realloc(p, 0) not NULL");
  CHECK(counts.allocations == 2 && counts.bytes == 5050 && counts.frees == 1,
        "realloc: %llu allocations, %llu bytes, %llu frees", (unsigned long long)counts.allocations,
        (unsigned long long)counts.bytes, (unsigned long long)counts.frees);

  errno = 0;
  p = reallocarray(NULL, huge, 4);
  CHECK(p == NULL && errno == ENOMEM, "reallocarray overflow");
  p = reallocarray(NULL, 10, 10);
  CHECK(p != NULL, "reallocarray(NULL, 10, 10)");
  free(p);

  substatus_alloc_counter_start();
  void *out = NULL;
  errno = 1234;
  CHECK(posix_memalign(&out, 3, 10) == EINVAL && posix_memalign(&out, 0, 10) == EINVAL, "posix_memalign: bad alignment");
  CHECK(posix_memalign(&out, 64, 100) == 0 && aligned(out, 64), "posix_memalign(64)");
  CHECK(errno == 1234, "posix_memalign changed errno");
  free(out);
  void *a = aligned_alloc(256, 512);
  CHECK(aligned(a, 256), "aligned_alloc(256)");
  free(a);
  void *m = memalign(4096, 10);
  CHECK(aligned(m, 4096), "memalign(4096)");
  free(m);
  long page = sysconf(_SC_PAGESIZE);
  void *v = valloc(10);
  CHECK(aligned(v, (size_t)page), "valloc");
  free(v);
  // valgrind's memcheck aborts on pvalloc: a build of this test for memcheck leaves it out.
#ifndef SUBSTATUS_ALLOC_SELF_TEST_NO_PVALLOC
  void *pv = pvalloc(10);
  CHECK(aligned(pv, (size_t)page) && malloc_usable_size(pv) >= (size_t)page, "pvalloc");
  free(pv);
  const unsigned long long aligned_calls = 5;
#else
  const unsigned long long aligned_calls = 4;
#endif
  counts = substatus_alloc_counter_stop();
  CHECK(counts.allocations == aligned_calls && counts.bytes == 100 + 512 + 10 + 10 * (aligned_calls - 3) &&
            counts.frees == aligned_calls,
        "aligned allocations: %llu allocations, %llu bytes, %llu frees", (unsigned long long)counts.allocations,
        (unsigned long long)counts.bytes, (unsigned long long)counts.frees);

  // Threads allocating at once: no count is lost.
  pthread_t threads[THREADS];
  atomic_store(&go, false);
  for (int i = 0; i < THREADS; i++) pthread_create(&threads[i], NULL, allocate_in_a_loop, NULL);
  substatus_alloc_counter_start();
  atomic_store(&go, true);
  // Counted while the threads run; stopped only after every thread has done all of its work.
  for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
  counts = substatus_alloc_counter_stop();
  // Joining a thread may free its thread-local storage: a few more frees, never fewer.
  CHECK(counts.allocations == THREADS * PER_THREAD && counts.bytes == THREADS * PER_THREAD * 24 &&
            counts.frees >= THREADS * PER_THREAD && counts.frees < THREADS * PER_THREAD + 64,
        "%d threads: %llu allocations, %llu frees (expected %d)", THREADS, (unsigned long long)counts.allocations,
        (unsigned long long)counts.frees, THREADS * PER_THREAD);

  // Not counting: nothing moves.
  substatus_alloc_counter_start();
  counts = substatus_alloc_counter_stop();
  p = malloc(10);
  free(p);
  substatus_alloc_counts after = substatus_alloc_counter_stop();
  CHECK(after.allocations == counts.allocations && after.frees == counts.frees, "counted while stopped");
  return failures;
}
