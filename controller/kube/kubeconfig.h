// kubeconfig.h — where the API server is and how to authenticate to it: kubeconfig files
// (contexts, clusters, users, `-data` forms) and in-cluster service-account configuration, plus a
// bearer-token source that re-reads rotated token files.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "feedguard/common/status.h"
#include "feedguard/common/time_source.h"

namespace feedguard::kube {

// Everything a transport needs, with file references already read into memory (PEM bytes), so
// no private temp files are needed (libcurl takes them as blobs).
struct RestConfig {
  std::string server;  // "https://host:port", no trailing slash
  std::string ca_pem;  // empty: the system trust store
  bool insecure_skip_tls_verify = false;
  std::string client_cert_pem;
  std::string client_key_pem;
  std::string token;       // a static bearer token
  std::string token_file;  // a bearer token re-read from this file (wins over `token`)
  std::string default_namespace = "default";
};

// Parses kubeconfig YAML. `context` empty: current-context. Relative file paths resolve against
// `base_dir` (the kubeconfig's directory).
Result<RestConfig> ParseKubeconfig(std::string_view yaml, const std::string& base_dir,
                                   const std::string& context = "");
// Reads and parses a kubeconfig file.
Result<RestConfig> LoadKubeconfig(const std::string& path, const std::string& context = "");

// In-cluster: KUBERNETES_SERVICE_HOST/PORT and the service-account files under
// `root`/var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt,namespace}.
struct InClusterEnv {
  std::string host;  // KUBERNETES_SERVICE_HOST
  std::string port;  // KUBERNETES_SERVICE_PORT
  std::string root = "/";
};
InClusterEnv InClusterEnvFromProcess(const std::string& root = "/");
Result<RestConfig> LoadInClusterConfig(const InClusterEnv& env);

// Kubeconfig from $KUBECONFIG (first entry) or ~/.kube/config, else in-cluster. `context`
// empty: the kubeconfig's current-context; else that context (kubectl's --context), which needs
// a kubeconfig: in-cluster configuration has no contexts and is refused with one.
Result<RestConfig> LoadDefaultConfig(const std::string& context = "");

// Decodes standard base64 (padding optional, whitespace ignored).
Result<std::string> Base64Decode(std::string_view in);

// Bearer token for each request: static, or re-read from a file at least every `refresh` and
// immediately after Invalidate() (called on HTTP 401). Thread-safe.
class TokenSource {
 public:
  TokenSource(std::string static_token, std::string token_file, TimeSourcePtr clock,
              std::chrono::seconds refresh = std::chrono::seconds(60));
  // The current token ("" when none is configured).
  Result<std::string> Token();
  void Invalidate();
  bool empty() const { return static_token_.empty() && token_file_.empty(); }

 private:
  const std::string static_token_;
  const std::string token_file_;
  const TimeSourcePtr clock_;
  const std::chrono::seconds refresh_;
  std::mutex mu_;
  std::string cached_;                               // guarded by mu_
  std::chrono::steady_clock::time_point read_at_{};  // guarded by mu_
  bool valid_ = false;                               // guarded by mu_
};
using TokenSourcePtr = std::shared_ptr<TokenSource>;

}  // namespace feedguard::kube
