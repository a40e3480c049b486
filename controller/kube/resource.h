// resource.h — addressing Kubernetes resources by group/version/resource (and namespace/name):
// REST paths (core group "" → /api/v1, others → /apis/G/V), query encoding, object keys.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace feedguard::kube {

using Json = nlohmann::json;

struct GroupVersionResource {
  std::string group;     // "" for the core group
  std::string version;   // "v1"
  std::string resource;  // plural, lower case: "pods", "leases"

  std::string ApiVersion() const { return group.empty() ? version : group + "/" + version; }
};
using Gvr = GroupVersionResource;

// Well-known resources.
inline Gvr PodsGvr() { return {"", "v1", "pods"}; }
// DRA (GA in Kubernetes 1.34).
inline Gvr ResourceClaimsGvr() { return {"resource.k8s.io", "v1", "resourceclaims"}; }
inline Gvr NodesGvr() { return {"", "v1", "nodes"}; }
inline Gvr ConfigMapsGvr() { return {"", "v1", "configmaps"}; }
inline Gvr EventsGvr() { return {"", "v1", "events"}; }
inline Gvr LeasesGvr() { return {"coordination.k8s.io", "v1", "leases"}; }

// "/api/v1" or "/apis/<group>/<version>".
std::string GroupVersionPath(const Gvr& gvr);
// The collection: ".../namespaces/<ns>/<resource>" or ".../<resource>" when ns is empty.
std::string CollectionPath(const Gvr& gvr, std::string_view ns);
// One object, optionally a subresource ("status").
std::string ObjectPath(const Gvr& gvr, std::string_view ns, std::string_view name,
                       std::string_view subresource = "");

// Percent-encodes a query value or path segment (RFC 3986 unreserved characters kept).
std::string UrlEncode(std::string_view s);
// "?a=1&b=2" from pairs, skipping empty values; "" when nothing is left.
std::string QueryString(const std::vector<std::pair<std::string, std::string>>& params);

// metadata accessors that tolerate missing fields.
std::string NameOf(const Json& obj);
std::string NamespaceOf(const Json& obj);
std::string ResourceVersionOf(const Json& obj);
std::string UidOf(const Json& obj);
// "<namespace>/<name>" or "<name>" for cluster-scoped objects (client-go's key format).
std::string ObjectKey(const Json& obj);
std::string ObjectKey(std::string_view ns, std::string_view name);

// What a relist compares with its store before it parses an object: the key and
// resourceVersion ObjectKey and ResourceVersionOf would give.
struct ObjectIdentity {
  std::string key;
  std::string resource_version;
};
// Reads them from the JSON text of one object without parsing the rest: it stops once
// metadata's name, namespace and resourceVersion are read (the first ~200 bytes of an API
// server's object, whose metadata comes first and opens with them) or metadata ends. A field
// that is absent or not a string reads as "", as the accessors above read it. nullopt when the
// text is not a JSON object. For an object whose metadata repeats a key (no API server writes
// one) the first occurrence is read where a full parse keeps the last.
std::optional<ObjectIdentity> PeekIdentity(std::string_view text);

}  // namespace feedguard::kube
