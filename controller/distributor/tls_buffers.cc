#include "controller/distributor/tls_buffers.h"

#include <openssl/crypto.h>
#include <openssl/ssl.h>

namespace feedguard::controller {
namespace {

// CRYPTO_EX_new: parent is the SSL object SSL_new is making; ptr (its ex_data slot) is unused.
void SetReleaseBuffers(void* parent, void* /*ptr*/, CRYPTO_EX_DATA* /*ad*/, int /*idx*/,
                       long /*argl*/, void* /*argp*/) {
  if (parent != nullptr) SSL_set_mode(static_cast<SSL*>(parent), SSL_MODE_RELEASE_BUFFERS);
}

}  // namespace

bool ReleaseIdleTlsBuffers() {
  // A function-local static: registered exactly once, even when called from several threads.
  static const bool registered = CRYPTO_get_ex_new_index(CRYPTO_EX_INDEX_SSL, 0, nullptr,
                                                         SetReleaseBuffers, nullptr, nullptr) >= 0;
  return registered;
}

bool NewTlsConnectionsReleaseIdleBuffers() {
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  if (ctx == nullptr) return false;
  SSL* ssl = SSL_new(ctx);
  const bool released = ssl != nullptr && (SSL_get_mode(ssl) & SSL_MODE_RELEASE_BUFFERS) != 0;
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  return released;
}

}  // namespace feedguard::controller
