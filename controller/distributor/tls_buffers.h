#pragma once
// OpenSSL's per-connection record buffers, released while a TLS connection idles.
//
// OpenSSL gives every TLS connection a read and a write record buffer (~16.7 KiB each, sized
// for the largest record) and keeps both for the connection's whole life unless the SSL object
// has SSL_MODE_RELEASE_BUFFERS, which frees each buffer once it holds nothing and allocates it
// again for the next record. grpc 1.51 does not set the mode on the SSL objects of its TLS
// connections and has no option for it. Each idle agent connection then held 33 KB of them in
// the controller's heap, 17 KB resident (500 agents); with the mode the controller's RSS is
// ~13 KB per agent lower (bench/results/tls-memory.md, docs/controller-limits.md).

namespace feedguard::controller {

// From the first call on, every SSL object this process creates gets SSL_MODE_RELEASE_BUFFERS
// (an OpenSSL ex_data "new" callback for SSL objects, CRYPTO_get_ex_new_index: OpenSSL calls it
// at the end of SSL_new, after the object took its SSL_CTX's mode). That is grpc's server and
// client connections and any other TLS user of the process (the controller's HTTPS client to
// the API server too: it then frees and allocates a record buffer per exchange instead of
// holding two). Registered once; later calls do nothing. False if OpenSSL refused the
// registration (nothing changed then).
bool ReleaseIdleTlsBuffers();

// Whether an SSL object made now (SSL_new on a fresh SSL_CTX) gets SSL_MODE_RELEASE_BUFFERS:
// what tests check after ReleaseIdleTlsBuffers().
bool NewTlsConnectionsReleaseIdleBuffers();

}  // namespace feedguard::controller
