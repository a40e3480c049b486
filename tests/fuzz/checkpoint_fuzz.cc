// checkpoint_fuzz.cc — the agent's state file (checkpoint.json on a host path): a damaged or
// tampered file is refused or read, never a crash; what is read serialises back to the same
// entries.
#include "agent/enforcer/checkpoint.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  using feedguard::agent::CheckpointEntry;
  using feedguard::agent::CheckpointStore;
  std::map<std::string, CheckpointEntry> entries;
  uint64_t version = 0;
  if (!CheckpointStore::Parse(std::string(AsText(data, size)), &entries, &version).ok()) return 0;
  std::map<std::string, CheckpointEntry> again;
  uint64_t version2 = 0;
  FG_FUZZ_CHECK(
      CheckpointStore::Parse(CheckpointStore::Serialize(entries, version), &again, &version2).ok());
  FG_FUZZ_CHECK(again == entries);
  FG_FUZZ_CHECK(version2 == version);
  return 0;
}
