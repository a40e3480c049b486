#include "controller/kube/line_splitter.h"

namespace feedguard::kube {
namespace {

bool Emit(std::string_view line, const std::function<bool(std::string_view)>& on_line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.empty()) return true;
  return on_line(line);
}

}  // namespace

Result<bool> LineSplitter::Feed(std::string_view chunk,
                                const std::function<bool(std::string_view)>& on_line) {
  while (!chunk.empty()) {
    const size_t nl = chunk.find('\n');
    if (nl == std::string_view::npos) {
      if (buf_.size() + chunk.size() > max_line_) {
        buf_.clear();
        return Status(StatusCode::kResourceExhausted, "stream line exceeds the size limit");
      }
      buf_.append(chunk);
      return true;
    }
    // The limit holds for a line completed in this chunk too, not only for a held-back tail:
    // whether a runaway line is refused must not depend on where the chunks were cut.
    if (buf_.size() + nl > max_line_) {
      buf_.clear();
      return Status(StatusCode::kResourceExhausted, "stream line exceeds the size limit");
    }
    bool go_on;
    if (buf_.empty()) {
      go_on = Emit(chunk.substr(0, nl), on_line);
    } else {
      buf_.append(chunk.substr(0, nl));
      std::string line = std::move(buf_);
      buf_.clear();
      go_on = Emit(line, on_line);
    }
    chunk.remove_prefix(nl + 1);
    if (!go_on) {
      buf_.assign(chunk);
      return false;
    }
  }
  return true;
}

}  // namespace feedguard::kube
