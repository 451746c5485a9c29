#include "CTLSShims.h"
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ctls_context {
  SSL_CTX *ctx;
};

struct ctls_connection {
  SSL *ssl;
  BIO *in;   // ciphertext from the socket (owned by ssl)
  BIO *out;  // ciphertext for the socket (owned by ssl)
};

static const unsigned char h2_alpn[] = {2, 'h', '2'};

/// Writes OpenSSL's first queued error (or `fallback`) after `what`, then clears the queue.
static void set_error(char *error, size_t length, const char *what, const char *fallback) {
  if (error == NULL || length == 0) return;
  unsigned long code = ERR_get_error();
  char reason[256];
  if (code != 0) {
    ERR_error_string_n(code, reason, sizeof reason);
  } else {
    snprintf(reason, sizeof reason, "%s", fallback ? fallback : "unknown error");
  }
  snprintf(error, length, "%s: %s", what, reason);
  ERR_clear_error();
}

/// Refuses a ClientHello without ALPN: gRPC needs HTTP/2, and without ALPN OpenSSL would accept it.
static int client_hello_callback(SSL *ssl, int *alert, void *arg) {
  (void)arg;
  const unsigned char *extension;
  size_t length;
  if (!SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_application_layer_protocol_negotiation, &extension, &length)) {
    *alert = SSL_AD_NO_APPLICATION_PROTOCOL;
    return SSL_CLIENT_HELLO_ERROR;
  }
  return SSL_CLIENT_HELLO_SUCCESS;
}

static int alpn_select_callback(SSL *ssl, const unsigned char **out, unsigned char *out_length,
                                const unsigned char *in, unsigned int in_length, void *arg) {
  (void)ssl;
  (void)arg;
  unsigned char *selected = NULL;
  if (SSL_select_next_proto(&selected, out_length, h2_alpn, sizeof h2_alpn, in, in_length) !=
      OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

static SSL_CTX *base_context(const SSL_METHOD *method) {
  SSL_CTX *ctx = SSL_CTX_new(method);
  if (ctx == NULL) return NULL;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // RFC 9113 9.2.2: TLS 1.2 with HTTP/2 uses ephemeral key exchange and AEAD ciphers.
  SSL_CTX_set_cipher_list(ctx, "ECDHE+AESGCM:ECDHE+CHACHA20");
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  return ctx;
}

ctls_context *ctls_server_context_new(const char *cert_chain_path, const char *key_path,
                                      const char *client_ca_path, char *error, size_t error_length) {
  ERR_clear_error();
  SSL_CTX *ctx = base_context(TLS_server_method());
  if (ctx == NULL) {
    set_error(error, error_length, "cannot create a TLS context", NULL);
    return NULL;
  }
  if (SSL_CTX_use_certificate_chain_file(ctx, cert_chain_path) != 1) {
    set_error(error, error_length, "cannot load the certificate chain", NULL);
    goto fail;
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, key_path, SSL_FILETYPE_PEM) != 1) {
    set_error(error, error_length, "cannot load the private key", NULL);
    goto fail;
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    set_error(error, error_length, "the private key does not match the certificate", NULL);
    goto fail;
  }
  if (client_ca_path != NULL) {
    if (SSL_CTX_load_verify_locations(ctx, client_ca_path, NULL) != 1) {
      set_error(error, error_length, "cannot load the client CA file", NULL);
      goto fail;
    }
    STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(client_ca_path);
    if (names != NULL) SSL_CTX_set_client_CA_list(ctx, names);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
  }
  static const unsigned char session_context[] = "substatus";
  SSL_CTX_set_session_id_context(ctx, session_context, sizeof session_context - 1);
  SSL_CTX_set_client_hello_cb(ctx, client_hello_callback, NULL);
  SSL_CTX_set_alpn_select_cb(ctx, alpn_select_callback, NULL);
  ctls_context *context = malloc(sizeof *context);
  if (context == NULL) goto fail;
  context->ctx = ctx;
  return context;
fail:
  SSL_CTX_free(ctx);
  return NULL;
}

ctls_context *ctls_client_context_new(const char *ca_path, const char *cert_chain_path,
                                      const char *key_path, char *error, size_t error_length) {
  ERR_clear_error();
  SSL_CTX *ctx = base_context(TLS_client_method());
  if (ctx == NULL) {
    set_error(error, error_length, "cannot create a TLS context", NULL);
    return NULL;
  }
  int loaded = ca_path != NULL ? SSL_CTX_load_verify_locations(ctx, ca_path, NULL)
                               : SSL_CTX_set_default_verify_paths(ctx);
  if (loaded != 1) {
    set_error(error, error_length, ca_path != NULL ? "cannot load the CA file" : "cannot load the system CA store",
              NULL);
    goto fail;
  }
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
  if ((cert_chain_path == NULL) != (key_path == NULL)) {
    set_error(error, error_length, "a client certificate needs its key (and the other way round)", "");
    goto fail;
  }
  if (cert_chain_path != NULL) {
    if (SSL_CTX_use_certificate_chain_file(ctx, cert_chain_path) != 1) {
      set_error(error, error_length, "cannot load the client certificate chain", NULL);
      goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, key_path, SSL_FILETYPE_PEM) != 1) {
      set_error(error, error_length, "cannot load the client key", NULL);
      goto fail;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
      set_error(error, error_length, "the client key does not match its certificate", NULL);
      goto fail;
    }
  }
  ctls_context *context = malloc(sizeof *context);
  if (context == NULL) goto fail;
  context->ctx = ctx;
  return context;
fail:
  SSL_CTX_free(ctx);
  return NULL;
}

