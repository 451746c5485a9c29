#pragma once
#include <zlib.h>

// zlib's init functions are macros (they pass ZLIB_VERSION and sizeof(z_stream)); Swift cannot call
// function-like macros, so these wrap them. Window bits 15 + 16: the gzip format (RFC 1952) only.
static inline int czlib_inflate_init_gzip(z_streamp stream) { return inflateInit2(stream, 15 + 16); }

static inline int czlib_deflate_init_gzip(z_streamp stream, int level) {
  return deflateInit2(stream, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
}
