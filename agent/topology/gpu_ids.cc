// gpu_ids.cc — device id parsing, /proc/driver/nvidia and sysfs readers, the id resolver.
#include "agent/topology/gpu_ids.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/strings.h"

namespace feedguard::agent {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
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

bool AllDigits(std::string_view s) {
  return !s.empty() && s.size() <= 9 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A DRA driver name is a DNS subdomain ("gpu.nvidia.com"): it has a dot, which no NVIDIA UUID
// and no legacy "MIG-GPU-<uuid>/<gi>/<ci>" prefix has.
bool IsDriverName(std::string_view s) {
  return s.find('.') != std::string_view::npos && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
         });
}

// The GPU minor number in an NVIDIA DRA device name: "gpu-3" and "gpu-3-mig-9-4-2" → 3;
// anything else ("gpu-vfio-0", a UUID) → -1.
int MinorOfDraName(std::string_view name) {
  if (!StartsWith(name, "gpu-")) return -1;
  std::string_view rest = name.substr(4);
  const auto dash = rest.find('-');
  const std::string_view digits = rest.substr(0, dash);
  if (!AllDigits(digits)) return -1;
  if (dash != std::string_view::npos && !StartsWith(rest.substr(dash), "-mig-")) return -1;
  return std::stoi(std::string(digits));
}