void ctls_context_free(ctls_context *context) {
  if (context == NULL) return;
  SSL_CTX_free(context->ctx);
  free(context);
}

static ctls_connection *connection_new(ctls_context *context) {
  ctls_connection *connection = calloc(1, sizeof *connection);
  if (connection == NULL) return NULL;
  connection->ssl = SSL_new(context->ctx);
  connection->in = BIO_new(BIO_s_mem());
  connection->out = BIO_new(BIO_s_mem());
  if (connection->ssl == NULL || connection->in == NULL || connection->out == NULL) {
    SSL_free(connection->ssl);
    BIO_free(connection->in);
    BIO_free(connection->out);
    free(connection);
    return NULL;
  }
  // An empty read BIO means "no data yet" (WANT_READ), not end of file.
  BIO_set_mem_eof_return(connection->in, -1);
  BIO_set_mem_eof_return(connection->out, -1);
  SSL_set_bio(connection->ssl, connection->in, connection->out);
  return connection;
}

ctls_connection *ctls_connection_new_server(ctls_context *context) {
  ctls_connection *connection = connection_new(context);
  if (connection != NULL) SSL_set_accept_state(connection->ssl);
  return connection;
}

ctls_connection *ctls_connection_new_client(ctls_context *context, const char *server_name) {
  ctls_connection *connection = connection_new(context);
  if (connection == NULL) return NULL;
  SSL *ssl = connection->ssl;
  SSL_set_connect_state(ssl);
  SSL_set_alpn_protos(ssl, h2_alpn, sizeof h2_alpn);
  if (server_name != NULL && server_name[0] != 0) {
    X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
    if (X509_VERIFY_PARAM_set1_ip_asc(param, server_name) != 1) {
      // Not an IP address: a host name, sent as SNI and matched against the DNS names.
      ERR_clear_error();
      SSL_set_tlsext_host_name(ssl, server_name);
      SSL_set1_host(ssl, server_name);
    }
  }
  return connection;
}

void ctls_connection_free(ctls_connection *connection) {
  if (connection == NULL) return;
  SSL_free(connection->ssl);  // frees both BIOs
  free(connection);
}

int ctls_feed(ctls_connection *connection, const void *bytes, size_t length) {
  while (length > 0) {
    int chunk = length > 1 << 30 ? 1 << 30 : (int)length;
    int n = BIO_write(connection->in, bytes, chunk);
    if (n <= 0) return -1;
    bytes = (const char *)bytes + n;
    length -= (size_t)n;
  }
  return 0;
}

int ctls_handshake(ctls_connection *connection, char *error, size_t error_length) {
  ERR_clear_error();
  int result = SSL_do_handshake(connection->ssl);
  if (result == 1) return 1;
  int code = SSL_get_error(connection->ssl, result);
  if (code == SSL_ERROR_WANT_READ || code == SSL_ERROR_WANT_WRITE) return 0;
  long verify = SSL_get_verify_result(connection->ssl);
  if (verify != X509_V_OK) {
    char what[300];
    snprintf(what, sizeof what, "TLS handshake failed: certificate verify failed (%s)",
             X509_verify_cert_error_string(verify));
    snprintf(error, error_length, "%s", what);
    ERR_clear_error();
  } else {
    set_error(error, error_length, "TLS handshake failed",
              code == SSL_ERROR_SYSCALL ? "unexpected end of the handshake" : NULL);
  }
  return -1;
}

long ctls_read(ctls_connection *connection, void *buffer, size_t capacity, char *error, size_t error_length) {
  ERR_clear_error();
  int cap = capacity > (1 << 30) ? (1 << 30) : (int)capacity;
  int n = SSL_read(connection->ssl, buffer, cap);
  if (n > 0) return n;
  int code = SSL_get_error(connection->ssl, n);
  if (code == SSL_ERROR_WANT_READ || code == SSL_ERROR_WANT_WRITE) return 0;
  if (code == SSL_ERROR_ZERO_RETURN) return -1;
  set_error(error, error_length, "TLS read failed", NULL);
  return -2;
}

int ctls_write(ctls_connection *connection, const void *bytes, size_t length, char *error, size_t error_length) {
  ERR_clear_error();
  while (length > 0) {
    int chunk = length > (1 << 30) ? (1 << 30) : (int)length;
    // The write BIO is memory and grows as needed, so SSL_write takes everything at once.
    int n = SSL_write(connection->ssl, bytes, chunk);
    if (n <= 0) {
      set_error(error, error_length, "TLS write failed", NULL);
      return -1;
    }
    bytes = (const char *)bytes + n;
    length -= (size_t)n;
  }
  return 0;
}

void ctls_shutdown(ctls_connection *connection) {
  ERR_clear_error();
  if (SSL_is_init_finished(connection->ssl)) SSL_shutdown(connection->ssl);
  ERR_clear_error();
}

size_t ctls_pending_output(ctls_connection *connection) { return BIO_ctrl_pending(connection->out); }

size_t ctls_take_output(ctls_connection *connection, void *buffer, size_t capacity) {
  int cap = capacity > (1 << 30) ? (1 << 30) : (int)capacity;
  int n = BIO_read(connection->out, buffer, cap);
  return n > 0 ? (size_t)n : 0;
}

int ctls_negotiated_h2(ctls_connection *connection) {
  const unsigned char *protocol = NULL;
  unsigned int length = 0;
  SSL_get0_alpn_selected(connection->ssl, &protocol, &length);
  return length == 2 && memcmp(protocol, "h2", 2) == 0;
}

const char *ctls_version(ctls_connection *connection) { return SSL_get_version(connection->ssl); }
