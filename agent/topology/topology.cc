// topology.cc — hwloc 2.x → Topology, and its JSON / table renderings.
#include "agent/topology/topology.h"

#include <hwloc.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <sstream>

namespace feedguard::agent {
namespace {

// RAII for hwloc_topology_t.
struct HwlocTopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using HwlocTopologyPtr = std::unique_ptr<hwloc_topology, HwlocTopologyDeleter>;

CpuSet FromBitmap(hwloc_const_bitmap_t bitmap) {
  CpuSet out;
  if (bitmap == nullptr || hwloc_bitmap_isfull(bitmap)) return out;
  int id = hwloc_bitmap_first(bitmap);
  while (id >= 0) {
    out.Insert(id);
    id = hwloc_bitmap_next(bitmap, id);
  }
  return out;
}

// Among the NUMA nodes in `nodeset`, the one local to the fewest CPUs (the most local), then the
// lowest OS index; -1 when none. With SNC + HBM/CXL memory a core has several local nodes.
int ClosestNode(hwloc_topology_t topo, hwloc_const_bitmap_t nodeset) {
  if (nodeset == nullptr) return -1;
  int best = -1;
  int best_weight = 0;
  for (int id = hwloc_bitmap_first(nodeset); id >= 0; id = hwloc_bitmap_next(nodeset, id)) {
    hwloc_obj_t n = hwloc_get_numanode_obj_by_os_index(topo, static_cast<unsigned>(id));
    if (n == nullptr) continue;
    const int w = n->cpuset != nullptr ? hwloc_bitmap_weight(n->cpuset) : -1;
    if (w <= 0) continue;  // a memory-only node is no core's home
    if (best < 0 || w < best_weight) {
      best = id;
      best_weight = w;
    }
  }
  return best;
}

// The OS's NUMA latency matrix (SLIT), if hwloc found one.
void ReadDistances(hwloc_topology_t topo, Topology& out) {
  constexpr unsigned long kFromOsLatency =
      HWLOC_DISTANCES_KIND_FROM_OS | HWLOC_DISTANCES_KIND_MEANS_LATENCY;
  constexpr unsigned long kAnyLatency = HWLOC_DISTANCES_KIND_MEANS_LATENCY;
  for (unsigned long kind : {kFromOsLatency, kAnyLatency}) {
    unsigned nr = 1;
    hwloc_distances_s* d = nullptr;
    if (hwloc_distances_get_by_type(topo, HWLOC_OBJ_NUMANODE, &nr, &d, kind, 0) != 0 || nr == 0) {
      continue;
    }
    for (unsigned i = 0; i < d->nbobjs; ++i) {
      for (unsigned j = 0; j < d->nbobjs; ++j) {
        if (d->objs[i] == nullptr || d->objs[j] == nullptr) continue;
        out.numa_distances[{static_cast<int>(d->objs[i]->os_index),
                            static_cast<int>(d->objs[j]->os_index)}] = d->values[i * d->nbobjs + j];
      }
    }
    hwloc_distances_release(topo, d);
    return;
  }
}

std::string Hex4(unsigned v) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04x", v & 0xffffu);
  return buf;
}

Result<Topology> Extract(hwloc_topology_t topo) {
  Topology out;
  const int numa_count = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < numa_count; ++i) {
    hwloc_obj_t n = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    out.numa_nodes.push_back({static_cast<int>(n->os_index), FromBitmap(n->cpuset),
                              n->subtype != nullptr ? n->subtype : ""});
  }
  std::sort(out.numa_nodes.begin(), out.numa_nodes.end(),
            [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });

