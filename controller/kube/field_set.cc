// field_set.cc — FieldSet and the parser callback that applies it.
#include "controller/kube/field_set.h"

#include <utility>

namespace feedguard::kube {

const std::shared_ptr<const FieldSet>& FieldSet::All() {
  static const std::shared_ptr<const FieldSet> kAll = [] {  // an immutable constant, not state
    auto f = std::shared_ptr<FieldSet>(new FieldSet());
    f->keep_rest_ = true;
    return f;
  }();
  return kAll;
}

std::shared_ptr<FieldSet> FieldSet::AllBut(const std::string& key,
                                           std::shared_ptr<const FieldSet> child) {
  auto f = std::shared_ptr<FieldSet>(new FieldSet());
  f->keep_rest_ = true;
  f->children_.emplace(key, std::move(child));
  return f;
}

std::shared_ptr<const FieldSet> FieldSet::AllButManagedFields() {
  return AllBut("metadata", AllBut("managedFields", nullptr));
}

std::shared_ptr<const FieldSet> FieldSet::Build(const std::vector<std::string_view>& paths) {
  // Group the paths by their first component; a component that is a whole path keeps its
  // subtree, whatever longer paths also name.
  std::map<std::string, std::vector<std::string_view>, std::less<>> groups;
  std::map<std::string, bool, std::less<>> whole;
  for (std::string_view p : paths) {
    const size_t dot = p.find('.');
    const std::string head(p.substr(0, dot));
    if (head.empty()) continue;
    if (dot == std::string_view::npos) {
      whole[head] = true;
      groups[head];
    } else {
      groups[head].push_back(p.substr(dot + 1));
    }
  }
  auto f = std::shared_ptr<FieldSet>(new FieldSet());
  for (auto& [head, rest] : groups) {
    f->children_.emplace(head, whole.count(head) != 0 ? All() : Build(rest));
  }
  return f;
}

std::shared_ptr<const FieldSet> FieldSet::Only(std::initializer_list<std::string_view> paths) {
  return Build(std::vector<std::string_view>(paths));
}

const FieldSet* FieldSet::Child(std::string_view key) const {
  if (auto it = children_.find(key); it != children_.end()) return it->second.get();
  return keep_rest_ ? All().get() : nullptr;
}

std::shared_ptr<const FieldSet> FieldSet::ListEnvelope(std::shared_ptr<const FieldSet> object) {
  return AllBut("items", object ? std::move(object) : All());
}

std::shared_ptr<const FieldSet> FieldSet::EventEnvelope(std::shared_ptr<const FieldSet> object) {
  // An ERROR event's object is a Status ({"code": 410, "reason": "Expired", ...}), not an object
  // of the watched kind, and JSON does not promise that "type" is read first: keep a Status's
  // fields beside the object's own. (Found by bench/scale: a 410 trimmed to a pod's fields read
  // as "watch error 0", and the informer re-watched a compacted version forever.)
  if (!object || object->keep_rest_) return AllBut("object", object ? std::move(object) : All());
  auto obj = std::shared_ptr<FieldSet>(new FieldSet(*object));
  // Scalars whole, an object of the watched kind under the same key as {} (e.g. a Pod's
  // "status" when `object` does not select it); emplace keeps what `object` selects.
  const auto scalars = std::shared_ptr<const FieldSet>(new FieldSet());
  for (const char* key : {"kind", "apiVersion", "status", "message", "reason", "code"}) {
    obj->children_.emplace(key, scalars);
  }
  obj->children_.emplace("details", All());
  return AllBut("object", std::move(obj));
}

nlohmann::json ParseFields(std::string_view text, const FieldSet* fields) {
  using Json = nlohmann::json;
  if (fields == nullptr) return Json::parse(text, nullptr, /*allow_exceptions=*/false);
  // nlohmann's callback sees a depth, not a path: keep, per nesting level, the FieldSet of the
  // open container there (null: dropped) and whether it is an array, plus what the last key
  // read at that level selects. Level L's container opens with depth L-1 and its keys come
  // with depth L. Returning false at a container's start makes the parser skip building
  // anything inside it.
  struct Level {
    const FieldSet* fields = nullptr;
    bool array = false;
    const FieldSet* pending = nullptr;  // the value of the last key read here
  };
  std::vector<Level> levels(2);
  const Json::parser_callback_t callback = [&levels, fields](int depth, Json::parse_event_t event,
                                                             Json& parsed) {
    const auto d = static_cast<size_t>(depth);
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start: {
        const FieldSet* f = nullptr;
        if (d == 0) {
          f = fields;
        } else if (d < levels.size()) {
          const Level& parent = levels[d];
          f = parent.fields == nullptr ? nullptr : parent.array ? parent.fields : parent.pending;
        }
        if (levels.size() <= d + 1) levels.resize(d + 2);
        levels[d + 1] = {f, event == Json::parse_event_t::array_start, nullptr};
        return f != nullptr;
      }
      case Json::parse_event_t::key: {
        if (d >= levels.size() || levels[d].fields == nullptr || !parsed.is_string()) return false;
        levels[d].pending = levels[d].fields->Child(parsed.get_ref<const std::string&>());
        return levels[d].pending != nullptr;
      }
      case Json::parse_event_t::value:  // scalars: their key (or dropped container) decided
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        return true;
    }
    return true;
  };
  return Json::parse(text, callback, /*allow_exceptions=*/false);
}

}  // namespace feedguard::kube
