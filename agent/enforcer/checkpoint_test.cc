#include "agent/enforcer/checkpoint.h"
#include "agent/enforcer/fake_node.h"
#include "tests/fixtures/temp_dir.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace feedguard::agent {
namespace {

namespace fs = std::filesystem;
using feedguard::testing::TempDir;

using testutil::Slurp;

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

CheckpointEntry Entry(const std::string& path, const std::string& original,
                      const std::string& written) {
  return CheckpointEntry{.path = path,
                         .knob = fs::path(path).filename().string(),
                         .pod_uid = "uid-1",
                         .original = original,
                         .written = written,
                         .also_ours = {}};
}

TEST(CheckpointStoreTest, EmptyDirOpensEmpty) {
  TempDir dir;
  auto store = CheckpointStore::Open(dir.path() + "/state");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->size(), 0u);
  EXPECT_EQ((*store)->applied_version(), 0u);
  EXPECT_FALSE(fs::exists((*store)->file_path()));
}

TEST(CheckpointStoreTest, PersistsBeforeReturningAndReloadsExactBytes) {
  TempDir dir;
  const CheckpointEntry a = Entry("/cg/cpu/kubepods/podA/cpu.shares", "1024\n", "2");
  CheckpointEntry b = Entry("/cg/cpuset/kubepods/podA/cpuset.cpus", "0-7\n", "2-3");
  b.also_ours = {"0-7\n", "0-7,9"};
  // Bytes a text format could mangle: no newline, tabs, quotes, a NUL and a non-ASCII byte.
  const CheckpointEntry c = Entry("/cg/x/odd", std::string("a\t\"b\"\0\xff\n", 9), "");
  {
    auto store = CheckpointStore::Open(dir.path());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE((*store)->Commit({a, b, c}, {}).ok());
    ASSERT_TRUE((*store)->SetAppliedVersion(7).ok());
    // What is on disk already, without closing the store, holds the entries.
    std::map<std::string, CheckpointEntry> on_disk;
    uint64_t version = 0;
    ASSERT_TRUE(CheckpointStore::Parse(Slurp((*store)->file_path()), &on_disk, &version).ok());
    EXPECT_EQ(on_disk.size(), 3u);
    EXPECT_EQ(version, 7u);
  }
  auto store = CheckpointStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->applied_version(), 7u);
  ASSERT_EQ((*store)->size(), 3u);
  EXPECT_EQ((*store)->Get(a.path), a);
  EXPECT_EQ((*store)->Get(b.path), b);
  auto got_c = (*store)->Get(c.path);
  ASSERT_TRUE(got_c.has_value());
  EXPECT_EQ(got_c->original.size(), 9u);
  EXPECT_EQ(*got_c, c);
  EXPECT_FALSE((*store)->Get("/cg/none").has_value());
}

TEST(CheckpointStoreTest, UpsertRemoveAndPodFilter) {
  TempDir dir;
  auto store = CheckpointStore::Open(dir.path());
  ASSERT_TRUE(store.ok());
  auto a = Entry("/a/cpu.idle", "0\n", "1");
  auto b = Entry("/b/cpu.idle", "0\n", "1");
  b.pod_uid = "uid-2";
  ASSERT_TRUE((*store)->Commit({a, b}, {}).ok());
  a.written = "0";
  ASSERT_TRUE((*store)->Put(a).ok());
  EXPECT_EQ((*store)->Get("/a/cpu.idle")->written, "0");
  EXPECT_EQ((*store)->EntriesForPod("uid-2").size(), 1u);
  ASSERT_TRUE((*store)->Remove("/b/cpu.idle").ok());
  EXPECT_TRUE((*store)->EntriesForPod("uid-2").empty());
  auto reopened_entries = (*store)->Entries();
  ASSERT_EQ(reopened_entries.size(), 1u);
  EXPECT_EQ(reopened_entries[0], a);
}

TEST(CheckpointStoreTest, NoOpCommitDoesNotTouchDisk) {
  TempDir dir;
  auto store = CheckpointStore::Open(dir.path());
  ASSERT_TRUE(store.ok());
  auto a = Entry("/a/cpu.idle", "0\n", "1");
  ASSERT_TRUE((*store)->Put(a).ok());
  const uint64_t saves = (*store)->saves();
  EXPECT_EQ(saves, 1u);
  ASSERT_TRUE((*store)->Put(a).ok());
  ASSERT_TRUE((*store)->Remove("/not/there").ok());
  ASSERT_TRUE((*store)->Commit({}, {}).ok());
  EXPECT_EQ((*store)->saves(), saves);
}

TEST(CheckpointStoreTest, RejectsRelativePaths) {
  TempDir dir;
  auto store = CheckpointStore::Open(dir.path());
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->Put(Entry("rel/cpu.idle", "0\n", "1")).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*store)->size(), 0u);
}

TEST(CheckpointStoreTest, TornTempFileIsIgnoredAndRemoved) {
  TempDir dir;
  const auto a = Entry("/a/cpu.shares", "1024\n", "2");
  {
    auto store = CheckpointStore::Open(dir.path());
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Put(a).ok());
  }
  // A save that died half-way: the temp file holds a truncated, newer record.
  const std::string committed = Slurp(dir.path() + "/checkpoint.json");
  auto b = Entry("/b/cpu.shares", "512\n", "2");
  std::map<std::string, CheckpointEntry> newer{{a.path, a}, {b.path, b}};
  std::string torn = CheckpointStore::Serialize(newer, 3);
  torn.resize(torn.size() / 2);
  WriteFile(dir.path() + "/checkpoint.json.tmp", torn);

  auto store = CheckpointStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->size(), 1u);
  EXPECT_EQ((*store)->Get(a.path), a);
  EXPECT_EQ((*store)->applied_version(), 0u);
  EXPECT_FALSE(fs::exists(dir.path() + "/checkpoint.json.tmp"));
  EXPECT_EQ(Slurp(dir.path() + "/checkpoint.json"), committed);
}

