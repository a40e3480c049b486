#include "controller/kube/kubeconfig.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/strings.h"
#include "common/yaml_bounds.h"

namespace feedguard::kube {
namespace {

// A kubeconfig, a token, a CA bundle: a few KB. Anything past this is not one of them (a
// mistaken path to a device or a huge file) and is refused rather than read into memory.
constexpr size_t kMaxConfigFileBytes = 4 << 20;

Result<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read " + path);
  std::string out;
  char buf[16 * 1024];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    out.append(buf, static_cast<size_t>(in.gcount()));
    if (out.size() > kMaxConfigFileBytes) {
      return InvalidArgument(path + " is larger than " + std::to_string(kMaxConfigFileBytes >> 20) +
                             " MiB: not a kubeconfig, token or CA file");
    }
  }
  if (in.bad()) return Internal("error reading " + path);
  return out;
}

std::string Resolve(const std::string& base_dir, const std::string& p) {
  if (p.empty() || p.front() == '/' || base_dir.empty()) return p;
  return (std::filesystem::path(base_dir) / p).string();
}

// Finds the entry named `name` in a kubeconfig list (clusters, users, contexts) and returns
// its `field` map (e.g. "cluster").
Result<YAML::Node> FindNamed(const YAML::Node& root, const char* list, const char* field,
                             const std::string& name) {
  const YAML::Node seq = root[list];
  if (seq && seq.IsSequence()) {
    for (const auto& entry : seq) {
      if (entry["name"] && entry["name"].as<std::string>() == name) {
        YAML::Node v = entry[field];
        if (!v) return YAML::Node(YAML::NodeType::Map);
        if (!v.IsMap())
          return InvalidArgument(std::string(list) + " entry '" + name + "' malformed");
        return v;
      }
    }
  }
  return NotFound(std::string("kubeconfig has no ") + field + " named '" + name + "'");
}

std::string Str(const YAML::Node& m, const char* key) {
  const YAML::Node v = m[key];
  return v && v.IsScalar() ? v.as<std::string>() : std::string();
}

// Takes `key-data` (base64) or `key` (a file path); returns "" when neither is set.
Result<std::string> DataOrFile(const YAML::Node& m, const std::string& key,
                               const std::string& base_dir) {
  const std::string data = Str(m, (key + "-data").c_str());
  if (!data.empty()) {
    auto decoded = Base64Decode(data);
    if (!decoded.ok()) return decoded.status().Annotate(key + "-data");
    return decoded;
  }
  const std::string file = Str(m, key.c_str());
  if (file.empty()) return std::string();
  return ReadWholeFile(Resolve(base_dir, file));
}

}  // namespace

Result<std::string> Base64Decode(std::string_view in) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  out.reserve(in.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  bool padding = false;
  for (char c : in) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      padding = true;
      continue;
    }
    const int v = val(c);
    if (v < 0 || padding) return InvalidArgument("invalid base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (bits >= 6) return InvalidArgument("invalid base64 length");
  return out;
}

Result<RestConfig> ParseKubeconfig(std::string_view yaml, const std::string& base_dir,
                                   const std::string& context) {
  // A kubeconfig is a few KB; one of many clusters and users a few MB. Bounded as expanded, so
  // that aliases cannot make one of them a bomb for the reads below (common/yaml_bounds.h).
  static constexpr YamlLimits kKubeconfigLimits{.max_input_bytes = kMaxConfigFileBytes,
                                                .max_nodes = 200'000,
                                                .max_expanded_bytes = 4 * kMaxConfigFileBytes,
                                                .max_depth = 64};
  auto loaded = LoadYamlBounded(yaml, kKubeconfigLimits);
  if (!loaded.ok()) return loaded.status().Annotate("kubeconfig");
  const YAML::Node root = *loaded;
  if (!root.IsMap()) return InvalidArgument("kubeconfig is not a mapping");
  try {
    std::string ctx_name = context.empty() ? Str(root, "current-context") : context;
    if (ctx_name.empty()) return InvalidArgument("kubeconfig has no current-context");
    FG_ASSIGN_OR_RETURN(YAML::Node ctx, FindNamed(root, "contexts", "context", ctx_name));
    const std::string cluster_name = Str(ctx, "cluster");
    const std::string user_name = Str(ctx, "user");
    if (cluster_name.empty()) return InvalidArgument("context '" + ctx_name + "' names no cluster");
    FG_ASSIGN_OR_RETURN(YAML::Node cluster, FindNamed(root, "clusters", "cluster", cluster_name));
    RestConfig cfg;
    cfg.server = Str(cluster, "server");
    while (!cfg.server.empty() && cfg.server.back() == '/') cfg.server.pop_back();
    if (cfg.server.empty()) return InvalidArgument("cluster '" + cluster_name + "' has no server");
    const std::string insecure = Str(cluster, "insecure-skip-tls-verify");
    cfg.insecure_skip_tls_verify = insecure == "true";
    FG_ASSIGN_OR_RETURN(cfg.ca_pem, DataOrFile(cluster, "certificate-authority", base_dir));
    if (!Str(ctx, "namespace").empty()) cfg.default_namespace = Str(ctx, "namespace");
    if (!user_name.empty()) {
      FG_ASSIGN_OR_RETURN(YAML::Node user, FindNamed(root, "users", "user", user_name));
      FG_ASSIGN_OR_RETURN(cfg.client_cert_pem, DataOrFile(user, "client-certificate", base_dir));
      FG_ASSIGN_OR_RETURN(cfg.client_key_pem, DataOrFile(user, "client-key", base_dir));
      cfg.token = Str(user, "token");
      const std::string tf = Str(user, "tokenFile");
      if (!tf.empty()) cfg.token_file = Resolve(base_dir, tf);
      if (cfg.client_cert_pem.empty() != cfg.client_key_pem.empty()) {
        return InvalidArgument("user '" + user_name +
                               "' has a client certificate without a key "
                               "or a key without a certificate");
      }
    }
    return cfg;
  } catch (const YAML::Exception& e) {
    return InvalidArgument(std::string("kubeconfig: ") + e.what());
  }
}

