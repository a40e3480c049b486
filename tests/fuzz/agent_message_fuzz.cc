// agent_message_fuzz.cc — what an agent sends the controller (AgentMessage on the wire: hello,
// ACK, NACK, report), through the checks the distributor applies (controller/distributor: the
// hello's node name, the NACK text via controller/sanitize) into the Reconciler and the
// policy status (controller/status), whose writes controller_fuzz.h checks against the CRD.
//
// Properties: a node name the distributor accepts is a DNS subdomain (no '/', no '..', at most
// 253 bytes: it becomes a map key, a log field and part of status); sanitised text is valid
// UTF-8 within its bound; a hostile report never makes a status the API server would refuse.
#include <cmath>
#include <string>

#include "controller/observe/starvation_book.h"
#include "controller/observe/starvation_report.h"
#include "controller/sanitize/sanitize.h"
#include "feedguard/common/wire_limits.h"
#include "tests/fuzz/controller_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  namespace controller = feedguard::controller;
  feedguard::v1::AgentMessage msg;
  if (!msg.ParseFromArray(data, static_cast<int>(size))) return 0;

  feedguard::fuzz::FuzzCluster cluster;
  controller::Reconciler& rc = *cluster.reconciler;
  const std::string node = "gpu-node-1";
  switch (msg.msg_case()) {
    case feedguard::v1::AgentMessage::kHello: {
      const std::string& name = msg.hello().node_name();
      if (controller::IsDnsSubdomain(name)) {
        FG_FUZZ_CHECK(!name.empty() && name.size() <= 253);
        FG_FUZZ_CHECK(name.find('/') == std::string::npos);
        FG_FUZZ_CHECK(name.find("..") == std::string::npos);
        for (char c : name) {
          FG_FUZZ_CHECK((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.');
        }
        rc.OnConnected(name, msg.hello());
      }
      break;
    }
    case feedguard::v1::AgentMessage::kAck:
      rc.OnAck(node, msg.ack().version());
      break;
    case feedguard::v1::AgentMessage::kNack: {
      const std::string error = controller::SafeText(msg.nack().error(), 1024);
      FG_FUZZ_CHECK(error.size() <= 1024);
      feedguard::fuzz::MustDump(nlohmann::json(error));
      cluster.sink->agents[node].nack_error = error;
      rc.OnNack(node, msg.nack().version(), error);
      break;
    }
    case feedguard::v1::AgentMessage::kReport: {
      rc.OnReport(node, msg.report());  // the reconciler keeps its tallies, not the report
      // Its observations, as the StarvationBook keeps them and the StarvationReport renders
      // them: bounded, finite, wait within what was sampled, loss within the wait, and JSON the
      // writer can always dump (a dump that throws would end the writer's thread).
      controller::StarvationBook book(nullptr);
      book.OnReport(node, msg.report());
      const nlohmann::json st = controller::RenderStarvationStatus(book.Snapshot(), nullptr, 0);
      feedguard::fuzz::MustDump(st);
      FG_FUZZ_CHECK(st["pods"].size() <= 50);
      for (const auto& p : st["pods"]) {
        for (const auto& w : p["windows"]) {
          const double covered = w["coveredSeconds"], wait = w["waitSeconds"];
          FG_FUZZ_CHECK(std::isfinite(covered) && std::isfinite(wait) && wait <= covered + 1e-6);
          if (w.contains("gpuLostSeconds")) {
            FG_FUZZ_CHECK(w["gpuLostSeconds"].get<double>() <= wait + 1e-6);
          }
          FG_FUZZ_CHECK(w["contenders"].size() <= feedguard::kMaxObservedContenders);
        }
      }
      break;
    }
    default:
      break;
  }
  cluster.Settle();
  return 0;
}
