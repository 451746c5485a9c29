#pragma once
// A thin TLS layer on OpenSSL memory BIOs for the HTTP/2 transport: the socket loop feeds
// ciphertext in and takes ciphertext out; nothing here touches a socket. Declarations only (no
// OpenSSL headers), so that this module does not clash with the others; code is in tls_shims.c.
#include <stddef.h>
#include <stdint.h>

/// An SSL_CTX: certificates, verification and ALPN settings shared by many connections.
typedef struct ctls_context ctls_context;
/// One TLS connection (an SSL with a read and a write memory BIO).
typedef struct ctls_connection ctls_connection;

/// A server context: TLS 1.2+, certificate chain and key from PEM files, ALPN "h2" required (a
/// ClientHello without ALPN, or without h2 in it, gets a no_application_protocol alert). With
/// `client_ca_path`, clients must present a certificate signed by one of its CAs.
/// Returns NULL and writes a message into `error` on failure.
ctls_context *ctls_server_context_new(const char *cert_chain_path, const char *key_path,
                                      const char *client_ca_path, char *error, size_t error_length);

/// A client context: TLS 1.2+, peers verified against `ca_path` (NULL: the system store), with an
/// optional client certificate chain and key (both or neither). Returns NULL with `error` set.
ctls_context *ctls_client_context_new(const char *ca_path, const char *cert_chain_path,
                                      const char *key_path, char *error, size_t error_length);

/// Releases a context (connections made from it keep their own reference).
void ctls_context_free(ctls_context *context);

/// A server-side connection.
ctls_connection *ctls_connection_new_server(ctls_context *context);
/// A client-side connection offering ALPN "h2", verifying `server_name` (a DNS name, sent as SNI,
/// or an IP address, checked against the certificate's IP SANs).
ctls_connection *ctls_connection_new_client(ctls_context *context, const char *server_name);
/// Releases a connection.
void ctls_connection_free(ctls_connection *connection);

/// Appends received ciphertext to the read BIO. Returns 0, or -1 when out of memory.
int ctls_feed(ctls_connection *connection, const void *bytes, size_t length);

/// Advances the handshake: 1 complete, 0 needs more input, -1 failed (`error` set; an alert may be
/// waiting in the output).
int ctls_handshake(ctls_connection *connection, char *error, size_t error_length);

/// Decrypts into `buffer`: > 0 bytes read, 0 needs more input, -1 the peer closed (close_notify),
/// -2 failed (`error` set).
long ctls_read(ctls_connection *connection, void *buffer, size_t capacity, char *error, size_t error_length);

/// Encrypts `length` bytes into the output. Returns 0, or -1 with `error` set.
int ctls_write(ctls_connection *connection, const void *bytes, size_t length, char *error, size_t error_length);

/// Queues close_notify in the output.
void ctls_shutdown(ctls_connection *connection);

/// The number of ciphertext bytes waiting to be sent.
size_t ctls_pending_output(ctls_connection *connection);
/// Moves up to `capacity` bytes of pending ciphertext into `buffer`; returns the count.
size_t ctls_take_output(ctls_connection *connection, void *buffer, size_t capacity);

/// Whether ALPN selected "h2".
int ctls_negotiated_h2(ctls_connection *connection);
/// The negotiated protocol version, such as "TLSv1.3".
const char *ctls_version(ctls_connection *connection);