TEST(CheckpointStoreTest, CorruptCommittedFileIsAnErrorNotAnEmptyStore) {
  TempDir dir;
  WriteFile(dir.path() + "/checkpoint.json", "{\"format\":1,\"entries\":[{\"pa");
  auto store = CheckpointStore::Open(dir.path());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kInternal);
  // And the file is left for a human to look at.
  EXPECT_TRUE(fs::exists(dir.path() + "/checkpoint.json"));
}

TEST(CheckpointStoreTest, ParseRejectsWrongShapes) {
  std::map<std::string, CheckpointEntry> e;
  uint64_t v = 0;
  EXPECT_FALSE(CheckpointStore::Parse("[]", &e, &v).ok());
  EXPECT_FALSE(CheckpointStore::Parse("{\"format\":2,\"entries\":[]}", &e, &v).ok());
  EXPECT_FALSE(CheckpointStore::Parse("{\"format\":1}", &e, &v).ok());
  EXPECT_FALSE(CheckpointStore::Parse("{\"format\":1,\"entries\":[{\"path\":\"\"}]}", &e, &v).ok());
  EXPECT_FALSE(CheckpointStore::Parse(
                   "{\"format\":1,\"entries\":[{\"path\":\"/a\",\"original_hex\":\"zz\"}]}", &e, &v)
                   .ok());
  EXPECT_TRUE(CheckpointStore::Parse("{\"format\":1,\"entries\":[]}", &e, &v).ok());
}

// A v2 cpuset reset in flight (Enforcer::ResetChildCpusetsLocked) is on disk before the first of
// its writes, survives a reopen, and is gone once finished; a malformed one is refused.
TEST(CheckpointStoreTest, CpusetResetsPersistAndReload) {
  TempDir dir;
  {
    auto store = CheckpointStore::Open(dir.path());
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->SetCpusetReset("/sys/fs/cgroup/kubepods.slice/pod-a.slice", true).ok());
    const uint64_t saves = (*store)->saves();
    ASSERT_TRUE((*store)->SetCpusetReset("/sys/fs/cgroup/kubepods.slice/pod-a.slice", true).ok());
    EXPECT_EQ((*store)->saves(), saves);  // already pending: nothing written
    EXPECT_FALSE((*store)->SetCpusetReset("relative/dir", true).ok());
  }
  {
    auto store = CheckpointStore::Open(dir.path());
    ASSERT_TRUE(store.ok());
    EXPECT_EQ((*store)->cpuset_resets(),
              (std::set<std::string>{"/sys/fs/cgroup/kubepods.slice/pod-a.slice"}));
    ASSERT_TRUE((*store)->SetCpusetReset("/sys/fs/cgroup/kubepods.slice/pod-a.slice", false).ok());
  }
  auto store = CheckpointStore::Open(dir.path());
  ASSERT_TRUE(store.ok());
  EXPECT_TRUE((*store)->cpuset_resets().empty());
  std::map<std::string, CheckpointEntry> entries;
  uint64_t version = 0;
  std::set<std::string> resets;
  EXPECT_FALSE(
      CheckpointStore::Parse(R"({"format":1,"entries":[],"cpuset_resets":[{"dir":"relative"}]})",
                             &entries, &version, &resets)
          .ok());
  EXPECT_FALSE(CheckpointStore::Parse(R"({"format":1,"entries":[],"cpuset_resets":{}})", &entries,
                                      &version, &resets)
                   .ok());
}

TEST(CheckpointStoreTest, SecondStoreOnSameDirIsRefusedUntilFirstCloses) {
  TempDir dir;
  auto first = CheckpointStore::Open(dir.path());
  ASSERT_TRUE(first.ok());
  // flock is per open file description, so a second Open in this process conflicts too.
  auto second = CheckpointStore::Open(dir.path());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kAborted);
  first->reset();
  auto third = CheckpointStore::Open(dir.path());
  EXPECT_TRUE(third.ok()) << third.status().ToString();
}

TEST(CheckpointStoreTest, KilledWriterLeavesLastCommittedRecord) {
  TempDir dir;
  // A child commits entries one by one and is SIGKILLed at an arbitrary point; whatever is on
  // disk afterwards parses and is a prefix of the sequence (never torn, never empty-but-present).
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto store = CheckpointStore::Open(dir.path());
    if (!store.ok()) ::_exit(2);
    for (int i = 0; i < 100000; ++i) {
      auto e = Entry("/x/" + std::to_string(i), "orig\n", "w");
      if (!(*store)->Put(e).ok()) ::_exit(3);
    }
    ::_exit(0);
  }
  // Let it make some progress, then kill it.
  for (int i = 0; i < 200 && !fs::exists(dir.path() + "/checkpoint.json"); ++i) ::usleep(5000);
  ::usleep(50000);
  ::kill(pid, SIGKILL);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(wstatus)) << "child exited on its own with " << wstatus;
  auto store = CheckpointStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const size_t n = (*store)->size();
  EXPECT_GT(n, 0u);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_TRUE((*store)->Get("/x/" + std::to_string(i)).has_value()) << i;
  }
}

}  // namespace
}  // namespace feedguard::agent