Result<RestConfig> LoadKubeconfig(const std::string& path, const std::string& context) {
  FG_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  auto cfg = ParseKubeconfig(text, std::filesystem::path(path).parent_path().string(), context);
  if (!cfg.ok()) return cfg.status().Annotate(path);
  return cfg;
}

InClusterEnv InClusterEnvFromProcess(const std::string& root) {
  InClusterEnv env;
  const char* h = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* p = std::getenv("KUBERNETES_SERVICE_PORT");
  env.host = h ? h : "";
  env.port = p ? p : "";
  env.root = root;
  return env;
}

Result<RestConfig> LoadInClusterConfig(const InClusterEnv& env) {
  if (env.host.empty() || env.port.empty()) {
    return FailedPrecondition("not in a cluster: KUBERNETES_SERVICE_HOST/PORT unset");
  }
  const std::filesystem::path dir =
      std::filesystem::path(env.root) / "var/run/secrets/kubernetes.io/serviceaccount";
  RestConfig cfg;
  const bool v6 = env.host.find(':') != std::string::npos;
  cfg.server = "https://" + (v6 ? "[" + env.host + "]" : env.host) + ":" + env.port;
  cfg.token_file = (dir / "token").string();
  FG_ASSIGN_OR_RETURN(std::string token, ReadWholeFile(cfg.token_file));  // must exist now
  if (Trim(token).empty()) return FailedPrecondition("service-account token is empty");
  FG_ASSIGN_OR_RETURN(cfg.ca_pem, ReadWholeFile((dir / "ca.crt").string()));
  auto ns = ReadWholeFile((dir / "namespace").string());
  if (ns.ok() && !Trim(*ns).empty()) cfg.default_namespace = Trim(*ns);
  return cfg;
}

Result<RestConfig> LoadDefaultConfig(const std::string& context) {
  const char* kc = std::getenv("KUBECONFIG");
  if (kc && *kc) {
    std::string first(kc);
    first = first.substr(0, first.find(':'));
    return LoadKubeconfig(first, context);
  }
  const char* home = std::getenv("HOME");
  if (home && std::filesystem::exists(std::string(home) + "/.kube/config")) {
    return LoadKubeconfig(std::string(home) + "/.kube/config", context);
  }
  if (!context.empty()) {
    return NotFound("context '" + context +
                    "' asked for, but there is no kubeconfig ($KUBECONFIG unset, no "
                    "~/.kube/config) and in-cluster configuration has no contexts");
  }
  return LoadInClusterConfig(InClusterEnvFromProcess());
}

TokenSource::TokenSource(std::string static_token, std::string token_file, TimeSourcePtr clock,
                         std::chrono::seconds refresh)
    : static_token_(std::move(static_token)),
      token_file_(std::move(token_file)),
      clock_(std::move(clock)),
      refresh_(refresh) {}

Result<std::string> TokenSource::Token() {
  if (token_file_.empty()) return static_token_;
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = clock_->MonotonicNow();
  if (!valid_ || now - read_at_ >= refresh_) {
    auto text = ReadWholeFile(token_file_);
    if (!text.ok()) {
      if (!cached_.empty()) return cached_;  // keep the last good token through a hiccup
      if (!static_token_.empty()) return static_token_;
      return text.status();
    }
    cached_ = Trim(*text);
    read_at_ = now;
    valid_ = true;
  }
  return cached_;
}

void TokenSource::Invalidate() {
  std::lock_guard<std::mutex> lock(mu_);
  valid_ = false;
}

}  // namespace feedguard::kube
