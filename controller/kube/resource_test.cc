#include "controller/kube/resource.h"

#include <gtest/gtest.h>

#include <string>

namespace feedguard::kube {
namespace {

// PeekIdentity reads what ObjectKey and ResourceVersionOf read of the parsed object.
void ExpectSameAsParsed(const std::string& text) {
  SCOPED_TRACE(text);
  const Json j = Json::parse(text);
  const auto id = PeekIdentity(text);
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(id->key, ObjectKey(j));
  EXPECT_EQ(id->resource_version, ResourceVersionOf(j));
}

TEST(PeekIdentityTest, ReadsWhatTheAccessorsReadOfTheParsedObject) {
  // As the API server writes a pod: metadata first, opening with the three fields.
  ExpectSameAsParsed(
      R"({"metadata":{"name":"p","namespace":"ns","uid":"u","resourceVersion":"42",)"
      R"("labels":{"name":"not-it","namespace":"nor-this"},"ownerReferences":[{"name":"rs"}]},)"
      R"("spec":{"nodeName":"n"},"status":{"phase":"Running"}})");
  // Cluster-scoped (no namespace: read to the end of metadata), fields in any order, metadata
  // after the rest, nested objects with the same key names before the real ones.
  ExpectSameAsParsed(R"({"metadata":{"resourceVersion":"7","labels":{"a":"b"},"name":"node-1"}})");
  ExpectSameAsParsed(
      R"({"spec":{"metadata":{"name":"template","namespace":"x","resourceVersion":"1"}},)"
      R"("kind":"Pod","metadata":{"annotations":{"resourceVersion":"9"},"resourceVersion":"3",)"
      R"("namespace":"b","name":"a"}})");
  // Missing, null or non-string fields read as "", as the accessors read them.
  ExpectSameAsParsed(R"({"metadata":{"name":5,"namespace":null,"resourceVersion":["1"]}})");
  ExpectSameAsParsed(R"({"metadata":"not an object","items":[1,2]})");
  ExpectSameAsParsed(R"({"spec":{}})");
  ExpectSameAsParsed(R"({})");
  // Escapes are decoded.
  ExpectSameAsParsed(
      R"({"metadata":{"name":"a\u00e9\"b","namespace":"n\/s","resourceVersion":"1"}})");
}

TEST(PeekIdentityTest, StopsAtTheIdentityAndRefusesWhatIsNotAnObject) {
  // The text after the identity is not read: a pod's spec and status cost nothing.
  auto id = PeekIdentity(R"({"metadata":{"name":"p","namespace":"ns","resourceVersion":"5"},)"
                         R"("spec": this is never parsed)");
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(id->key, "ns/p");
  EXPECT_EQ(id->resource_version, "5");
  for (const char* text : {"[1]", "\"s\"", "7", "", "{", R"({"metadata":{"name":"p")"}) {
    EXPECT_FALSE(PeekIdentity(text).has_value()) << text;
  }
}

TEST(ObjectKeyTest, NamespacedAndClusterScoped) {
  EXPECT_EQ(ObjectKey("ns", "a"), "ns/a");
  EXPECT_EQ(ObjectKey("", "a"), "a");
  EXPECT_EQ(ObjectKey(Json{{"metadata", {{"name", "a"}, {"namespace", "ns"}}}}), "ns/a");
}

}  // namespace
}  // namespace feedguard::kube
