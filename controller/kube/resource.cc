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

std::string ObjectKey(const Json& obj) { return ObjectKey(NamespaceOf(obj), NameOf(obj)); }

std::string ObjectKey(std::string_view ns, std::string_view name) {
  std::string key;
  key.reserve(ns.size() + 1 + name.size());
  if (!ns.empty()) key.append(ns).append("/");
  return key.append(name);
}

namespace {

// SAX events of one object up to the end of its metadata (or of name, namespace and
// resourceVersion); returning false stops nlohmann's parser there.
class IdentitySax final : public nlohmann::json_sax<Json> {
 public:
  bool complete() const { return complete_; }
  ObjectIdentity Identity() const {
    return {ObjectKey(fields_[kNamespace], fields_[kName]), fields_[kResourceVersion]};
  }

  bool null() override { return Scalar(); }
  bool boolean(bool) override { return Scalar(); }
  bool number_integer(number_integer_t) override { return Scalar(); }
  bool number_unsigned(number_unsigned_t) override { return Scalar(); }
  bool number_float(number_float_t, const string_t&) override { return Scalar(); }
  bool binary(binary_t&) override { return Scalar(); }
  bool string(string_t& s) override {
    if (depth_ == 2 && in_metadata_ && field_ >= 0) {
      fields_[field_] = std::move(s);
      seen_ |= 1u << field_;
      if (seen_ == 7u) return Done();
    }
    return Scalar();
  }
  bool start_object(std::size_t) override {
    if (depth_ == 0) is_object_ = true;
    if (depth_ == 1 && key_is_metadata_) in_metadata_ = true;
    ++depth_;
    return is_object_;
  }
  bool end_object() override {
    --depth_;
    // The end of metadata, or of an object without one (every field then reads as "").
    if ((depth_ == 1 && in_metadata_) || depth_ == 0) return Done();
    return true;
  }
  bool start_array(std::size_t) override {
    ++depth_;
    return is_object_;
  }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool key(string_t& k) override {
    if (depth_ == 1) key_is_metadata_ = k == "metadata";
    if (depth_ == 2 && in_metadata_) {
      field_ = k == "name"              ? kName
               : k == "namespace"       ? kNamespace
               : k == "resourceVersion" ? kResourceVersion
                                        : -1;
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  enum { kName = 0, kNamespace = 1, kResourceVersion = 2 };
  bool Scalar() { return depth_ > 0; }  // a scalar at the top: not an object
  bool Done() {
    complete_ = true;
    return false;
  }
  int depth_ = 0;
  bool is_object_ = false, key_is_metadata_ = false, in_metadata_ = false, complete_ = false;
  int field_ = -1;
  unsigned seen_ = 0;
  std::string fields_[3];
};

}  // namespace

std::optional<ObjectIdentity> PeekIdentity(std::string_view text) {
  IdentitySax sax;
  Json::sax_parse(text.begin(), text.end(), &sax, Json::input_format_t::json,
                  /*strict=*/false);
  if (!sax.complete()) return std::nullopt;
  return sax.Identity();
}

}  // namespace feedguard::kube
