#include "agent/enforcer/fake_node.h"

#include <stdlib.h>

#include <gtest/gtest.h>
#include <filesystem>

#include "agent/cgroup/fs_cgroups.h"
#include "agent/cgroup/kubelet_facts.h"

namespace feedguard::agent::testutil {

namespace fs = std::filesystem;
using cgroup::CgroupVersion;

FakeNode::FakeNode(CgroupVersion version, cgroup::KubeletDriver driver, bool cpu_idle)
    : version_(version), driver_(driver) {
  std::string tmpl = (fs::temp_directory_path() / "fg-fakenode-XXXXXX").string();
  const char* made = ::mkdtemp(tmpl.data());
  EXPECT_NE(made, nullptr) << "mkdtemp " << tmpl;
  root_ = made ? made : tmpl;
  options_.cpu_idle = cpu_idle;
  options_.cpus = "0-7";
  options_.mems = "0-1";
  auto layout = cgroup::MakeFakeLayout(root_, version, driver, "", options_);
  EXPECT_TRUE(layout.ok()) << layout.status().ToString();
  if (layout.ok()) layout_ = *layout;
  cgroups_ = cgroup::NewFsCgroups(layout_);
}

FakeNode::~FakeNode() {
  std::error_code ec;
  fs::remove_all(root_, ec);
}

PodIdentity FakeNode::AddPod(const std::string& uid, QosClass qos, std::vector<std::string> ids,
                             const std::string& ns) {
  PodIdentity p;
  p.uid = uid;
  p.ns = ns;
  p.name = "pod-" + uid;
  p.qos = qos;
  const std::string rel = cgroup::PodRelPath(driver_, "", qos, uid);
  MakeDirs(rel);
  for (const auto& id : ids) {
    p.container_ids.push_back("containerd://" + id);
    auto leaf = cgroup::ContainerLeafNames(driver_, {cgroup::Runtime::kContainerd, id});
    MakeDirs(rel + "/" + leaf[0]);
  }
  return p;
}

void FakeNode::MakeDirs(const std::string& rel) {
  if (version_ == CgroupVersion::kV2) {
    EXPECT_TRUE(
        cgroup::MakeFakeCgroupDir(layout_.cpu_mount + "/" + rel, version_, "", options_).ok());
    return;
  }
  EXPECT_TRUE(
      cgroup::MakeFakeCgroupDir(layout_.cpu_mount + "/" + rel, version_, "cpu", options_).ok());
  EXPECT_TRUE(
      cgroup::MakeFakeCgroupDir(layout_.cpuacct_mount + "/" + rel, version_, "cpuacct", options_)
          .ok());
  EXPECT_TRUE(
      cgroup::MakeFakeCgroupDir(layout_.cpuset_mount + "/" + rel, version_, "cpuset", options_)
          .ok());
}

std::string FakeNode::PodFile(const std::string& mount, const PodIdentity& p,
                              const std::string& file, const std::string& sub) const {
  return mount + "/" + cgroup::PodRelPath(driver_, "", p.qos, p.uid) + sub + "/" + file;
}

std::string FakeNode::CpuFile(const PodIdentity& p, const std::string& file,
                              const std::string& sub) const {
  return PodFile(layout_.cpu_mount, p, file, sub);
}

std::string FakeNode::CpuacctFile(const PodIdentity& p, const std::string& file,
                                  const std::string& sub) const {
  return PodFile(layout_.cpuacct_mount, p, file, sub);
}

std::string FakeNode::CpusetFile(const PodIdentity& p, const std::string& file,
                                 const std::string& sub) const {
  return PodFile(layout_.cpuset_mount, p, file, sub);
}

std::string FakeNode::ContainerSub(const std::string& id) const {
  return "/" + cgroup::ContainerLeafNames(driver_, {cgroup::Runtime::kContainerd, id})[0];
}

std::map<std::string, std::string> FakeNode::Snapshot() const {
  std::map<std::string, std::string> out;
  std::set<std::string> mounts{layout_.cpu_mount, layout_.cpuacct_mount, layout_.cpuset_mount};
  for (const auto& mount : mounts) {
    for (const auto& e : fs::recursive_directory_iterator(mount)) {
      if (e.is_regular_file()) out[e.path().string()] = Slurp(e.path().string());
    }
  }
  return out;
}

}  // namespace feedguard::agent::testutil