const nlohmann::json* Member(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

std::string StringAt(const nlohmann::json& j, const char* key) {
  const nlohmann::json* v = Member(j, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

// A device attribute's string value: attributes[<name>].string, or [<driver>/<name>].string.
std::string AttributeString(const nlohmann::json& attrs, const std::string& driver,
                            const std::string& name) {
  for (const std::string& key : {name, driver + "/" + name}) {
    const nlohmann::json* a = Member(attrs, key.c_str());
    if (a != nullptr) return StringAt(*a, "string");
  }
  return "";
}

}  // namespace

std::string NormalizePciBusId(std::string_view bus_id) {
  std::string s = Lower(Trim(bus_id));
  // domain:bus:device.function with a domain of 4 or 8 hex digits.
  const auto c1 = s.find(':');
  const auto c2 = s.find(':', c1 == std::string::npos ? 0 : c1 + 1);
  const auto dot = s.find('.');
  if (c1 == std::string::npos || c2 == std::string::npos || dot == std::string::npos || dot < c2) {
    return "";
  }
  std::string domain = s.substr(0, c1);
  if (domain.size() == 8 && domain.substr(0, 4) == "0000") domain = domain.substr(4);
  const std::string rest = s.substr(c1);  // ":3b:00.0"
  const bool hex = std::all_of(domain.begin(), domain.end(), [](char c) {
    return std::isxdigit(static_cast<unsigned char>(c)) != 0;
  });
  if (domain.size() != 4 || !hex || rest.size() != 8) return "";
  return domain + rest;
}

Result<GpuDeviceId> ParseGpuDeviceId(std::string_view id) {
  GpuDeviceId out;
  out.raw = std::string(id);
  std::string_view base = Trim(id);
  if (const auto slash = base.find('/');
      slash != std::string_view::npos && IsDriverName(Lower(base.substr(0, slash)))) {
    out.dra_driver = Lower(base.substr(0, slash));
    out.dra_device = Lower(base.substr(slash + 1));
    if (out.dra_device.empty() || out.dra_device.find('/') != std::string::npos) {
      return InvalidArgument("bad DRA device id '" + out.raw + "' (want <driver>/<device>)");
    }
    out.base = out.dra_driver + "/" + out.dra_device;
    out.minor = MinorOfDraName(out.dra_device);
    out.mig = out.dra_device.find("-mig-") != std::string::npos;
    return out;
  }
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

Result<std::map<int, std::string>> ReadNvidiaProcMinors(const std::string& root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return NotFound(root + " does not exist (no NVIDIA driver?)");
  std::map<int, std::string> out;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (!entry.is_directory(ec)) continue;
    auto text = ReadFile(entry.path() / "information");
    if (!text.ok()) continue;
    std::istringstream lines(*text);
    std::string line;
    while (std::getline(lines, line)) {
      std::string_view l(line);
      if (!StartsWith(l, "Device Minor:")) continue;
      const std::string_view v = Trim(l.substr(13));
      if (AllDigits(v)) out[std::stoi(std::string(v))] = Lower(entry.path().filename().string());
      break;
    }
  }
  if (ec) return Internal("listing " + root + ": " + ec.message());
  return out;
}

Result<DraDeviceTable> ParseResourceSlices(std::string_view text, std::string_view node_name) {
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument("ResourceSlices: not valid JSON");
  std::vector<const nlohmann::json*> slices;
  if (doc.is_array()) {
    for (const auto& s : doc) slices.push_back(&s);
  } else if (const nlohmann::json* items = Member(doc, "items"); items != nullptr) {
    if (!items->is_array()) return InvalidArgument("ResourceSlices: \"items\" is not a list");
    for (const auto& s : *items) slices.push_back(&s);
  } else if (doc.is_object()) {
    slices.push_back(&doc);
  } else {
    return InvalidArgument("ResourceSlices: want a List, a ResourceSlice or an array of them");
  }
  DraDeviceTable out;
  for (const nlohmann::json* slice : slices) {
    const nlohmann::json* spec = Member(*slice, "spec");
    if (spec == nullptr) return InvalidArgument("ResourceSlices: an item has no spec");
    const std::string node = StringAt(*spec, "nodeName");
    if (!node_name.empty() && !node.empty() && node != node_name) continue;
    const std::string driver = Lower(StringAt(*spec, "driver"));
    if (driver.empty()) return InvalidArgument("ResourceSlices: a slice has no spec.driver");
    const nlohmann::json* devices = Member(*spec, "devices");
    if (devices == nullptr) continue;
    if (!devices->is_array()) {
      return InvalidArgument("ResourceSlices: spec.devices of a " + driver +
                             " slice is not a list");
    }
    for (const auto& d : *devices) {
      const std::string name = Lower(StringAt(d, "name"));
      if (name.empty()) continue;
      const nlohmann::json* attrs = Member(d, "attributes");
      if (attrs == nullptr) {  // v1beta1: devices[].basic.attributes
        if (const nlohmann::json* basic = Member(d, "basic")) attrs = Member(*basic, "attributes");
      }
      DraDevice dev;
      if (attrs != nullptr) {
        dev.uuid = Lower(AttributeString(*attrs, driver, "uuid"));
        dev.bus_id = NormalizePciBusId(AttributeString(*attrs, driver, "pcieBusID"));
        dev.parent_uuid = Lower(AttributeString(*attrs, driver, "parentUUID"));
      }
      out[driver + "/" + name] = std::move(dev);
    }
  }
  return out;
}

Result<DraDeviceTable> LoadResourceSlices(const std::string& path, std::string_view node_name) {
  FG_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  auto table = ParseResourceSlices(text, node_name);
  if (!table.ok()) return table.status().Annotate(path);
  return table;
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

Result<std::string> GpuIdResolver::BusIdOfUuid(const std::string& gpu_uuid) const {
  auto it = uuid_to_bdf_.find(gpu_uuid);
  if (it == uuid_to_bdf_.end() && !StartsWith(gpu_uuid, "gpu-")) {
    it = uuid_to_bdf_.find("gpu-" + gpu_uuid);  // bare UUID
  }
  if (it == uuid_to_bdf_.end()) return NotFound("GPU " + gpu_uuid + " is not on this node");
  return it->second;
}

Result<std::string> GpuIdResolver::BusIdOfDra(const GpuDeviceId& id) const {
  if (auto it = dra_devices_.find(id.base); it != dra_devices_.end()) {
    const DraDevice& d = it->second;
    // A MIG slice's pcieBusID is its parent's; a GPU's is its own.
    if (!d.bus_id.empty()) return d.bus_id;
    if (!d.parent_uuid.empty()) return BusIdOfUuid(d.parent_uuid);
    if (!d.uuid.empty()) {
      auto mig_parent = mig_parents_.find(d.uuid);
      return BusIdOfUuid(mig_parent != mig_parents_.end() ? mig_parent->second : d.uuid);
    }
  }
  if (id.minor >= 0) {
    if (auto it = minor_to_bdf_.find(id.minor); it != minor_to_bdf_.end()) return it->second;
    return NotFound("DRA device " + id.base + ": no GPU with minor number " +
                    std::to_string(id.minor) +
                    " in /proc/driver/nvidia and no ResourceSlice "
                    "attributes for it");
  }
  return NotFound("DRA device " + id.base +
                  ": no ResourceSlice attributes (uuid/pcieBusID) for it, and its name holds no "
                  "GPU minor number");
}

Result<std::string> GpuIdResolver::BusIdOf(std::string_view device_id) const {
  FG_ASSIGN_OR_RETURN(GpuDeviceId id, ParseGpuDeviceId(device_id));
  if (!id.dra_driver.empty()) return BusIdOfDra(id);
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
  return BusIdOfUuid(gpu_uuid);
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
