#include "controller/app/kube_adapters.h"

#include <algorithm>

namespace feedguard::controller {

kube::Gvr FencePolicyGvr() {
  return {kFencePolicyGroup, kFencePolicyVersion, kFencePolicyResource};
}

Status KubePolicyWriter::WriteStatus(const std::string& name, const nlohmann::json& status) {
  auto r = client_->UpdateStatusWithRetry(FencePolicyGvr(), "", name, [&](nlohmann::json& obj) {
    obj["status"] = status;
    return OkStatus();
  });
  return r.ok() ? OkStatus() : r.status();
}

Status KubePolicyWriter::EditFinalizers(const std::string& name, bool add) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto obj = client_->Get(FencePolicyGvr(), "", name);
    if (!obj.ok()) return obj.status();
    nlohmann::json& meta = (*obj)["metadata"];
    std::vector<std::string> f;
    if (meta.contains("finalizers")) f = meta["finalizers"].get<std::vector<std::string>>();
    bool has = std::find(f.begin(), f.end(), kFencePolicyFinalizer) != f.end();
    if (add == has) return OkStatus();
    if (add) {
      if (meta.contains("deletionTimestamp")) return OkStatus();  // too late to add one
      f.push_back(kFencePolicyFinalizer);
    } else {
      f.erase(std::remove(f.begin(), f.end(), kFencePolicyFinalizer), f.end());
    }
    meta["finalizers"] = f;
    auto up = client_->Update(FencePolicyGvr(), "", *obj);
    if (up.ok()) return OkStatus();
    if (up.status().code() != StatusCode::kAborted) return up.status();
  }
  return Aborted("finalizer update of " + name + " kept conflicting");
}

Status KubePolicyWriter::AddFinalizer(const std::string& name) {
  return EditFinalizers(name, true);
}
Status KubePolicyWriter::RemoveFinalizer(const std::string& name) {
  return EditFinalizers(name, false);
}

void KubePolicyWriter::Event(const std::string& policy, const std::string& type,
                             const std::string& reason, const std::string& message) {
  if (!events_) return;
  auto obj = client_->Get(FencePolicyGvr(), "", policy);
  if (!obj.ok()) return;
  nlohmann::json ref = {{"apiVersion", std::string(kFencePolicyGroup) + "/" + kFencePolicyVersion},
                        {"kind", kFencePolicyKind},
                        {"metadata",
                         {{"name", policy},
                          {"uid", (*obj)["metadata"].value("uid", "")},
                          {"resourceVersion", (*obj)["metadata"].value("resourceVersion", "")}}}};
  events_->Record(ref, type, reason, message).IgnoreError();
}

Status DistributorSink::SetDesired(feedguard::v1::NodeFence fence) {
  Distributor* d = distributor_.load();
  if (!d) return Unavailable("distributor not started (not the leader)");
  return d->SetDesired(std::move(fence));
}

std::optional<FenceSink::Agent> DistributorSink::GetAgent(const std::string& node) const {
  Distributor* d = distributor_.load();
  if (!d) return std::nullopt;
  auto s = d->GetAgent(node);
  if (!s || !s->hello) return std::nullopt;  // never connected
  Agent a;
  a.connected = s->connected;
  a.stale = s->stale;
  a.acked_version = s->acked_version;
  a.desired_version = s->desired_version;
  if (s->last_nack && s->last_nack->version == s->desired_version)
    a.nack_error = s->last_nack->error;
  a.report = s->last_report;
  return a;
}

nlohmann::json SlimPod(nlohmann::json pod) {
  nlohmann::json out;
  const auto& m = pod["metadata"];
  for (const char* k :
       {"name", "namespace", "uid", "resourceVersion", "labels", "deletionTimestamp"}) {
    if (m.contains(k)) out["metadata"][k] = m[k];
  }
  const auto& spec = pod["spec"];
  for (const char* k : {"nodeName", "priorityClassName"}) {
    if (spec.contains(k)) out["spec"][k] = spec[k];
  }
  if (spec.contains("containers")) {
    for (const auto& c : spec["containers"]) {
      nlohmann::json slim = {{"name", c.value("name", "")}};
      if (c.contains("resources")) slim["resources"] = c["resources"];
      out["spec"]["containers"].push_back(slim);
    }
  }
  const auto& st = pod["status"];
  for (const char* k : {"phase", "qosClass"}) {
    if (st.contains(k)) out["status"][k] = st[k];
  }
  if (st.contains("containerStatuses")) {
    for (const auto& c : st["containerStatuses"]) {
      out["status"]["containerStatuses"].push_back(
          {{"name", c.value("name", "")}, {"containerID", c.value("containerID", "")}});
    }
  }
  return out;
}

}  // namespace feedguard::controller
