#include "agent/enforcer/checkpoint.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/fd.h"
#include "common/locked.h"

namespace feedguard::agent {
namespace {

constexpr char kFileName[] = "checkpoint.json";
constexpr char kTempName[] = "checkpoint.json.tmp";
constexpr char kLockName[] = "checkpoint.lock";
constexpr int kFormatVersion = 1;

std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

bool IsPlainAscii(const std::string& s) {
  for (unsigned char c : s) {
    if (c >= 0x80) return false;
  }
  return true;
}

std::string ToHex(const std::string& s) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 0xf]);
  }
  return out;
}

bool FromHex(const std::string& hex, std::string* out) {
  if (hex.size() % 2 != 0) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  out->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi << 4 | lo));
  }
  return true;
}

// Cgroup files are ASCII; anything else is kept exactly through a hex form.
void PutBytes(nlohmann::json& j, const std::string& key, const std::string& value) {
  if (IsPlainAscii(value)) {
    j[key] = value;
  } else {
    j[key + "_hex"] = ToHex(value);
  }
}

bool GetBytes(const nlohmann::json& j, const std::string& key, std::string* out) {
  if (auto it = j.find(key); it != j.end()) {
    if (!it->is_string()) return false;
    *out = it->get<std::string>();
    return true;
  }
  if (auto it = j.find(key + "_hex"); it != j.end()) {
    return it->is_string() && FromHex(it->get<std::string>(), out);
  }
  out->clear();
  return true;
}

Status WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Internal(Errno("write", path));
    }
    done += static_cast<size_t>(n);
  }
  return OkStatus();
}

Result<std::string> ReadWholeFile(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return NotFound(path);
    return Internal(Errno("open", path));
  }
  std::string out;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Internal(Errno("read", path));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<CheckpointStore>> CheckpointStore::Open(const std::string& state_dir) {
  if (state_dir.empty()) return InvalidArgument("checkpoint: empty state dir");
  if (::mkdir(state_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Internal(Errno("mkdir", state_dir));
  }
  const std::string lock_path = state_dir + "/" + kLockName;
  Fd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (lock.get() < 0) return Internal(Errno("open", lock_path));
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return Aborted("checkpoint: " + state_dir + " is locked by another enforcer");
    }
    return Internal(Errno("flock", lock_path));
  }
  // A temp file is a save that never reached its rename: the committed file is still whole.
  const std::string temp_path = state_dir + "/" + kTempName;
  if (::unlink(temp_path.c_str()) != 0 && errno != ENOENT) {
    return Internal(Errno("unlink", temp_path));
  }
  std::unique_ptr<CheckpointStore> store(new CheckpointStore(state_dir, lock.release()));
  auto text = ReadWholeFile(store->file_path());
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) return store;
    return text.status();
  }
  std::map<std::string, CheckpointEntry> entries;
  uint64_t version = 0;
  std::set<std::string> resets;
  FG_RETURN_IF_ERROR(Parse(*text, &entries, &version, &resets).Annotate(store->file_path()));
  std::lock_guard<std::mutex> l(store->mu_);
  store->entries_ = std::move(entries);
  store->applied_version_ = version;
  store->cpuset_resets_ = std::move(resets);
  return store;
}

CheckpointStore::CheckpointStore(std::string state_dir, int lock_fd)
    : state_dir_(std::move(state_dir)), lock_fd_(lock_fd) {}

CheckpointStore::~CheckpointStore() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

std::string CheckpointStore::file_path() const { return state_dir_ + "/" + kFileName; }

std::optional<CheckpointEntry> CheckpointStore::Get(const std::string& path) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = entries_.find(path);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

std::vector<CheckpointEntry> CheckpointStore::Entries() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<CheckpointEntry> out;
  out.reserve(entries_.size());
  for (const auto& [path, e] : entries_) out.push_back(e);
  return out;
}

std::vector<CheckpointEntry> CheckpointStore::EntriesForPod(const std::string& pod_uid) const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<CheckpointEntry> out;
  for (const auto& [path, e] : entries_) {
    if (e.pod_uid == pod_uid) out.push_back(e);
  }
  return out;
}

size_t CheckpointStore::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return entries_.size();
}

uint64_t CheckpointStore::applied_version() const { return LockedCopy(mu_, applied_version_); }

uint64_t CheckpointStore::saves() const { return LockedCopy(mu_, saves_); }

Status CheckpointStore::Commit(const std::vector<CheckpointEntry>& upserts,
                               const std::vector<std::string>& removals) {
  for (const auto& e : upserts) {
    if (e.path.empty() || e.path[0] != '/') {
      return InvalidArgument("checkpoint: entry path must be absolute: '" + e.path + "'");
    }
  }
  std::lock_guard<std::mutex> l(mu_);
  std::map<std::string, CheckpointEntry> next = entries_;
  bool changed = false;
  for (const auto& path : removals) changed |= next.erase(path) > 0;
  for (const auto& e : upserts) {
    auto [it, inserted] = next.try_emplace(e.path, e);
    if (!inserted && !(it->second == e)) {
      it->second = e;
      changed = true;
    }
    changed |= inserted;
  }
  if (!changed) return OkStatus();
  FG_RETURN_IF_ERROR(SaveLocked(next, applied_version_, cpuset_resets_));
  entries_ = std::move(next);
  return OkStatus();
}

Status CheckpointStore::SetAppliedVersion(uint64_t version) {
  std::lock_guard<std::mutex> l(mu_);
  if (version == applied_version_) return OkStatus();
  FG_RETURN_IF_ERROR(SaveLocked(entries_, version, cpuset_resets_));
  applied_version_ = version;
  return OkStatus();
}

std::set<std::string> CheckpointStore::cpuset_resets() const {
  return LockedCopy(mu_, cpuset_resets_);
}

