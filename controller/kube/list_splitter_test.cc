#include "controller/kube/list_splitter.h"

#include <gtest/gtest.h>

#include <vector>

#include <nlohmann/json.hpp>

#include "controller/kube/fake_transport.h"  // RandomChunks

namespace feedguard::kube {
namespace {

using Json = nlohmann::json;

struct Split {
  std::vector<Json> items;
  Json rest;
};

Result<Split> SplitAll(const std::vector<std::string>& chunks, size_t max_item = 64u << 20) {
  ListSplitter s(max_item);
  Split out;
  for (const auto& c : chunks) {
    auto r = s.Feed(c, [&](std::string_view item) {
      out.items.push_back(Json::parse(item));
      return true;
    });
    if (!r.ok()) return r.status();
  }
  FG_ASSIGN_OR_RETURN(std::string rest, s.Finish());
  out.rest = Json::parse(rest);
  return out;
}

// Strings that look like structure, escapes, a nested "items" key, nested arrays, metadata after
// the items: every way a byte walk could lose its place.
const std::string kList = R"({"kind": "PodList", "apiVersion": "v1",
  "metadata": {"resourceVersion": "42", "items": "a key of that name, not the list"},
  "items": [
    {"metadata": {"name": "a", "labels": {"x": "}]{[\"\\"}}, "spec": {"c": [[1, 2], [], {}]}},
    {"metadata": {"name": "b\u00e9"}, "items": [{"not": "an item of the list"}]} ,
    {}
  ],
  "trailer": {"continue": ""}})";

TEST(ListSplitterTest, ItemsOneByOneAndTheRestWithoutThem) {
  const Json whole = Json::parse(kList);
  Json rest = whole;
  rest["items"] = Json::array();
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(seed);
    auto got = SplitAll(RandomChunks(kList, seed, seed % 7 + 1));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->items.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(got->items[i], whole["items"][i]);
    EXPECT_EQ(got->rest, rest);
  }
}

TEST(ListSplitterTest, EmptyNullAndMissingItems) {
  for (const char* text : {R"({"metadata": {"resourceVersion": "1"}, "items": []})",
                           R"({"items": null, "metadata": {}})", R"({"metadata": {}})"}) {
    auto got = SplitAll({text});
    ASSERT_TRUE(got.ok()) << text << ": " << got.status().ToString();
    EXPECT_TRUE(got->items.empty()) << text;
  }
}

TEST(ListSplitterTest, StopsWhenTheHandlerSaysSo) {
  ListSplitter s;
  int n = 0;
  auto r = s.Feed(kList, [&](std::string_view) { return ++n < 2; });
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(*r);
  EXPECT_EQ(n, 2);
}

TEST(ListSplitterTest, BadBodiesAndLimitsAreErrors) {
  // Not an object, a scalar item, bytes after the list, a body cut short.
  EXPECT_FALSE(SplitAll({"[1, 2]"}).ok());
  EXPECT_FALSE(SplitAll({R"({"items": [1]})"}).ok());
  EXPECT_FALSE(SplitAll({R"({"items": []} {)"}).ok());
  auto cut = SplitAll({R"({"items": [{"a": 1}, {"b")"});
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().code(), StatusCode::kUnavailable);
  // An item over the limit.
  auto big = SplitAll({R"({"items": [{"a": "0123456789012345678901234567890123456789"}]})"}, 16);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  // The limit is inclusive, however the item is cut into chunks.
  const std::string item = R"({"a": "0123456789"})";  // 19 bytes
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    const std::string body = R"({"items": [)" + item + "]}";
    EXPECT_TRUE(SplitAll(RandomChunks(body, seed, seed % 5 + 1), item.size()).ok());
    auto over = SplitAll(RandomChunks(body, seed, seed % 5 + 1), item.size() - 1);
    ASSERT_FALSE(over.ok());
    EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  }
}

}  // namespace
}  // namespace feedguard::kube
