#include "controller/distributor/peer_identity.h"

#include <algorithm>

#include <grpc/grpc_security_constants.h>
#include <grpcpp/security/auth_context.h>

namespace feedguard::controller {
namespace {

void AddUnique(std::vector<std::string>& out, std::string name) {
  if (name.empty()) return;
  if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(std::move(name));
}

std::vector<std::string> Property(const grpc::AuthContext& ctx, const char* name) {
  std::vector<std::string> out;
  for (const grpc::string_ref& v : ctx.FindPropertyValues(name)) {
    out.emplace_back(v.data(), v.size());
  }
  return out;
}

}  // namespace

std::vector<std::string> NodeNamesFromCertificate(const std::vector<std::string>& common_names,
                                                  const std::vector<std::string>& dns_sans) {
  std::vector<std::string> out;
  for (const std::string& cn : common_names) {
    if (cn.size() > kNodeCnPrefix.size() && cn.starts_with(kNodeCnPrefix)) {
      AddUnique(out, cn.substr(kNodeCnPrefix.size()));
    }
  }
  for (const std::string& san : dns_sans) {
    if (san.starts_with(kNodeCnPrefix)) {
      AddUnique(out, san.substr(kNodeCnPrefix.size()));
    } else {
      AddUnique(out, san);
    }
  }
  return out;
}

std::vector<std::string> NodeNamesFromAuthContext(const grpc::AuthContext& ctx) {
  if (!ctx.IsPeerAuthenticated()) return {};
  // "peer_dns" holds only the DNS-type SANs ("x509_subject_alternative_name" mixes in IP,
  // URI and e-mail SANs, which must not name a node).
  return NodeNamesFromCertificate(Property(ctx, GRPC_X509_CN_PROPERTY_NAME),
                                  Property(ctx, GRPC_PEER_DNS_PROPERTY_NAME));
}

bool MayActForNode(const std::vector<std::string>& allowed, std::string_view node) {
  return !node.empty() && std::find(allowed.begin(), allowed.end(), node) != allowed.end();
}

}  // namespace feedguard::controller
