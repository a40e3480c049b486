// gpu_ids.cc — device id parsing, /proc/driver/nvidia and sysfs readers, the id resolver.
#include "agent/topology/gpu_ids.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace feedguard::agent {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

Result<std::string> ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return NotFound("cannot read " + p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Extracts "<UUID>" from "... (UUID: <UUID>)".
std::string UuidInParens(std::string_view line) {
  const auto at = line.find("UUID:");
  if (at == std::string_view::npos) return "";
  std::string_view rest = line.substr(at + 5);
  const auto close = rest.find(')');
  if (close != std::string_view::npos) rest = rest.substr(0, close);
  return Lower(Trim(rest));
}

}  // namespace

Result<GpuDeviceId> ParseGpuDeviceId(std::string_view id) {
  GpuDeviceId out;
  out.raw = std::string(id);
  std::string_view base = Trim(id);
  const auto sep = base.find("::");
  if (sep != std::string_view::npos) {
    std::string_view n = base.substr(sep + 2);
    if (n.empty() ||
        !std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        n.size() > 9) {
      return InvalidArgument("bad replica suffix in GPU device id '" + out.raw + "'");
    }
    out.replica = std::stoi(std::string(n));
    base = base.substr(0, sep);
  }
  if (base.empty()) return InvalidArgument("empty GPU device id");
  out.base = Lower(base);
  if (StartsWith(out.base, "mig-")) {
    out.mig = true;
    if (StartsWith(out.base, "mig-gpu-")) {
      // Legacy R450 form: MIG-GPU-<uuid>/<gi>/<ci>.
      std::string_view rest = std::string_view(out.base).substr(4);
      const auto slash = rest.find('/');
      if (slash == std::string_view::npos) {
        return InvalidArgument("legacy MIG id without /<gi>/<ci>: '" + out.raw + "'");
      }
      out.parent_gpu = std::string(rest.substr(0, slash));
    }
  }
  return out;
}

Result<std::map<std::string, std::string>> ReadNvidiaProcGpus(const std::string& root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return NotFound(root + " does not exist (no NVIDIA driver?)");
  std::map<std::string, std::string> out;
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (entry.is_directory(ec)) dirs.push_back(entry.path());
  }
  if (ec) return Internal("listing " + root + ": " + ec.message());
  std::sort(dirs.begin(), dirs.end());
  for (const auto& dir : dirs) {
    auto text = ReadFile(dir / "information");
    if (!text.ok()) continue;  // a GPU being torn down; the others still count
    std::istringstream lines(*text);
    std::string line;
    while (std::getline(lines, line)) {
      std::string_view l(line);
      if (!StartsWith(l, "GPU UUID:")) continue;
      const std::string uuid = Lower(Trim(l.substr(9)));
      if (!uuid.empty()) out[uuid] = Lower(dir.filename().string());
      break;
    }
  }
  return out;
}

Result<MigParentTable> ParseNvidiaSmiList(std::string_view text) {
  MigParentTable out;
  std::string current_gpu;
  size_t pos = 0;
  while (pos <= text.size()) {
    auto nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view line = Trim(text.substr(pos, nl - pos));
    pos = nl + 1;
    if (StartsWith(line, "GPU ")) {
      current_gpu = UuidInParens(line);
    } else if (StartsWith(line, "MIG ")) {
      const std::string mig = UuidInParens(line);
      if (mig.empty()) continue;
      if (current_gpu.empty()) {
        return InvalidArgument("nvidia-smi -L: MIG line before any GPU line: " + std::string(line));
      }
      out[mig] = current_gpu;
    }
  }
  return out;
}

Result<MigParentTable> LoadMigParentTable(const std::string& path) {
  FG_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  auto table = ParseNvidiaSmiList(text);
  if (!table.ok()) return table.status().Annotate(path);
  return table;
}

Result<PciLocality> ReadSysfsPciLocality(std::string_view bdf, const std::string& root) {
  const std::filesystem::path dir = std::filesystem::path(root) / Lower(bdf);
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return NotFound("no PCI device " + dir.string());
  PciLocality out;
  if (auto numa = ReadFile(dir / "numa_node"); numa.ok()) {
    const std::string v(Trim(*numa));
    try {
      out.numa = std::stoi(v);
    } catch (const std::exception&) {
      return InvalidArgument("bad numa_node '" + v + "' in " + dir.string());
    }
    if (out.numa < 0) out.numa = -1;
  }
  if (auto cpus = ReadFile(dir / "local_cpulist"); cpus.ok()) {
    auto set = CpuSet::Parse(*cpus);
    if (!set.ok()) return set.status().Annotate(dir.string() + "/local_cpulist");
    out.local_cpus = *set;
  }
  return out;
}

Result<std::string> GpuIdResolver::BusIdOf(std::string_view device_id) const {
  FG_ASSIGN_OR_RETURN(GpuDeviceId id, ParseGpuDeviceId(device_id));
  std::string gpu_uuid = id.base;
  if (id.mig) {
    if (!id.parent_gpu.empty()) {
      gpu_uuid = id.parent_gpu;
    } else {
      auto it = mig_parents_.find(id.base);
      if (it == mig_parents_.end()) {
        return NotFound("MIG device " + id.raw + " has no known parent GPU");
      }
      gpu_uuid = it->second;
    }
  }
  auto it = uuid_to_bdf_.find(gpu_uuid);
  if (it == uuid_to_bdf_.end() && !StartsWith(gpu_uuid, "gpu-")) {
    it = uuid_to_bdf_.find("gpu-" + gpu_uuid);  // bare UUID
  }
  if (it == uuid_to_bdf_.end()) return NotFound("GPU " + gpu_uuid + " is not on this node");
  return it->second;
}

std::vector<ResolvedGpu> GpuIdResolver::ResolveAll(const std::vector<std::string>& ids) const {
  std::vector<ResolvedGpu> out;
  out.reserve(ids.size());
  for (const std::string& id : ids) {
    auto bus = BusIdOf(id);
    out.push_back({id, bus.ok() ? *bus : "", bus.ok() ? "" : bus.status().message()});
  }
  return out;
}

}  // namespace feedguard::agent
