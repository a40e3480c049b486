// fence_applier.h — the seam between the agent's stream client and its enforcement pipeline.
//
// FenceClient hands every NodeFence it receives to a FenceApplier (in production: plan + enforce
// + verify; in tests: a fake). Apply() returns the per-pod outcome (ACKed and reported) or an
// error (NACKed with its message). A pure interface; implementations must be thread-safe, since
// CurrentReport() may be called from the client's report thread while Apply() runs.
#pragma once

#include <memory>
#include <optional>

#include "feedguard/common/status.h"
#include "feedguard/v1/nodefence.pb.h"

namespace feedguard::agent {

class FenceApplier {
 public:
  virtual ~FenceApplier() = default;
  // Makes the node match `fence`. Called from one thread at a time.
  virtual Result<feedguard::v1::NodeReport> Apply(const feedguard::v1::NodeFence& fence) = 0;
  // A fresh report for the periodic send (PSI, usage, overwrites). nullopt: resend the last one.
  virtual std::optional<feedguard::v1::NodeReport> CurrentReport() { return std::nullopt; }
};
using FenceApplierPtr = std::shared_ptr<FenceApplier>;

}  // namespace feedguard::agent
