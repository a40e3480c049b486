#include "controller/distributor/peer_identity.h"

#include <algorithm>
#include <cctype>
#include <string>

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
                                                  const std::vector<std::string>& organizations) {
  std::vector<std::string> out;
  if (std::find(organizations.begin(), organizations.end(), kNodesOrganization) ==
      organizations.end()) {
    return out;
  }
  for (const std::string& cn : common_names) {
    if (cn.size() > kNodeCnPrefix.size() && cn.starts_with(kNodeCnPrefix)) {
      AddUnique(out, cn.substr(kNodeCnPrefix.size()));
    }
  }
  return out;
}

std::vector<std::string> SubjectAttribute(std::string_view dn, std::string_view key) {
  // RFC 2253: attributes separated by ',' (or '+' within one RDN), "type=value", with '\'
  // escaping the next character (or two hex digits) in a value.
  std::vector<std::string> out;
  size_t i = 0;
  while (i < dn.size()) {
    std::string type, value;
    while (i < dn.size() && dn[i] != '=' && dn[i] != ',' && dn[i] != '+') type += dn[i++];
    if (i < dn.size() && dn[i] == '=') {
      ++i;
      while (i < dn.size() && dn[i] != ',' && dn[i] != '+') {
        if (dn[i] == '\\' && i + 1 < dn.size()) {
          auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
          if (i + 2 < dn.size() && hex(dn[i + 1]) && hex(dn[i + 2])) {
            value += static_cast<char>(std::stoi(std::string(dn.substr(i + 1, 2)), nullptr, 16));
            i += 3;
          } else {
            value += dn[i + 1];
            i += 2;
          }
          continue;
        }
        value += dn[i++];
      }
    }
    while (!type.empty() && type.front() == ' ') type.erase(type.begin());
    if (type == key) out.push_back(std::move(value));
    if (i < dn.size()) ++i;  // the separator
  }
  return out;
}

std::vector<std::string> NodeNamesFromAuthContext(const grpc::AuthContext& ctx) {
  if (!ctx.IsPeerAuthenticated()) return {};
  std::vector<std::string> organizations;
  for (const std::string& subject : Property(ctx, GRPC_X509_SUBJECT_PROPERTY_NAME)) {
    for (std::string& o : SubjectAttribute(subject, "O")) organizations.push_back(std::move(o));
  }
  return NodeNamesFromCertificate(Property(ctx, GRPC_X509_CN_PROPERTY_NAME), organizations);
}

bool MayActForNode(const std::vector<std::string>& allowed, std::string_view node) {
  return !node.empty() && std::find(allowed.begin(), allowed.end(), node) != allowed.end();
}

}  // namespace feedguard::controller
