// list_splitter.h — splits a Kubernetes list response ({"kind": …, "metadata": {…}, "items":
// [{…}, {…}]}) into its items as the bytes arrive, so that a list of 150,000 pods is parsed one
// object at a time and never held whole (the informers' unpaginated, streamed list).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "feedguard/common/status.h"

namespace feedguard::kube {

class ListSplitter {
 public:
  // An item longer than `max_item` bytes, or more than `max_rest` bytes outside the items, is an
  // error (a runaway or hostile body).
  explicit ListSplitter(size_t max_item = 64u << 20, size_t max_rest = 1u << 20)
      : max_item_(max_item), max_rest_(max_rest) {}

  // Feeds one chunk; calls `on_item` with the text of each complete element of the top-level
  // "items" array. Stops early and returns false when `on_item` returns false. An error when
  // the body is not a JSON object, an item is not an object, or a limit is exceeded.
  Result<bool> Feed(std::string_view chunk, const std::function<bool(std::string_view)>& on_item);

  // After the last chunk: the list without its items ({"kind": …, "metadata": …, "items": []}),
  // or an error when the body ended before the list did.
  Result<std::string> Finish() const;

 private:
  enum class Mode { kOutside, kBetweenItems, kInItem };
  enum class StringPart { kChar, kEscape, kEnd };
  // One byte outside an item (the envelope, or between items).
  Status Step(char c);
  // Bytes inside an item, up to the end of `bytes` or of the item (handed to `on_item`);
  // returns how many it consumed.
  Result<size_t> ScanItem(std::string_view bytes,
                          const std::function<bool(std::string_view)>& on_item, bool* stop);
  // A byte inside a string: a plain character, part of an escape, or the closing quote.
  StringPart StringByte(char c);

  size_t max_item_, max_rest_;
  Mode mode_ = Mode::kOutside;
  int depth_ = 0;  // open objects and arrays, strings excluded
  bool in_string_ = false, escape_ = false;
  bool started_ = false, done_ = false;  // the top-level object opened / closed
  // The top-level object's keys: the next string at depth 1 is a key after '{' or ','.
  bool expect_key_ = false, key_is_items_ = false, in_key_ = false;
  std::string key_;   // the key being read at depth 1 (only its first bytes)
  std::string item_;  // the item being read
  std::string rest_;  // everything outside the items
};

}  // namespace feedguard::kube
