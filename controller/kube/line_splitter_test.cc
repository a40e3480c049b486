#include "controller/kube/line_splitter.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace feedguard::kube {
namespace {

std::vector<std::string> FeedAll(LineSplitter& s, const std::vector<std::string>& chunks) {
  std::vector<std::string> out;
  for (const auto& c : chunks) {
    auto r = s.Feed(c, [&](std::string_view l) {
      out.emplace_back(l);
      return true;
    });
    EXPECT_TRUE(r.ok());
  }
  return out;
}

TEST(LineSplitterTest, WholeLinesInOneChunk) {
  LineSplitter s;
  auto out = FeedAll(s, {"{\"a\":1}\n{\"b\":2}\n"});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0], "{\"a\":1}");
  EXPECT_EQ(out[1], "{\"b\":2}");
  EXPECT_EQ(s.pending(), 0u);
}

TEST(LineSplitterTest, HoldsPartialLineUntilNewline) {
  LineSplitter s;
  auto out = FeedAll(s, {"{\"a\"", ":1}"});
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(s.partial(), "{\"a\":1}");
  out = FeedAll(s, {"\r\n\n"});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], "{\"a\":1}");
}

TEST(LineSplitterTest, RandomSplitsReproduceTheLines) {
  std::mt19937 rng(12345);
  std::vector<std::string> lines;
  std::string stream;
  for (int i = 0; i < 200; ++i) {
    std::string l = "{\"type\":\"MODIFIED\",\"object\":{\"i\":" + std::to_string(i) +
                    ",\"pad\":\"" + std::string(rng() % 300, 'x') + "\"}}";
    lines.push_back(l);
    stream += l + "\n";
  }
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::string> chunks;
    size_t pos = 0;
    while (pos < stream.size()) {
      size_t n = 1 + rng() % (trial % 2 ? 7 : 700);  // tiny and large chunks
      chunks.push_back(stream.substr(pos, n));
      pos += n;
    }
    LineSplitter s;
    auto out = FeedAll(s, chunks);
    ASSERT_EQ(out, lines) << "trial " << trial;
    EXPECT_EQ(s.pending(), 0u);
  }
}

TEST(LineSplitterTest, StopEarlyKeepsRest) {
  LineSplitter s;
  std::vector<std::string> out;
  auto r = s.Feed("a\nb\nc", [&](std::string_view l) {
    out.emplace_back(l);
    return false;
  });
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(*r);
  EXPECT_EQ(out, std::vector<std::string>{"a"});
  EXPECT_EQ(s.partial(), "b\nc");
}

TEST(LineSplitterTest, OverlongLineIsAnError) {
  LineSplitter s(8);
  auto r = s.Feed("0123456789", [](std::string_view) { return true; });
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
}

TEST(LineSplitterTest, OverlongLineIsAnErrorWhereverTheChunksCutIt) {
  // Found by fuzz_line_splitter (seed corpus/line_splitter/over-limit): a line over the limit
  // was refused when its bytes arrived without a newline, but passed through when the chunk
  // that held its newline completed it.
  {
    LineSplitter s(8);
    auto r = s.Feed("0123456789\n", [](std::string_view) { return true; });
    EXPECT_FALSE(r.ok());
  }
  {
    LineSplitter s(8);
    std::vector<std::string> out;
    auto on_line = [&](std::string_view l) {
      out.emplace_back(l);
      return true;
    };
    ASSERT_TRUE(s.Feed("ok\n012345", on_line).ok());
    auto r = s.Feed("6789\nnext\n", on_line);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
    EXPECT_EQ(out, std::vector<std::string>{"ok"});
  }
  {
    LineSplitter s(8);  // exactly at the limit is fine, either way it arrives
    std::vector<std::string> out;
    auto on_line = [&](std::string_view l) {
      out.emplace_back(l);
      return true;
    };
    ASSERT_TRUE(s.Feed("0123", on_line).ok());
    ASSERT_TRUE(s.Feed("4567\n01234567\n", on_line).ok());
    EXPECT_EQ(out, (std::vector<std::string>{"01234567", "01234567"}));
  }
}

}  // namespace
}  // namespace feedguard::kube
