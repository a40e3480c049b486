#include "controller/app/kube_adapters.h"

#include "common/json_member.h"
#include "controller/sanitize/sanitize.h"

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
  auto r = client_->UpdateWithRetry(
      FencePolicyGvr(), "", name, [&](nlohmann::json& obj) -> Result<bool> {
        if (!obj.is_object() || !JsonMember(obj, "metadata").is_object()) {
          return Internal("FencePolicy " + name + " has no metadata object");
        }
        nlohmann::json& meta = obj["metadata"];
        std::vector<std::string> f;
        if (const auto& cur = JsonMember(meta, "finalizers"); cur.is_array()) {
          for (const auto& x : cur) {
            if (x.is_string()) f.push_back(x.get<std::string>());  // others dropped on write
          }
        }
        const bool has = std::find(f.begin(), f.end(), kFencePolicyFinalizer) != f.end();
        if (add == has) return false;
        if (add) {
          if (meta.contains("deletionTimestamp")) return false;  // too late to add one
          f.push_back(kFencePolicyFinalizer);
        } else {
          f.erase(std::remove(f.begin(), f.end(), kFencePolicyFinalizer), f.end());
        }
        meta["finalizers"] = f;
        return true;
      });
  return r.ok() ? OkStatus() : r.status();
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
                          {"uid", kube::UidOf(*obj)},
                          {"resourceVersion", kube::ResourceVersionOf(*obj)}}}};
  // Messages may carry spec or agent text: valid UTF-8 and bounded whatever their origin.
  events_->Record(ref, type, SafeReason(reason), SafeText(message, 1024)).IgnoreError();
}

Status DistributorSink::SetDesired(NodeFencePtr fence) {
  Distributor* d = distributor_.load();
  if (!d) return Unavailable("distributor not started (not the leader)");
  return d->SetDesired(std::move(fence));
}

void DistributorSink::Forget(const std::string& node) {
  if (Distributor* d = distributor_.load()) d->Forget(node);
}

void DistributorSink::OnNodesKnown() {
  if (Distributor* d = distributor_.load()) d->RevalidateNodes();
}

std::optional<AgentView> DistributorSink::GetAgent(const std::string& node) const {
  Distributor* d = distributor_.load();
  if (!d) return std::nullopt;
  auto s = d->GetAgent(node);
  if (!s || !s->hello) return std::nullopt;  // never connected
  AgentView a;
  a.connected = s->connected;
  a.stale = s->stale;
  a.acked_version = s->acked_version;
  a.desired_version = s->desired_version;
  if (s->last_nack && s->last_nack->version == s->desired_version)
    a.nack_error = s->last_nack->error;
  if (s->unreadable_messages > 0) a.unreadable_error = s->unreadable_error;
  return a;
}

}  // namespace feedguard::controller