  // Physical cores; a machine hwloc reports without Core objects gets one core per PU.
  hwloc_obj_type_t core_type = HWLOC_OBJ_CORE;
  int core_count = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  if (core_count <= 0) {
    core_type = HWLOC_OBJ_PU;
    core_count = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  }
  for (int i = 0; i < core_count; ++i) {
    hwloc_obj_t c = hwloc_get_obj_by_type(topo, core_type, static_cast<unsigned>(i));
    Core core;
    core.index = i;
    core.os_index = static_cast<int>(c->os_index);
    hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, c);
    core.package = pkg != nullptr ? static_cast<int>(pkg->os_index) : -1;
    core.numa = ClosestNode(topo, c->nodeset);
    core.pus = FromBitmap(c->cpuset);
    if (core.pus.empty()) continue;
    out.cores.push_back(std::move(core));
  }
  if (out.cores.empty()) return Internal("hwloc reported no cores and no PUs");

  std::set<int> cpu_nodes;
  for (const Core& c : out.cores) {
    if (c.numa >= 0) cpu_nodes.insert(c.numa);
  }
  for (hwloc_obj_t p = hwloc_get_next_pcidev(topo, nullptr); p != nullptr;
       p = hwloc_get_next_pcidev(topo, p)) {
    const auto& a = p->attr->pcidev;
    char bdf[32];
    std::snprintf(bdf, sizeof(bdf), "%04x:%02x:%02x.%x", static_cast<unsigned>(a.domain),
                  static_cast<unsigned>(a.bus), static_cast<unsigned>(a.dev),
                  static_cast<unsigned>(a.func));
    if (!IsNvidiaGpu(a.vendor_id, a.class_id)) {
      out.other_pci.push_back({bdf, a.vendor_id, a.device_id, a.class_id});
      continue;
    }
    GpuDevice gpu;
    gpu.bdf = bdf;
    gpu.vendor_id = a.vendor_id;
    gpu.device_id = a.device_id;
    gpu.class_id = a.class_id;
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, p);
    if (anc != nullptr) {
      gpu.local_cpus = FromBitmap(anc->cpuset);
      // Locality is the NUMA node(s) of the ancestor's cores, not its nodeset's weight: a
      // package or cluster with DRAM plus HBM/CXL memory (or two SNC clusters) has several
      // nodes and is still a precise locality. Only the root of a multi-node machine means
      // "no locality" (sysfs numa_node -1).
      const bool at_root = anc->parent == nullptr;
      std::set<int> local;
      for (const Core& c : out.cores) {
        if (c.numa >= 0 && !c.pus.empty() && c.pus.IsSubsetOf(gpu.local_cpus)) {
          local.insert(c.numa);
        }
      }
      if (!at_root || cpu_nodes.size() == 1) gpu.local_numa.assign(local.begin(), local.end());
      if (gpu.local_numa.empty() && cpu_nodes.size() == 1) gpu.local_numa = {*cpu_nodes.begin()};
      gpu.numa = gpu.local_numa.empty() ? -1 : gpu.local_numa.front();
    }
    out.gpus.push_back(std::move(gpu));
  }
  std::sort(out.gpus.begin(), out.gpus.end(),
            [](const GpuDevice& a, const GpuDevice& b) { return a.bdf < b.bdf; });
  std::sort(out.other_pci.begin(), out.other_pci.end(),
            [](const PciDevice& a, const PciDevice& b) { return a.bdf < b.bdf; });

  out.allowed_cpus = FromBitmap(hwloc_topology_get_allowed_cpuset(topo));
  if (out.allowed_cpus.empty()) out.allowed_cpus = out.AllPus();
  out.allowed_cpus = out.allowed_cpus.Intersect(out.AllPus());
  ReadDistances(topo, out);
  return out;
}

enum class Source { kLive, kXmlBuffer, kSynthetic };

