// null_writer.h — a PolicyWriter that accepts every API write and keeps nothing: the
// reconciler's cost measured without an API server (fg-pod-memory, fg-fence-loop).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "controller/reconciler/reconciler.h"

namespace feedguard::bench {

class NullWriter final : public controller::PolicyWriter {
 public:
  Status WriteStatus(const std::string&, const nlohmann::json&) override { return OkStatus(); }
  Status AddFinalizer(const std::string&) override { return OkStatus(); }
  Status RemoveFinalizer(const std::string&) override { return OkStatus(); }
  void Event(const std::string&, const std::string&, const std::string&,
             const std::string&) override {}
};

}  // namespace feedguard::bench
