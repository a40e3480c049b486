// fs_cgroups.h — the real Cgroups implementation, reading and writing files under the mount
// points of a CgroupLayout. The same code runs on real cgroupfs and on plain directories
// (unit tests and the enforcer's fakes: point the layout's mounts at a temp dir).
#pragma once

#include <string>
#include <string_view>

#include "agent/cgroup/cgroups.h"

namespace feedguard::agent::cgroup {

CgroupsPtr NewFsCgroups(CgroupLayout layout);

// Low-level helpers shared with the kubelet stand-in.
// Reads a whole (small) file. ENOENT → NotFound.
Result<std::string> ReadCgroupFile(const std::string& path);
// One open(O_WRONLY|O_TRUNC) + one write(2); never creates the file. Errors mapped as in
// cgroups.h, the message naming the path and value.
Status WriteCgroupFile(const std::string& path, std::string_view bytes);
// The Status for a failed write of `value` to `path` with errno `err`.
Status WriteErrnoToStatus(int err, const std::string& path, std::string_view value);

}  // namespace feedguard::agent::cgroup
