// yaml_bounds_test.cc — YAML bombs are refused before anything copies the expanded tree.
#include "common/yaml_bounds.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace feedguard {
namespace {

constexpr YamlLimits kLimits{.max_input_bytes = 8u << 20,
                             .max_nodes = 200'000,
                             .max_expanded_bytes = 16u << 20,
                             .max_depth = 64};

// One scalar of `scalar_bytes` anchored once and referenced by `aliases` aliases: a few MB of
// text that a reader copying each value turns into scalar_bytes × aliases.
std::string ByteBomb(size_t scalar_bytes, int aliases) {
  std::string text = "big: &a \"" + std::string(scalar_bytes, 'A') + "\"\nrefs:\n";
  for (int i = 0; i < aliases; ++i) text += "  - *a\n";
  return text;
}

// Nested anchors: 10 levels of 10 aliases each, 10^10 leaves once expanded.
std::string BillionLaughs() {
  std::string text = "l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i < 10; ++i) {
    const std::string prev = "*l" + std::to_string(i - 1);
    text += "l" + std::to_string(i) + ": &l" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) text += (k ? ", " : "") + prev;
    text += "]\n";
  }
  return text;
}

TEST(YamlBoundsTest, ByteBombIsRefusedByItsExpandedBytes) {
  for (size_t mib : {1u, 4u}) {
    const std::string text = ByteBomb(mib << 20, 1000);
    ASSERT_LT(text.size(), kLimits.max_input_bytes);
    const auto t0 = std::chrono::steady_clock::now();
    auto root = LoadYamlBounded(text, kLimits);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_FALSE(root.ok()) << mib << " MiB x 1000 accepted";
    EXPECT_EQ(root.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(root.status().message().find("bytes of keys and scalars once aliases are expanded"),
              std::string::npos)
        << root.status().ToString();
    std::printf("    %zu MiB x 1000 aliases: refused in %.3f s\n", mib, s);
  }
  // The same scalar under few enough aliases is an ordinary document.
  auto ok = LoadYamlBounded(ByteBomb(1u << 20, 10), kLimits);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)["refs"][9].Scalar().size(), 1u << 20);
}

TEST(YamlBoundsTest, NodeBombIsRefusedByItsExpandedNodes) {
  auto root = LoadYamlBounded(BillionLaughs(), kLimits);
  ASSERT_FALSE(root.ok());
  EXPECT_NE(root.status().message().find("nodes once aliases are expanded"), std::string::npos)
      << root.status().ToString();
}

TEST(YamlBoundsTest, DepthInputSizeAndParseErrorsAreRefused) {
  auto deep = LoadYamlBounded(std::string(100, '[') + std::string(100, ']'), kLimits);
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("nested deeper than 64"), std::string::npos)
      << deep.status().ToString();
  auto at_limit = LoadYamlBounded(std::string(64, '[') + std::string(64, ']'), kLimits);
  EXPECT_TRUE(at_limit.ok()) << at_limit.status().ToString();
  YamlLimits small = kLimits;
  small.max_input_bytes = 10;
  auto big = LoadYamlBounded("a: 12345678901", small);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("more than 10"), std::string::npos);
  auto bad = LoadYamlBounded("a: [1, 2", kLimits);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("not valid YAML"), std::string::npos);
}

TEST(YamlBoundsTest, AnAliasInsideItsOwnAnchorIsRefusedNotFollowedForever) {
  auto root = LoadYamlBounded("a: &x [1, *x]\n", kLimits);
  EXPECT_FALSE(root.ok());
}

TEST(YamlBoundsTest, KeysCountAndOrdinaryAliasesPass) {
  // Keys are bytes a reader copies too.
  YamlLimits tight = kLimits;
  tight.max_expanded_bytes = 100;
  auto keys = LoadYamlBounded("? " + std::string(200, 'k') + "\n: v\n", tight);
  ASSERT_FALSE(keys.ok());
  auto fine = LoadYamlBounded(
      "defaults: &d {cpu: 1, mem: 2}\npods:\n  - {name: a, limits: *d}\n  - {name: b, limits: "
      "*d}\n",
      kLimits);
  ASSERT_TRUE(fine.ok()) << fine.status().ToString();
  EXPECT_EQ((*fine)["pods"][1]["limits"]["mem"].as<int>(), 2);
}

TEST(YamlBoundsTest, FilesAreReadOnlyUpToTheInputBound) {
  const std::string path = ::testing::TempDir() + "/yaml_bounds_test.yaml";
  {
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    const std::string text = ByteBomb(1u << 20, 1000);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  auto bomb = LoadYamlFileBounded(path, kLimits);
  ASSERT_FALSE(bomb.ok());
  EXPECT_NE(bomb.status().message().find(path), std::string::npos) << bomb.status().ToString();
  YamlLimits small = kLimits;
  small.max_input_bytes = 1000;
  auto big = LoadYamlFileBounded(path, small);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("larger than 1000 bytes"), std::string::npos);
  EXPECT_EQ(LoadYamlFileBounded(path + ".absent", kLimits).status().code(), StatusCode::kNotFound);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace feedguard
