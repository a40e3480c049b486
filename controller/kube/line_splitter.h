// line_splitter.h — reassembles newline-delimited records (the watch stream: one JSON object per
// line) from chunks split at arbitrary byte positions.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "feedguard/common/status.h"

namespace feedguard::kube {

class LineSplitter {
 public:
  // A line longer than `max_line` bytes is an error (a runaway or hostile stream).
  explicit LineSplitter(size_t max_line = 64u << 20) : max_line_(max_line) {}

  // Feeds one chunk; calls `on_line` for each complete line (without the '\n', a trailing '\r'
  // stripped, empty lines skipped). Stops early and returns false when `on_line` returns false.
  // Returns an error when the buffered partial line exceeds the limit.
  Result<bool> Feed(std::string_view chunk, const std::function<bool(std::string_view)>& on_line);

  // Bytes of an unfinished line held back.
  size_t pending() const { return buf_.size(); }
  // The unfinished tail (e.g. a final record without a newline at end of stream).
  const std::string& partial() const { return buf_; }
  void Clear() { buf_.clear(); }

 private:
  size_t max_line_;
  std::string buf_;
};

}  // namespace feedguard::kube