Result<Topology> Load(Source source, std::string_view xml) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return Internal("hwloc_topology_init failed");
  HwlocTopologyPtr topo(raw);
  if (hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) != 0) {
    return Internal("hwloc_topology_set_io_types_filter failed");
  }
  // The whole machine: CPUs outside our cpuset are someone else's, not absent (see topology.h).
  if (hwloc_topology_set_flags(raw, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED) != 0) {
    return Internal("hwloc_topology_set_flags failed");
  }
  std::string buffer;
  if (source == Source::kSynthetic) {
    if (hwloc_topology_set_synthetic(raw, std::string(xml).c_str()) != 0) {
      return InvalidArgument("hwloc rejected the synthetic description \"" + std::string(xml) +
                             "\"");
    }
  }
  if (source == Source::kXmlBuffer) {
    buffer.assign(xml);  // hwloc wants a NUL-terminated buffer; size counts the NUL.
    if (hwloc_topology_set_xmlbuffer(raw, buffer.c_str(), static_cast<int>(buffer.size() + 1)) !=
        0) {
      return InvalidArgument("hwloc rejected the XML buffer");
    }
  }
  if (hwloc_topology_load(raw) != 0) {
    return source == Source::kLive ? Internal("hwloc_topology_load failed")
                                   : InvalidArgument("hwloc could not load the XML topology");
  }
  return Extract(raw);
}

}  // namespace

CpuSet Topology::AllPus() const {
  CpuSet out;
  for (const Core& c : cores) out = out.Union(c.pus);
  return out;
}

const Core* Topology::CoreOfPu(int pu) const {
  for (const Core& c : cores) {
    if (c.pus.Contains(pu)) return &c;
  }
  return nullptr;
}

const PciDevice* Topology::FindOtherPci(std::string_view bdf) const {
  for (const PciDevice& d : other_pci) {
    if (d.bdf == bdf) return &d;
  }
  return nullptr;
}

const GpuDevice* Topology::FindGpu(std::string_view bdf) const {
  for (const GpuDevice& g : gpus) {
    if (g.bdf == bdf) return &g;
  }
  return nullptr;
}

const NumaNode* Topology::FindNuma(int id) const {
  for (const NumaNode& n : numa_nodes) {
    if (n.id == id) return &n;
  }
  return nullptr;
}

bool Topology::HasSmt() const {
  return std::any_of(cores.begin(), cores.end(), [](const Core& c) { return c.pus.size() > 1; });
}

bool IsNvidiaGpu(uint16_t vendor_id, uint16_t class_id) {
  return vendor_id == 0x10de && (class_id >> 8) == 0x03;
}

Result<Topology> LoadLiveTopology() { return Load(Source::kLive, {}); }

Result<Topology> LoadSyntheticTopology(const std::string& description) {
  if (description.empty()) return InvalidArgument("empty synthetic topology description");
  return Load(Source::kSynthetic, description);
}

std::optional<uint64_t> Topology::Distance(int from, int to) const {
  auto it = numa_distances.find({from, to});
  if (it == numa_distances.end()) return std::nullopt;
  return it->second;
}

Result<Topology> LoadTopologyFromXmlBuffer(std::string_view xml) {
  if (xml.empty()) return InvalidArgument("empty XML topology");
  // Say what is wrong before hwloc's one answer ("could not load"): not XML at all, XML that is
  // not an hwloc topology (e.g. a `lstopo --of svg` or synthetic export), or a malformed one.
  const size_t first = xml.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || xml[first] != '<') {
    return InvalidArgument("not an XML file (an hwloc topology is `lstopo --of xml` output)");
  }
  if (xml.find("<topology") == std::string_view::npos) {
    return InvalidArgument(
        "XML without a <topology> element: not an hwloc topology export (`lstopo --of xml`)");
  }
  auto t = Load(Source::kXmlBuffer, xml);
  if (!t.ok() && t.status().code() == StatusCode::kInvalidArgument) {
    return InvalidArgument(std::string(t.status().message()) +
                           ": malformed, or a format this hwloc (" HWLOC_VERSION ") cannot import");
  }
  return t;
}

Result<Topology> LoadTopologyFromXmlFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return NotFound("cannot open topology XML " + path);
  std::string data;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) data.append(buf, n);
  std::fclose(f);
  auto topo = LoadTopologyFromXmlBuffer(data);
  if (!topo.ok()) return topo.status().Annotate(path);
  return topo;
}

