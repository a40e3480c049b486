// peer_identity.h — which node an agent's client certificate speaks for (docs/DESIGN.md §5).
//
// An agent may only receive and report for its own node. Its node name comes from the client
// certificate: a subject CN of the form "system:node:<name>" (the kubelet convention) or a DNS
// subjectAltName (which may also carry the "system:node:" prefix). A hello whose node name is
// not one of these is refused (--agent-identity=cert). The default, --agent-identity=token,
// takes the node from the agent's projected ServiceAccount token instead (controller/auth).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace grpc {
class AuthContext;
}

namespace feedguard::controller {

inline constexpr std::string_view kNodeCnPrefix = "system:node:";

// Node names a certificate with these CN and SAN values may speak for (deduplicated, ordered
// as found). A CN without the "system:node:" prefix names no node.
std::vector<std::string> NodeNamesFromCertificate(const std::vector<std::string>& common_names,
                                                  const std::vector<std::string>& dns_sans);

// Reads the CN and SAN properties of a TLS peer. Empty for an unauthenticated peer.
std::vector<std::string> NodeNamesFromAuthContext(const grpc::AuthContext& ctx);

bool MayActForNode(const std::vector<std::string>& allowed, std::string_view node);

}  // namespace feedguard::controller
