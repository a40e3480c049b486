#include "controller/kube/resource.h"

namespace feedguard::kube {
namespace {

std::string MetaString(const Json& obj, const char* field) {
  if (!obj.is_object()) return "";
  auto m = obj.find("metadata");
  if (m == obj.end() || !m->is_object()) return "";
  auto f = m->find(field);
  if (f == m->end() || !f->is_string()) return "";
  return f->get<std::string>();
}

}  // namespace

std::string GroupVersionPath(const Gvr& gvr) {
  if (gvr.group.empty()) return "/api/" + gvr.version;
  return "/apis/" + gvr.group + "/" + gvr.version;
}

std::string CollectionPath(const Gvr& gvr, std::string_view ns) {
  std::string p = GroupVersionPath(gvr);
  if (!ns.empty()) p += "/namespaces/" + UrlEncode(ns);
  return p + "/" + gvr.resource;
}

std::string ObjectPath(const Gvr& gvr, std::string_view ns, std::string_view name,
                       std::string_view subresource) {
  std::string p = CollectionPath(gvr, ns) + "/" + UrlEncode(name);
  if (!subresource.empty()) p += "/" + std::string(subresource);
  return p;
}

std::string UrlEncode(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string QueryString(const std::vector<std::pair<std::string, std::string>>& params) {
  std::string q;
  for (const auto& [k, v] : params) {
    if (v.empty()) continue;
    q += q.empty() ? "?" : "&";
    q += UrlEncode(k) + "=" + UrlEncode(v);
  }
  return q;
}

std::string NameOf(const Json& obj) { return MetaString(obj, "name"); }
std::string NamespaceOf(const Json& obj) { return MetaString(obj, "namespace"); }
std::string ResourceVersionOf(const Json& obj) { return MetaString(obj, "resourceVersion"); }
std::string UidOf(const Json& obj) { return MetaString(obj, "uid"); }

std::string ObjectKey(const Json& obj) {
  const std::string ns = NamespaceOf(obj);
  return ns.empty() ? NameOf(obj) : ns + "/" + NameOf(obj);
}

}  // namespace feedguard::kube
