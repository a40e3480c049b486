// list_splitter_fuzz.cc — the streamed list's item splitting (controller/kube/list_splitter):
// a list response from the API server, cut into chunks at arbitrary positions. Properties: the
// result (items, the rest, or the error's code) does not depend on the chunking; no item exceeds
// the limit; for a body that is a JSON object, every item it emits is a JSON object, the rest is
// one too, and it fails only on a limit or on an item that is not an object; PeekIdentity of
// each item reads the key and resourceVersion that parsing it gives.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "controller/kube/list_splitter.h"
#include "controller/kube/resource.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

struct Outcome {
  std::vector<std::string> items;
  std::string rest;
  feedguard::StatusCode code = feedguard::StatusCode::kOk;
  std::string message;
};

Outcome Run(std::string_view body, size_t max_item, uint32_t seed) {
  feedguard::kube::ListSplitter splitter(max_item, 4096);
  Outcome out;
  uint32_t x = seed * 2654435761u + 1;
  for (size_t pos = 0; pos < body.size();) {
    x = x * 1103515245u + 12345u;
    const size_t n = std::min<size_t>(1 + (x >> 8) % 64, body.size() - pos);
    auto r = splitter.Feed(body.substr(pos, n), [&](std::string_view item) {
      FG_FUZZ_CHECK(item.size() <= max_item);
      out.items.emplace_back(item);
      return true;
    });
    if (!r.ok()) {
      out.code = r.status().code();
      out.message = r.status().message();
      return out;
    }
    pos += n;
  }
  auto rest = splitter.Finish();
  if (!rest.ok()) {
    out.code = rest.status().code();
    out.message = rest.status().message();
  } else {
    out.rest = *rest;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  // Byte 0: the item limit (16..4096 bytes, so the fuzzer reaches it); byte 1: a chunking seed.
  if (size < 2) return 0;
  const size_t max_item = 16 + 16 * static_cast<size_t>(data[0]);
  const std::string_view body = AsText(data + 2, size - 2);
  const Outcome a = Run(body, max_item, data[1]);
  const Outcome b = Run(body, max_item, data[1] + 7919u);
  FG_FUZZ_CHECK(a.code == b.code && a.items == b.items && a.rest == b.rest);
  // The splitter walks structure, it does not validate: a body that is not JSON may yield items
  // that are not either (the client parses each and refuses those). A body that is a JSON object
  // yields items that are JSON objects and a rest that is one, or fails only on a limit or on an
  // item that is not an object.
  // (nlohmann reads a NUL byte as the end of its input; the splitter refuses bytes after the
  // list, NULs included.)
  const auto whole = nlohmann::json::parse(body, nullptr, false);
  if (body.find('\0') == std::string_view::npos && !whole.is_discarded() && whole.is_object()) {
    FG_FUZZ_CHECK(a.code == feedguard::StatusCode::kOk ||
                  a.code == feedguard::StatusCode::kResourceExhausted ||
                  a.message == "list response: an item is not a JSON object");
    if (a.code == feedguard::StatusCode::kOk) {
      for (const auto& item : a.items) {
        const auto j = nlohmann::json::parse(item, nullptr, false);
        FG_FUZZ_CHECK(!j.is_discarded() && j.is_object());
        // What a relist compares before parsing an item is what parsing it would give (on
        // the item as nlohmann writes it back: the item itself may repeat a key).
        const auto id = feedguard::kube::PeekIdentity(j.dump());
        FG_FUZZ_CHECK(id.has_value() && id->key == feedguard::kube::ObjectKey(j) &&
                      id->resource_version == feedguard::kube::ResourceVersionOf(j));
      }
      const auto rest = nlohmann::json::parse(a.rest, nullptr, false);
      FG_FUZZ_CHECK(!rest.is_discarded() && rest.is_object());
    }
  }
  return 0;
}
