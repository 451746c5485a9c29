#pragma once
#include <netinet/in.h>
#include <sys/socket.h>
#include <string.h>
#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>

// Thin shims over libcurl's variadic entry points (curl_easy_setopt, curl_easy_getinfo,
// curl_multi_setopt), which Swift cannot call, and over `struct curl_sockaddr`, whose address
// extends past its declared `struct sockaddr`. Declarations and trivial forwarding only; all policy
// lives in the Swift OutboundHTTP module.

static inline CURLcode ccurl_easy_setopt_long(CURL *easy, CURLoption option, long value) {
  return curl_easy_setopt(easy, option, value);
}

static inline CURLcode ccurl_easy_setopt_off(CURL *easy, CURLoption option, curl_off_t value) {
  return curl_easy_setopt(easy, option, value);
}

/// A string option: libcurl copies the string during the call (except CURLOPT_ERRORBUFFER and
/// CURLOPT_POSTFIELDS, which use ccurl_easy_setopt_pointer).
static inline CURLcode ccurl_easy_setopt_string(CURL *easy, CURLoption option, const char *value) {
  return curl_easy_setopt(easy, option, value);
}

static inline CURLcode ccurl_easy_setopt_pointer(CURL *easy, CURLoption option, void *value) {
  return curl_easy_setopt(easy, option, value);
}

static inline CURLcode ccurl_easy_setopt_slist(CURL *easy, CURLoption option, struct curl_slist *value) {
  return curl_easy_setopt(easy, option, value);
}

static inline CURLcode ccurl_easy_setopt_write_function(CURL *easy, curl_write_callback callback) {
  return curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, callback);
}

static inline CURLcode ccurl_easy_setopt_opensocket_function(CURL *easy, curl_opensocket_callback callback) {
  return curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, callback);
}

static inline CURLcode ccurl_easy_setopt_closesocket_function(CURL *easy, curl_closesocket_callback callback) {
  return curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, callback);
}

static inline CURLcode ccurl_easy_getinfo_long(CURL *easy, CURLINFO info, long *value) {
  return curl_easy_getinfo(easy, info, value);
}

static inline CURLcode ccurl_easy_getinfo_pointer(CURL *easy, CURLINFO info, void **value) {
  return curl_easy_getinfo(easy, info, value);
}

static inline CURLMcode ccurl_multi_setopt_long(CURLM *multi, CURLMoption option, long value) {
  return curl_multi_setopt(multi, option, value);
}

/// The IP address of a socket libcurl is about to open: copies its 4 or 16 bytes to `out` and the
/// port to `port`; returns 4, 16, or 0 for another family.
static inline int ccurl_sockaddr_ip(const struct curl_sockaddr *address, unsigned char out[16], unsigned *port) {
  if (address->family == AF_INET && address->addrlen >= sizeof(struct sockaddr_in)) {
    const struct sockaddr_in *in4 = (const struct sockaddr_in *)(const void *)&address->addr;
    memcpy(out, &in4->sin_addr, 4);
    *port = ntohs(in4->sin_port);
    return 4;
  }
  if (address->family == AF_INET6 && address->addrlen >= sizeof(struct sockaddr_in6)) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)&address->addr;
    memcpy(out, &in6->sin6_addr, 16);
    *port = ntohs(in6->sin6_port);
    return 16;
  }
  return 0;
}

/// Opens the socket libcurl asked for, close-on-exec.
static inline curl_socket_t ccurl_open_socket(const struct curl_sockaddr *address) {
  return socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
}

static inline long ccurl_global_default(void) { return CURL_GLOBAL_DEFAULT; }
static inline curl_socket_t ccurl_socket_bad(void) { return CURL_SOCKET_BAD; }
