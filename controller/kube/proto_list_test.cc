#include "controller/kube/proto_list.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace feedguard::kube {
namespace {

// Protocol buffers wire encoding, just enough to build list bodies.
std::string Varint(uint64_t v) {
  std::string out;
  do {
    uint8_t b = v & 0x7f;
    v >>= 7;
    if (v) b |= 0x80;
    out.push_back(static_cast<char>(b));
  } while (v);
  return out;
}
std::string Bytes(int field, std::string_view payload) {
  return Varint(static_cast<uint64_t>(field) << 3 | 2) + Varint(payload.size()) +
         std::string(payload);
}
std::string Number(int field, uint64_t v) {
  return Varint(static_cast<uint64_t>(field) << 3) + Varint(v);
}

// "k8s\0" + Unknown{typeMeta, raw: PodList{metadata{resourceVersion}, items...}, contentType}.
std::string Body(const std::vector<std::string>& items, const std::string& rv,
                 const std::string& list_extra = "") {
  std::string list = Bytes(1, Bytes(2, rv) + Number(4, 7));  // ListMeta (+ remainingItemCount)
  for (const auto& i : items) list += Bytes(2, i);
  list += list_extra;
  const std::string type_meta = Bytes(1, "v1") + Bytes(2, "PodList");
  return std::string(kProtobufMagic) + Bytes(1, type_meta) + Bytes(2, list) + Bytes(3, "") +
         Bytes(4, "application/vnd.kubernetes.protobuf");
}

struct Split {
  std::vector<std::string> items;
  std::string rv;
  Status error;
};

// Feeds `body` in chunks of the sizes `next_size` gives.
Split SplitAll(std::string_view body, const std::function<size_t()>& next_size,
               size_t max_item = 1 << 20, size_t max_rest = 4096) {
  ProtoListSplitter s(max_item, max_rest);
  Split out;
  for (size_t pos = 0; pos < body.size();) {
    const size_t n = std::min(next_size(), body.size() - pos);
    auto r = s.Feed(body.substr(pos, n), [&](std::string_view item) {
      out.items.emplace_back(item);
      return true;
    });
    if (!r.ok()) {
      out.error = r.status();
      return out;
    }
    pos += n;
  }
  auto rv = s.Finish();
  if (rv.ok()) {
    out.rv = *rv;
  } else {
    out.error = rv.status();
  }
  return out;
}

TEST(ProtoListSplitterTest, ItemsAndResourceVersionWhateverTheChunking) {
  std::vector<std::string> items = {"", "a", std::string(300, 'x'), std::string(70000, 'y')};
  items[0] = Bytes(1, Bytes(1, "pod-0"));  // a Pod{metadata{name}}
  const std::string body = Body(items, "12345");
  const Split whole = SplitAll(body, [&] { return body.size(); });
  ASSERT_TRUE(whole.error.ok()) << whole.error.ToString();
  EXPECT_EQ(whole.items, items);
  EXPECT_EQ(whole.rv, "12345");
  const Split bytewise = SplitAll(body, [] { return size_t{1}; });
  ASSERT_TRUE(bytewise.error.ok()) << bytewise.error.ToString();
  EXPECT_EQ(bytewise.items, items);
  EXPECT_EQ(bytewise.rv, "12345");
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    const Split r = SplitAll(body, [&] { return size_t{1} + rng() % 5000; });
    ASSERT_TRUE(r.error.ok()) << r.error.ToString();
    EXPECT_EQ(r.items, items);
    EXPECT_EQ(r.rv, "12345");
  }
}

TEST(ProtoListSplitterTest, EmptyListAndUnknownFieldsInsideIt) {
  // A list with no items, and fields the splitter does not know (a varint, fixed32/64) skipped.
  std::string extra = Number(5, 99);
  extra += Varint(6 << 3 | 1) + std::string(8, '\1');
  extra += Varint(7 << 3 | 5) + std::string(4, '\2');
  const Split r = SplitAll(Body({}, "9", extra), [] { return size_t{3}; });
  ASSERT_TRUE(r.error.ok()) << r.error.ToString();
  EXPECT_TRUE(r.items.empty());
  EXPECT_EQ(r.rv, "9");
}

TEST(ProtoListSplitterTest, StopsWhenTheCallerSaysSo) {
  ProtoListSplitter s;
  int seen = 0;
  auto r = s.Feed(Body({"a", "b", "c"}, "1"), [&](std::string_view) { return ++seen < 2; });
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(*r);
  EXPECT_EQ(seen, 2);
}

TEST(ProtoListSplitterTest, RefusesWhatIsNotSuchAList) {
  auto all = [](std::string_view b) { return SplitAll(b, [&] { return b.size(); }); };
  EXPECT_FALSE(all(R"({"kind":"PodList","items":[]})").error.ok());  // JSON
  const std::string body = Body({"abc"}, "5");
  EXPECT_FALSE(all(body.substr(0, body.size() - 5)).error.ok());  // cut short
  EXPECT_FALSE(all(std::string(kProtobufMagic)).error.ok());      // no list at all
  // An item over the limit, and a ListMeta over the limit outside the items.
  EXPECT_FALSE(SplitAll(
                   Body({std::string(100, 'z')}, "1"), [] { return size_t{7}; }, 99)
                   .error.ok());
  EXPECT_TRUE(SplitAll(
                  Body({std::string(99, 'z')}, "1"), [] { return size_t{7}; }, 99)
                  .error.ok());
  EXPECT_FALSE(SplitAll(
                   Body({}, std::string(5000, '1')), [] { return size_t{64}; }, 1 << 20, 4096)
                   .error.ok());
  // A varint of 11 bytes; a field that claims more than the list holds; wire type 3 (a group).
  EXPECT_FALSE(all(std::string(kProtobufMagic) + std::string(11, '\xff')).error.ok());
  std::string lying = Bytes(2, "abc");
  lying[1] = 10;  // the item says 10 bytes inside a list of 5
  EXPECT_FALSE(all(std::string(kProtobufMagic) + Bytes(2, lying)).error.ok());
  EXPECT_FALSE(all(std::string(kProtobufMagic) + Varint(1 << 3 | 3)).error.ok());
  // Two lists in one body.
  EXPECT_FALSE(all(Body({"a"}, "1") + Bytes(2, Bytes(2, "b"))).error.ok());
}

}  // namespace
}  // namespace feedguard::kube
