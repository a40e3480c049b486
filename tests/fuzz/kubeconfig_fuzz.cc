// kubeconfig_fuzz.cc — kubeconfig YAML (controller/kube/kubeconfig: ParseKubeconfig, and the
// base64 of its `-data` fields). The file is operator-supplied, but a mounted Secret or a
// generated file can be anything: it must never crash, throw, or take unbounded time/memory.
//
// Properties: an accepted config names a server without a trailing '/', a client certificate
// only with a key; Base64Decode of any string either fails or decodes to at most 3/4 its size.
// Relative file references resolve under a directory that does not exist (nothing is read).
#include <string>

#include "controller/kube/kubeconfig.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  const std::string_view text = AsText(data, size);
  auto cfg = feedguard::kube::ParseKubeconfig(text, "/nonexistent-feedguard-fuzz");
  if (cfg.ok()) {
    FG_FUZZ_CHECK(!cfg->server.empty() && cfg->server.back() != '/');
    FG_FUZZ_CHECK(cfg->client_cert_pem.empty() == cfg->client_key_pem.empty());
  }
  auto b = feedguard::kube::Base64Decode(text);
  if (b.ok()) FG_FUZZ_CHECK(b->size() <= text.size() * 3 / 4 + 3);
  return 0;
}
