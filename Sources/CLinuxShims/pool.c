// A per-owner free-list allocator (see CLinuxShims.h). nghttp2 allocates a few small blocks for
// every stream (the stream, its outbound items, copied header arrays) and frees them when the
// stream closes; with many streams in flight on a connection they outnumber glibc's per-thread
// cache (7 blocks per size), so most went through malloc's slow path. Kept here, they are a pop
// and a push.
#include "CLinuxShims.h"
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define CLINUX_POOL_KEEPS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CLINUX_POOL_KEEPS 0
#endif
#endif
#ifndef CLINUX_POOL_KEEPS
#define CLINUX_POOL_KEEPS 1
#endif

enum { POOL_CLASSES = 7, POOL_MIN_SHIFT = 6, POOL_LARGE = 0xff };  // 64 B .. 4 KiB

// Every block starts with this header (16 bytes, so that the caller's part stays 16-aligned).
typedef struct pool_header {
  union {
    struct pool_header *next;  // while on a free list
    size_t size;               // a large block: its size
  };
  uint32_t size_class;         // 0..POOL_CLASSES-1, or POOL_LARGE
  uint32_t magic;
} pool_header;

#define POOL_MAGIC 0x504f4f4cu

struct clinux_pool {
  pool_header *free_lists[POOL_CLASSES];
  size_t cached_bytes;
  size_t max_cached_bytes;
};

static size_t class_size(int size_class) { return (size_t)1 << (size_class + POOL_MIN_SHIFT); }

static int class_of(size_t size) {
  for (int c = 0; c < POOL_CLASSES; c++) {
    if (size <= class_size(c)) return c;
  }
  return -1;
}

struct clinux_pool *clinux_pool_create(size_t max_cached_bytes) {
  struct clinux_pool *pool = calloc(1, sizeof(struct clinux_pool));
  if (pool) pool->max_cached_bytes = CLINUX_POOL_KEEPS ? max_cached_bytes : 0;
  return pool;
}

void clinux_pool_destroy(struct clinux_pool *pool) {
  if (!pool) return;
  for (int c = 0; c < POOL_CLASSES; c++) {
    pool_header *block = pool->free_lists[c];
    while (block) {
      pool_header *next = block->next;
      free(block);
      block = next;
    }
  }
  free(pool);
}

void *clinux_pool_malloc(size_t size, void *user) {
  struct clinux_pool *pool = user;
  int c = class_of(size);
  pool_header *block;
  if (c < 0) {
    if (size > SIZE_MAX - sizeof(pool_header)) return NULL;
    block = malloc(sizeof(pool_header) + size);
    if (!block) return NULL;
    block->size = size;
    block->size_class = POOL_LARGE;
  } else if ((block = pool->free_lists[c]) != NULL) {
    pool->free_lists[c] = block->next;
    pool->cached_bytes -= class_size(c);
  } else {
    block = malloc(sizeof(pool_header) + class_size(c));
    if (!block) return NULL;
    block->size_class = (uint32_t)c;
  }
  block->magic = POOL_MAGIC;
  return block + 1;
}

void clinux_pool_free(void *ptr, void *user) {
  if (!ptr) return;
  struct clinux_pool *pool = user;
  pool_header *block = (pool_header *)ptr - 1;
  if (block->magic != POOL_MAGIC) abort();  // not ours, or freed twice
  block->magic = 0;
  uint32_t c = block->size_class;
  if (c == POOL_LARGE || pool->cached_bytes + class_size((int)c) > pool->max_cached_bytes) {
    free(block);
    return;
  }
  block->next = pool->free_lists[c];
  pool->free_lists[c] = block;
  pool->cached_bytes += class_size((int)c);
}

void *clinux_pool_calloc(size_t count, size_t size, void *user) {
  if (size != 0 && count > SIZE_MAX / size) return NULL;
  void *ptr = clinux_pool_malloc(count * size, user);
  if (ptr) memset(ptr, 0, count * size);
  return ptr;
}

void *clinux_pool_realloc(void *ptr, size_t size, void *user) {
  if (!ptr) return clinux_pool_malloc(size, user);
  if (size == 0) {
    clinux_pool_free(ptr, user);
    return NULL;
  }
  pool_header *block = (pool_header *)ptr - 1;
  if (block->magic != POOL_MAGIC) abort();
  size_t capacity = block->size_class == POOL_LARGE ? block->size : class_size((int)block->size_class);
  if (size <= capacity && block->size_class != POOL_LARGE) return ptr;
  void *moved = clinux_pool_malloc(size, user);
  if (!moved) return NULL;
  memcpy(moved, ptr, capacity < size ? capacity : size);
  clinux_pool_free(ptr, user);
  return moved;
}

size_t clinux_pool_cached_bytes(const struct clinux_pool *pool) { return pool->cached_bytes; }

int clinux_pool_keeps_blocks(void) { return CLINUX_POOL_KEEPS; }
