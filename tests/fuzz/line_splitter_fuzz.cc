// line_splitter_fuzz.cc — the watch stream's line reassembly (controller/kube/line_splitter):
// bytes from the API server split into chunks at arbitrary positions. Properties: the lines it
// emits are exactly those of the whole stream split at '\n' (a trailing '\r' cut, empty lines
// skipped) whatever the chunking; no emitted line and no held-back tail exceeds the limit; a
// line over the limit (its bytes before the '\n') is an error wherever the chunks split it.
#include <string>
#include <vector>

#include "controller/kube/line_splitter.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

// What a correct splitter emits for the whole stream (the final unterminated line excluded).
std::vector<std::string> Reference(std::string_view s, std::string* tail) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t nl; (nl = s.find('\n', start)) != std::string_view::npos; start = nl + 1) {
    std::string_view line = s.substr(start, nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty()) out.emplace_back(line);
  }
  *tail = std::string(s.substr(start));
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  // Byte 0: the line limit (1..256 bytes, so the fuzzer reaches it); byte 1: the chunking seed.
  if (size < 2) return 0;
  const size_t max_line = 1 + data[0];
  uint32_t x = data[1] * 2654435761u + 1;
  const std::string_view stream = AsText(data + 2, size - 2);

  feedguard::kube::LineSplitter splitter(max_line);
  std::vector<std::string> got;
  bool failed = false;
  for (size_t pos = 0; pos < stream.size() && !failed;) {
    x = x * 1103515245u + 12345u;
    const size_t n = std::min<size_t>(1 + (x >> 8) % 64, stream.size() - pos);
    auto r = splitter.Feed(stream.substr(pos, n), [&](std::string_view line) {
      FG_FUZZ_CHECK(!line.empty());
      FG_FUZZ_CHECK(line.size() <= max_line);
      got.emplace_back(line);
      return true;
    });
    FG_FUZZ_CHECK(splitter.pending() <= max_line);
    if (!r.ok()) {
      failed = true;
    } else {
      FG_FUZZ_CHECK(*r);
    }
    pos += n;
  }
  std::string tail;
  const std::vector<std::string> want = Reference(stream, &tail);
  // A stream with a line over the limit must fail (only the chunking decides where); one
  // without must give exactly the reference lines and keep the unterminated tail.
  bool over = tail.size() > max_line;
  for (size_t start = 0, nl; !over && (nl = stream.find('\n', start)) != std::string_view::npos;
       start = nl + 1) {
    over = nl - start > max_line;  // the limit counts a line's bytes before its '\n'
  }
  FG_FUZZ_CHECK(failed == over);
  if (!failed) {
    FG_FUZZ_CHECK(got == want);
    FG_FUZZ_CHECK(splitter.partial() == tail);
  } else {
    // What came out before the error is a prefix of the reference.
    FG_FUZZ_CHECK(got.size() <= want.size());
    for (size_t i = 0; i < got.size(); ++i) FG_FUZZ_CHECK(got[i] == want[i]);
  }
  return 0;
}
