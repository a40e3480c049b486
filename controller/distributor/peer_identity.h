// peer_identity.h — which node an agent's client certificate speaks for (docs/DESIGN.md §5).
//
// --agent-identity=cert: an agent may only receive and report for the node its client
// certificate names, and only a kubelet-style node subject names one: CN "system:node:<name>"
// together with O "system:nodes" (what the kubelet's client certificate carries and what the
// Kubernetes signer kubernetes.io/kube-apiserver-client-kubelet issues). Anything else names no
// node — in particular a DNS subjectAltName, which any CA-signed certificate may carry
// (issue 28, item 5: "CN=tenant-app, DNS:node-b" was served node-b's fence), and a CN with the
// prefix but without the organisation. The CA that signs them (--tls-client-ca) is then trusted
// to say who is a node: use one that signs node identities only.
// The default, --agent-identity=token, takes the node from the agent's projected
// ServiceAccount token instead (controller/auth).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace grpc {
class AuthContext;
}

namespace feedguard::controller {

inline constexpr std::string_view kNodeCnPrefix = "system:node:";
inline constexpr std::string_view kNodesOrganization = "system:nodes";

// Node names a certificate subject with these CN and O values may speak for (deduplicated,
// ordered as found): none unless some O is "system:nodes"; then each CN "system:node:<name>".
std::vector<std::string> NodeNamesFromCertificate(const std::vector<std::string>& common_names,
                                                  const std::vector<std::string>& organizations);

// The values of attribute `key` (e.g. "O") in an RFC 2253 distinguished name, as grpc reports a
// peer's subject ("O=system:nodes,CN=system:node:gpu-1"), unescaped.
std::vector<std::string> SubjectAttribute(std::string_view rfc2253, std::string_view key);

// Reads a TLS peer's subject (CN and O). Empty for an unauthenticated peer.
std::vector<std::string> NodeNamesFromAuthContext(const grpc::AuthContext& ctx);

bool MayActForNode(const std::vector<std::string>& allowed, std::string_view node);

}  // namespace feedguard::controller
