// field_set.h — which fields of a listed or watched object the controller keeps, applied while
// the JSON is parsed.
//
// The controller reads a handful of fields of every Pod (150,000 at the design point) and Node,
// and the API server sends all of them: defaults, volumes, env, probes, conditions, managedFields,
// a Node's image list. Building nlohmann's tree of all that, only to drop it after the projection,
// was most of the controller's CPU in a start or relist (perf, issue 14). A FieldSet tells the
// parser which keys to build; the rest is still read (JSON has no way to skip) but never
// allocated. Arrays are transparent: a FieldSet for "spec.containers" applies to each element.
#pragma once

#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace feedguard::kube {

class FieldSet {
 public:
  // Everything, except metadata.managedFields (server-side apply's field ownership: ~1 KB per
  // object and writer, read by nothing here). What an object whose readers are not listed gets.
  static std::shared_ptr<const FieldSet> AllButManagedFields();
  // Only these dotted paths, each with its whole subtree (e.g. "metadata.labels",
  // "spec.containers.resources"); objects on the way are kept with just the listed keys.
  static std::shared_ptr<const FieldSet> Only(std::initializer_list<std::string_view> paths);

  // What the value of `key` keeps: nullptr when the key is dropped.
  const FieldSet* Child(std::string_view key) const;

  // For the parser: an envelope around objects of `object` (a list page's "items", a watch
  // event's "object"; null: whole objects); the envelope's own fields are kept, and so are the
  // fields of the Status
  // an ERROR event carries in place of an object (kind, apiVersion, status, message, reason,
  // details, code) — whatever `object` selects.
  static std::shared_ptr<const FieldSet> ListEnvelope(std::shared_ptr<const FieldSet> object);
  static std::shared_ptr<const FieldSet> EventEnvelope(std::shared_ptr<const FieldSet> object);

 private:
  FieldSet() = default;
  // Everything below (one shared constant; Child() of a keep-rest set returns it too).
  static const std::shared_ptr<const FieldSet>& All();
  // Everything but `key`, whose value keeps `child` (null: dropped).
  static std::shared_ptr<FieldSet> AllBut(const std::string& key,
                                          std::shared_ptr<const FieldSet> child);
  static std::shared_ptr<const FieldSet> Build(const std::vector<std::string_view>& paths);
  bool keep_rest_ = false;  // keys not in children_: kept whole (true) or dropped (false)
  // A key in children_ with a null FieldSet is dropped even when keep_rest_ is set.
  std::map<std::string, std::shared_ptr<const FieldSet>, std::less<>> children_;
};

// Parses `text` keeping only what `fields` selects (nothing is dropped when it is null).
// Returns a discarded value (is_discarded()) when the text is not JSON; never throws.
nlohmann::json ParseFields(std::string_view text, const FieldSet* fields);

}  // namespace feedguard::kube
