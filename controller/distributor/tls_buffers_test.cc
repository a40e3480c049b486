#include "controller/distributor/tls_buffers.h"

#include <gtest/gtest.h>
#include <openssl/ssl.h>

namespace feedguard::controller {
namespace {

TEST(TlsBuffersTest, SslObjectsMadeAfterTheCallReleaseIdleBuffers) {
  // OpenSSL's default (grpc 1.51 sets no mode either): both record buffers kept for life.
  EXPECT_FALSE(NewTlsConnectionsReleaseIdleBuffers());
  ASSERT_TRUE(ReleaseIdleTlsBuffers());
  EXPECT_TRUE(NewTlsConnectionsReleaseIdleBuffers());
  EXPECT_TRUE(ReleaseIdleTlsBuffers());  // once per process; a second call changes nothing
  EXPECT_TRUE(NewTlsConnectionsReleaseIdleBuffers());
}

TEST(TlsBuffersTest, TheModeIsAddedToTheContextsModesNotInPlaceOfThem) {
  ASSERT_TRUE(ReleaseIdleTlsBuffers());
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  ASSERT_NE(ctx, nullptr);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE);
  SSL* ssl = SSL_new(ctx);
  ASSERT_NE(ssl, nullptr);
  const long mode = SSL_get_mode(ssl);
  EXPECT_NE(mode & SSL_MODE_RELEASE_BUFFERS, 0);
  EXPECT_NE(mode & SSL_MODE_ENABLE_PARTIAL_WRITE, 0);
  EXPECT_NE(mode & SSL_MODE_AUTO_RETRY, 0);  // OpenSSL's own default stays
  SSL_free(ssl);
  SSL_CTX_free(ctx);
}

}  // namespace
}  // namespace feedguard::controller