Status CheckpointStore::SetCpusetReset(const std::string& dir, bool pending) {
  if (dir.empty() || dir[0] != '/') {
    return InvalidArgument("checkpoint: cpuset reset dir must be absolute: '" + dir + "'");
  }
  std::lock_guard<std::mutex> l(mu_);
  if (cpuset_resets_.count(dir) == (pending ? 1u : 0u)) return OkStatus();
  std::set<std::string> next = cpuset_resets_;
  if (pending) {
    next.insert(dir);
  } else {
    next.erase(dir);
  }
  FG_RETURN_IF_ERROR(SaveLocked(entries_, applied_version_, next));
  cpuset_resets_ = std::move(next);
  return OkStatus();
}

Status CheckpointStore::SaveLocked(const std::map<std::string, CheckpointEntry>& entries,
                                   uint64_t applied_version,
                                   const std::set<std::string>& cpuset_resets) {
  const std::string data = Serialize(entries, applied_version, cpuset_resets);
  const std::string temp_path = state_dir_ + "/" + kTempName;
  {
    Fd fd(::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (fd.get() < 0) return Internal(Errno("open", temp_path));
    FG_RETURN_IF_ERROR(WriteAll(fd.get(), data, temp_path));
    if (::fsync(fd.get()) != 0) return Internal(Errno("fsync", temp_path));
  }
  if (::rename(temp_path.c_str(), file_path().c_str()) != 0) {
    return Internal(Errno("rename", temp_path));
  }
  Fd dir(::open(state_dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) return Internal(Errno("open", state_dir_));
  if (::fsync(dir.get()) != 0) return Internal(Errno("fsync", state_dir_));
  ++saves_;
  return OkStatus();
}

std::string CheckpointStore::Serialize(const std::map<std::string, CheckpointEntry>& entries,
                                       uint64_t applied_version,
                                       const std::set<std::string>& cpuset_resets) {
  nlohmann::json root;
  root["format"] = kFormatVersion;
  root["applied_version"] = applied_version;
  if (!cpuset_resets.empty()) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& dir : cpuset_resets) {
      nlohmann::json item;
      PutBytes(item, "dir", dir);
      list.push_back(std::move(item));
    }
    root["cpuset_resets"] = std::move(list);
  }
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [path, e] : entries) {
    nlohmann::json j;
    PutBytes(j, "path", e.path);
    PutBytes(j, "knob", e.knob);
    PutBytes(j, "pod_uid", e.pod_uid);
    PutBytes(j, "original", e.original);
    PutBytes(j, "written", e.written);
    if (!e.also_ours.empty()) {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& v : e.also_ours) {
        nlohmann::json item;
        PutBytes(item, "v", v);
        list.push_back(std::move(item));
      }
      j["also_ours"] = std::move(list);
    }
    if (e.request_milli >= 0) j["request_milli"] = e.request_milli;
    list.push_back(std::move(j));
  }
  root["entries"] = std::move(list);
  return root.dump(1) + "\n";
}

Status CheckpointStore::Parse(const std::string& text,
                              std::map<std::string, CheckpointEntry>* entries,
                              uint64_t* applied_version, std::set<std::string>* cpuset_resets) {
  nlohmann::json root = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return Internal("checkpoint does not parse as a JSON object");
  }
  auto format = root.find("format");
  if (format == root.end() || !format->is_number_integer() || *format != kFormatVersion) {
    return Internal("checkpoint has an unknown format version");
  }
  uint64_t version = 0;
  if (auto v = root.find("applied_version"); v != root.end()) {
    if (!v->is_number_unsigned()) return Internal("checkpoint: bad applied_version");
    version = v->get<uint64_t>();
  }
  auto list = root.find("entries");
  if (list == root.end() || !list->is_array()) return Internal("checkpoint: no entries array");
  std::map<std::string, CheckpointEntry> out;
  for (const auto& j : *list) {
    if (!j.is_object()) return Internal("checkpoint: entry is not an object");
    CheckpointEntry e;
    bool ok = GetBytes(j, "path", &e.path) && GetBytes(j, "knob", &e.knob) &&
              GetBytes(j, "pod_uid", &e.pod_uid) && GetBytes(j, "original", &e.original) &&
              GetBytes(j, "written", &e.written);
    if (auto also = j.find("also_ours"); ok && also != j.end()) {
      ok = also->is_array();
      for (size_t i = 0; ok && i < also->size(); ++i) {
        std::string v;
        ok = (*also)[i].is_object() && GetBytes((*also)[i], "v", &v);
        e.also_ours.push_back(std::move(v));
      }
    }
    if (auto req = j.find("request_milli"); ok && req != j.end()) {
      ok = req->is_number_integer() && req->get<int64_t>() >= 0;
      if (ok) e.request_milli = req->get<int64_t>();
    }
    if (!ok || e.path.empty()) return Internal("checkpoint: malformed entry " + j.dump());
    std::string key = e.path;
    out.emplace(std::move(key), std::move(e));
  }
  std::set<std::string> resets;
  if (auto list = root.find("cpuset_resets"); list != root.end()) {
    if (!list->is_array()) return Internal("checkpoint: cpuset_resets is not an array");
    for (const auto& j : *list) {
      std::string dir;
      if (!j.is_object() || !GetBytes(j, "dir", &dir) || dir.empty() || dir[0] != '/') {
        return Internal("checkpoint: malformed cpuset reset " + j.dump());
      }
      resets.insert(std::move(dir));
    }
  }
  *entries = std::move(out);
  *applied_version = version;
  if (cpuset_resets != nullptr) *cpuset_resets = std::move(resets);
  return OkStatus();
}

}  // namespace feedguard::agent
