#include "controller/kube/field_set.h"

#include <gtest/gtest.h>

namespace feedguard::kube {
namespace {

using Json = nlohmann::json;

const Json kPod = Json::parse(R"({
  "apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "7",
               "labels": {"managedFields": "a label of that name", "app": "x"},
               "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
               "annotations": {"big": "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy"}},
  "spec": {"nodeName": "n1",
           "volumes": [{"name": "v", "projected": {"sources": [{"serviceAccountToken": {}}]}}],
           "containers": [{"name": "a", "image": "i", "env": [{"name": "E", "value": "1"}],
                           "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": 1}}},
                          {"name": "b", "args": ["x", ["nested", {"k": 1}]]}],
           "managedFields": "a spec field of that name"},
  "status": {"phase": "Running", "conditions": [{"type": "Ready"}],
             "containerStatuses": [{"name": "a", "containerID": "containerd://1", "ready": true}]}
})");

TEST(FieldSetTest, NullKeepsEverything) { EXPECT_EQ(ParseFields(kPod.dump(), nullptr), kPod); }

TEST(FieldSetTest, AllButManagedFieldsDropsOnlyMetadataManagedFields) {
  Json want = kPod;
  want["metadata"].erase("managedFields");
  EXPECT_EQ(ParseFields(kPod.dump(), FieldSet::AllButManagedFields().get()), want);
}

TEST(FieldSetTest, OnlyKeepsTheListedPathsWithTheirSubtrees) {
  const auto f = FieldSet::Only({"metadata.name", "metadata.labels", "spec.containers.name",
                                 "spec.containers.resources", "status.containerStatuses.name"});
  const Json got = ParseFields(kPod.dump(), f.get());
  const Json want = Json::parse(R"({
    "metadata": {"name": "p", "labels": {"managedFields": "a label of that name", "app": "x"}},
    "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"},
                                                        "limits": {"nvidia.com/gpu": 1}}},
                            {"name": "b"}]},
    "status": {"containerStatuses": [{"name": "a"}]}
  })");
  EXPECT_EQ(got, want) << got.dump();
}

TEST(FieldSetTest, AShorterPathKeepsTheWholeSubtree) {
  const auto f = FieldSet::Only({"spec.containers.name", "spec"});
  EXPECT_EQ(ParseFields(kPod.dump(), f.get())["spec"], kPod["spec"]);
}

TEST(FieldSetTest, ListAndEventEnvelopes) {
  const auto pod = FieldSet::Only({"metadata.name", "metadata.resourceVersion"});
  Json list = {{"kind", "PodList"},
               {"metadata", {{"resourceVersion", "9"}, {"continue", "c"}}},
               {"items", {kPod, kPod}}};
  const Json got = ParseFields(list.dump(), FieldSet::ListEnvelope(pod).get());
  const Json item = {{"metadata", {{"name", "p"}, {"resourceVersion", "7"}}}};
  EXPECT_EQ(got, (Json{{"kind", "PodList"},
                       {"metadata", {{"resourceVersion", "9"}, {"continue", "c"}}},
                       {"items", {item, item}}}));

  const Json event = {{"type", "MODIFIED"}, {"object", kPod}};
  EXPECT_EQ(ParseFields(event.dump(), FieldSet::EventEnvelope(pod).get()),
            (Json{{"type", "MODIFIED"},
                  {"object",
                   {{"metadata", item["metadata"]},  // and the scalars a Status would carry
                    {"kind", "Pod"},
                    {"apiVersion", "v1"},
                    {"status", Json::object()}}}}));
  // An ERROR event's Status passes whole, whatever the object's fields (a 410 trimmed to a pod's
  // fields would no longer say 410, and the informer would never relist), in either key order.
  const Json status = {{"kind", "Status"},
                       {"apiVersion", "v1"},
                       {"metadata", Json::object()},
                       {"status", "Failure"},
                       {"reason", "Expired"},
                       {"message", "too old resource version: 5 (9)"},
                       {"details", {{"causes", {{{"message", "x"}}}}}},
                       {"code", 410}};
  for (const auto& object : {pod, FieldSet::AllButManagedFields()}) {
    const auto envelope = FieldSet::EventEnvelope(object);
    EXPECT_EQ(ParseFields(R"({"type": "ERROR", "object": )" + status.dump() + "}", envelope.get()),
              (Json{{"type", "ERROR"}, {"object", status}}));
    EXPECT_EQ(
        ParseFields(R"({"object": )" + status.dump() + R"(, "type": "ERROR"})", envelope.get()),
        (Json{{"type", "ERROR"}, {"object", status}}));
  }
}

TEST(FieldSetTest, ObjectsOfTheWrongShapeAndBadJson) {
  const auto f = FieldSet::Only({"spec.containers.name"});
  // Scalars where objects were expected, arrays of scalars, deep nesting in dropped parts.
  for (const char* text : {R"({"spec": 3})", R"({"spec": {"containers": "x"}})",
                           R"({"spec": {"containers": [1, "a", null]}})", R"([{"spec": {}}])",
                           R"("just a string")", R"({"x": [[[[[[[[{"y": [[[]]]}]]]]]]]]})"}) {
    const Json got = ParseFields(text, f.get());
    EXPECT_FALSE(got.is_discarded()) << text;
  }
  EXPECT_EQ(ParseFields(R"({"spec": {"containers": [1, "a", null]}})", f.get()),
            Json::parse(R"({"spec": {"containers": [1, "a", null]}})"));
  EXPECT_EQ(ParseFields(R"({"spec": 3, "x": {"y": 1}})", f.get()), Json::parse(R"({"spec": 3})"));
  EXPECT_TRUE(ParseFields(R"({"spec": )", f.get()).is_discarded());
  EXPECT_TRUE(ParseFields("", f.get()).is_discarded());
}

}  // namespace
}  // namespace feedguard::kube
