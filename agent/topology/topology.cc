// topology.cc — hwloc 2.x → Topology, and its JSON / table renderings.
#include "agent/topology/topology.h"

#include <hwloc.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
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

int SingleNode(hwloc_const_bitmap_t nodeset) {
  if (nodeset == nullptr || hwloc_bitmap_weight(nodeset) != 1) return -1;
  return hwloc_bitmap_first(nodeset);
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
    out.numa_nodes.push_back({static_cast<int>(n->os_index), FromBitmap(n->cpuset)});
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
    core.numa = SingleNode(c->nodeset);
    core.pus = FromBitmap(c->cpuset);
    if (core.pus.empty()) continue;
    out.cores.push_back(std::move(core));
  }
  if (out.cores.empty()) return Internal("hwloc reported no cores and no PUs");

  for (hwloc_obj_t p = hwloc_get_next_pcidev(topo, nullptr); p != nullptr;
       p = hwloc_get_next_pcidev(topo, p)) {
    const auto& a = p->attr->pcidev;
    if (!IsNvidiaGpu(a.vendor_id, a.class_id)) continue;
    GpuDevice gpu;
    char bdf[32];
    std::snprintf(bdf, sizeof(bdf), "%04x:%02x:%02x.%x", static_cast<unsigned>(a.domain),
                  static_cast<unsigned>(a.bus), static_cast<unsigned>(a.dev),
                  static_cast<unsigned>(a.func));
    gpu.bdf = bdf;
    gpu.vendor_id = a.vendor_id;
    gpu.device_id = a.device_id;
    gpu.class_id = a.class_id;
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, p);
    if (anc != nullptr) {
      gpu.local_cpus = FromBitmap(anc->cpuset);
      gpu.numa = SingleNode(anc->nodeset);
    }
    out.gpus.push_back(std::move(gpu));
  }
  std::sort(out.gpus.begin(), out.gpus.end(),
            [](const GpuDevice& a, const GpuDevice& b) { return a.bdf < b.bdf; });

  out.allowed_cpus = FromBitmap(hwloc_topology_get_allowed_cpuset(topo));
  if (out.allowed_cpus.empty()) out.allowed_cpus = out.AllPus();
  return out;
}

enum class Source { kLive, kXmlBuffer };

Result<Topology> Load(Source source, std::string_view xml) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return Internal("hwloc_topology_init failed");
  HwlocTopologyPtr topo(raw);
  if (hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) != 0) {
    return Internal("hwloc_topology_set_io_types_filter failed");
  }
  std::string buffer;
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

Result<Topology> LoadTopologyFromXmlBuffer(std::string_view xml) {
  if (xml.empty()) return InvalidArgument("empty XML topology");
  return Load(Source::kXmlBuffer, xml);
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
  j["numa_nodes"] = nlohmann::json::array();
  for (const NumaNode& n : t.numa_nodes) {
    j["numa_nodes"].push_back({{"id", n.id}, {"cpus", n.cpus.ToString()}});
  }
  j["cores"] = nlohmann::json::array();
  for (const Core& c : t.cores) {
    j["cores"].push_back({{"index", c.index},
                          {"os_index", c.os_index},
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
                         {"local_cpus", g.local_cpus.ToString()}});
  }
  j["allowed_cpus"] = t.allowed_cpus.ToString();
  j["summary"] = {{"numa_nodes", t.numa_nodes.size()},
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
      const std::string numa = g.numa < 0 ? "-" : std::to_string(g.numa);
      std::snprintf(line, sizeof(line), "%-14s %-11s %-6s %-6s %s\n", g.bdf.c_str(), id.c_str(),
                    Hex4(g.class_id).c_str(), numa.c_str(), g.local_cpus.ToString().c_str());
      os << line;
    }
  }
  return os.str();
}

}  // namespace feedguard::agent