nlohmann::json TopologyToJson(const Topology& t) {
  nlohmann::json j;
  j["numaNodes"] = nlohmann::json::array();
  for (const NumaNode& n : t.numa_nodes) {
    nlohmann::json node = {{"id", n.id}, {"cpus", n.cpus.ToString()}};
    if (!n.subtype.empty()) node["subtype"] = n.subtype;
    j["numaNodes"].push_back(std::move(node));
  }
  j["cores"] = nlohmann::json::array();
  for (const Core& c : t.cores) {
    j["cores"].push_back({{"index", c.index},
                          {"osIndex", c.os_index},
                          {"package", c.package},
                          {"numa", c.numa},
                          {"pus", c.pus.ToString()}});
  }
  j["gpus"] = nlohmann::json::array();
  for (const GpuDevice& g : t.gpus) {
    j["gpus"].push_back({{"bdf", g.bdf},
                         {"vendor", Hex4(g.vendor_id)},
                         {"device", Hex4(g.device_id)},
                         {"class", Hex4(g.class_id)},
                         {"numa", g.numa},
                         {"localNuma", g.local_numa},
                         {"localCpus", g.local_cpus.ToString()}});
  }
  j["allowedCpus"] = t.allowed_cpus.ToString();
  if (!t.numa_distances.empty()) {
    nlohmann::json rows = nlohmann::json::array();
    for (const NumaNode& a : t.numa_nodes) {
      nlohmann::json row = nlohmann::json::array();
      for (const NumaNode& b : t.numa_nodes) {
        const auto d = t.Distance(a.id, b.id);
        row.push_back(d ? nlohmann::json(*d) : nlohmann::json(nullptr));
      }
      rows.push_back(std::move(row));
    }
    j["numaDistances"] = std::move(rows);
  }
  j["summary"] = {{"numaNodes", t.numa_nodes.size()},
                  {"cores", t.cores.size()},
                  {"pus", t.AllPus().size()},
                  {"gpus", t.gpus.size()},
                  {"smt", t.HasSmt()}};
  return j;
}

std::string TopologyToTable(const Topology& t) {
  std::ostringstream os;
  os << "numa_nodes=" << t.numa_nodes.size() << " cores=" << t.cores.size()
     << " pus=" << t.AllPus().size() << " gpus=" << t.gpus.size()
     << " smt=" << (t.HasSmt() ? "yes" : "no") << " allowed=" << t.allowed_cpus.ToString()
     << "\n\n";
  char line[512];
  std::snprintf(line, sizeof(line), "%-6s %-8s %-6s %s\n", "NUMA", "CORES", "GPUS", "CPUS");
  os << line;
  for (const NumaNode& n : t.numa_nodes) {
    const auto cores = std::count_if(t.cores.begin(), t.cores.end(),
                                     [&](const Core& c) { return c.numa == n.id; });
    const auto gpus = std::count_if(t.gpus.begin(), t.gpus.end(),
                                    [&](const GpuDevice& g) { return g.numa == n.id; });
    std::snprintf(line, sizeof(line), "%-6d %-8ld %-6ld %s\n", n.id, static_cast<long>(cores),
                  static_cast<long>(gpus), n.cpus.ToString().c_str());
    os << line;
  }
  if (!t.gpus.empty()) {
    os << "\n";
    std::snprintf(line, sizeof(line), "%-14s %-11s %-6s %-6s %s\n", "GPU", "ID", "CLASS", "NUMA",
                  "LOCAL_CPUS");
    os << line;
    for (const GpuDevice& g : t.gpus) {
      const std::string id = Hex4(g.vendor_id) + ":" + Hex4(g.device_id);
      std::string numa;
      for (int n : g.local_numa) numa += (numa.empty() ? "" : ",") + std::to_string(n);
      if (numa.empty()) numa = "-";
      std::snprintf(line, sizeof(line), "%-14s %-11s %-6s %-6s %s\n", g.bdf.c_str(), id.c_str(),
                    Hex4(g.class_id).c_str(), numa.c_str(), g.local_cpus.ToString().c_str());
      os << line;
    }
  }
  return os.str();
}

}  // namespace feedguard::agent
