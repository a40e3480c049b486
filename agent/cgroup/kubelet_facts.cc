#include "agent/cgroup/kubelet_facts.h"

#include <algorithm>

#include "agent/cgroup/kernel_facts.h"

namespace feedguard::agent::cgroup {

std::string_view DriverName(KubeletDriver d) { return NameOf(kKubeletDriverNames, d, "cgroupfs"); }

Result<KubeletDriver> ParseDriver(std::string_view s) {
  if (auto d = FromName(kKubeletDriverNames, s)) return *d;
  return InvalidArgument("unknown cgroup driver \"" + std::string(s) +
                         "\" (want systemd or cgroupfs)");
}

std::string_view RuntimeName(Runtime r) { return NameOf(kRuntimeNames, r, "unknown"); }

Result<Runtime> ParseRuntime(std::string_view s) {
  if (s == "cri-o") return Runtime::kCrio;  // the scheme CRI-O writes in container ids
  if (auto r = FromName(kRuntimeNames, s)) return *r;
  return InvalidArgument("unknown container runtime \"" + std::string(s) +
                         "\" (want containerd, crio or docker)");
}

Result<QosClass> ParseQos(std::string_view s) {
  if (auto q = QosClassFromName(s)) return *q;
  return InvalidArgument("unknown QoS class \"" + std::string(s) + "\"");
}

Result<ContainerRef> ParseContainerId(std::string_view s, std::optional<Runtime> default_runtime) {
  size_t sep = s.find("://");
  ContainerRef ref;
  if (sep == std::string_view::npos) {
    if (!default_runtime) {
      return InvalidArgument("container id \"" + std::string(s) +
                             "\" has no runtime scheme and no default runtime is set");
    }
    ref.runtime = *default_runtime;
    ref.id = std::string(s);
  } else {
    FG_ASSIGN_OR_RETURN(ref.runtime, ParseRuntime(s.substr(0, sep)));
    ref.id = std::string(s.substr(sep + 3));
  }
  if (ref.id.empty() || ref.id.find('/') != std::string::npos || ref.id == "." || ref.id == "..") {
    return InvalidArgument("bad container id \"" + std::string(s) + "\"");
  }
  return ref;
}

std::string NormalizeCgroupRoot(std::string_view root) {
  while (!root.empty() && root.front() == '/') root.remove_prefix(1);
  while (!root.empty() && root.back() == '/') root.remove_suffix(1);
  return std::string(root);
}

std::string SystemdEscapeUid(std::string_view uid) {
  std::string out(uid);
  std::replace(out.begin(), out.end(), '-', '_');
  return out;
}

namespace {
std::string Join(std::string_view root, std::string_view rel) {
  std::string r = NormalizeCgroupRoot(root);
  if (r.empty()) return std::string(rel);
  return r + "/" + std::string(rel);
}
}  // namespace

std::string KubepodsRelPath(KubeletDriver d, std::string_view cgroup_root) {
  return Join(cgroup_root, d == KubeletDriver::kSystemd ? "kubepods.slice" : "kubepods");
}

std::string QosTierRelPath(KubeletDriver d, std::string_view cgroup_root, QosClass q) {
  std::string base = KubepodsRelPath(d, cgroup_root);
  switch (q) {
    case QosClass::kGuaranteed:
      return base;
    case QosClass::kBurstable:
      return base + (d == KubeletDriver::kSystemd ? "/kubepods-burstable.slice" : "/burstable");
    case QosClass::kBestEffort:
      return base + (d == KubeletDriver::kSystemd ? "/kubepods-besteffort.slice" : "/besteffort");
  }
  return base;
}

std::vector<std::string> QosTierRelPaths(KubeletDriver d, std::string_view cgroup_root) {
  return {QosTierRelPath(d, cgroup_root, QosClass::kGuaranteed),
          QosTierRelPath(d, cgroup_root, QosClass::kBurstable),
          QosTierRelPath(d, cgroup_root, QosClass::kBestEffort)};
}

std::string PodRelPath(KubeletDriver d, std::string_view cgroup_root, QosClass q,
                       std::string_view uid) {
  std::string tier = QosTierRelPath(d, cgroup_root, q);
  if (d == KubeletDriver::kCgroupfs) return tier + "/pod" + std::string(uid);
  std::string prefix = "kubepods-";
  if (q == QosClass::kBurstable) prefix = "kubepods-burstable-";
  if (q == QosClass::kBestEffort) prefix = "kubepods-besteffort-";
  return tier + "/" + prefix + "pod" + SystemdEscapeUid(uid) + ".slice";
}

std::optional<std::string> PodUidFromDirName(KubeletDriver d, std::string_view name) {
  std::string_view uid;
  if (d == KubeletDriver::kCgroupfs) {
    if (!name.starts_with("pod")) return std::nullopt;
    uid = name.substr(3);
  } else {
    constexpr std::string_view kSlice = ".slice";
    if (!name.ends_with(kSlice)) return std::nullopt;
    name.remove_suffix(kSlice.size());
    bool matched = false;
    for (std::string_view prefix :
         {"kubepods-burstable-pod", "kubepods-besteffort-pod", "kubepods-pod"}) {
      if (name.starts_with(prefix)) {
        uid = name.substr(prefix.size());
        matched = true;
        break;
      }
    }
    if (!matched) return std::nullopt;
  }
  if (uid.empty()) return std::nullopt;
  std::string out(uid);
  for (char& c : out) {
    if (c == '_') c = '-';  // systemd's escape of '-' (SystemdEscapeUid)
    const bool ok =
        (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == '-';
    if (!ok) return std::nullopt;  // UIDs are hex and dashes
  }
  return out;
}

std::vector<std::string> ContainerLeafNames(KubeletDriver d, const ContainerRef& c) {
  const bool systemd = d == KubeletDriver::kSystemd;
  switch (c.runtime) {
    case Runtime::kContainerd:
      return systemd ? std::vector<std::string>{"cri-containerd-" + c.id + ".scope", c.id}
                     : std::vector<std::string>{c.id, "cri-containerd-" + c.id + ".scope"};
    case Runtime::kCrio:
      return systemd ? std::vector<std::string>{"crio-" + c.id + ".scope", "crio-" + c.id}
                     : std::vector<std::string>{"crio-" + c.id, "crio-" + c.id + ".scope"};
    case Runtime::kDocker:
      return systemd ? std::vector<std::string>{"docker-" + c.id + ".scope", c.id}
                     : std::vector<std::string>{c.id, "docker-" + c.id + ".scope"};
  }
  return {c.id};
}

std::string CrioConmonLeafName(KubeletDriver d, std::string_view id) {
  std::string name = "crio-conmon-" + std::string(id);
  return d == KubeletDriver::kSystemd ? name + ".scope" : name;
}

uint64_t MilliCpuToShares(int64_t milli) {
  if (milli <= 0) return v1::kSharesMin;
  // milli*1024 overflows only beyond 9e15 milliCPU; clamp first to stay exact.
  const int64_t capped = std::min<int64_t>(milli, 1'000'000'000);
  const uint64_t shares = static_cast<uint64_t>(capped) * 1024 / 1000;
  return std::clamp(shares, v1::kSharesMin, v1::kSharesMax);
}

int64_t MilliCpuToQuota(int64_t milli, int64_t period_us) {
  if (milli <= 0) return v1::kQuotaUnlimited;
  const int64_t capped = std::min<int64_t>(milli, 1'000'000'000);
  return std::max<int64_t>(capped * period_us / 1000, kMinQuotaUs);
}

uint64_t SharesToWeight(uint64_t shares) {
  shares = std::clamp(shares, v1::kSharesMin, v1::kSharesMax);
  return 1 + (shares - 2) * 9999 / 262142;
}

uint64_t WeightToShares(uint64_t weight) {
  weight = std::clamp(weight, v2::kWeightMin, v2::kWeightMax);
  // ceil((w-1)*262142/9999): the smallest shares that SharesToWeight maps back to w.
  return 2 + ((weight - 1) * 262142 + 9998) / 9999;
}

}  // namespace feedguard::agent::cgroup
