// cpu_quantity_fuzz.cc — CPU quantities from pod specs ("250m", "2", "1.5") into millicores
// (controller/resolver/cluster_objects: ParseCpuMilli), the controller's only quantity parser.
//
// Properties: an accepted quantity is in [0, 10^12] millicores and reads back the same from its
// canonical "<n>m" form; a plain decimal is rounded up to whole millicores exactly as Kubernetes
// does (compared against decimal arithmetic on the digits, not floating point).
#include <string>

#include "controller/resolver/cluster_objects.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

// Exact millicores of "<int>[.<frac>]" with at most 9 integer digits (rounded up), or -1.
int64_t ReferenceMilli(const std::string& s) {
  size_t i = 0;
  int64_t whole = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    if (i >= 9) return -1;
    whole = whole * 10 + (s[i] - '0');
    ++i;
  }
  if (i == 0) return -1;
  int64_t milli = whole * 1000;
  if (i == s.size()) return milli;
  if (s[i] != '.' || i + 1 == s.size()) return -1;
  int64_t frac = 0;
  bool rest = false;
  for (size_t k = i + 1, n = 0; k < s.size(); ++k, ++n) {
    if (s[k] < '0' || s[k] > '9') return -1;
    if (n < 3) {
      frac = frac * 10 + (s[k] - '0');
    } else if (s[k] != '0') {
      rest = true;
    }
  }
  for (size_t n = s.size() - i - 1; n < 3; ++n) frac *= 10;
  return milli + frac + (rest ? 1 : 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  const std::string q(AsText(data, size));
  auto v = feedguard::controller::ParseCpuMilli(q);
  // Quantities longer than 64 bytes are refused by design (the API server stores quantities in
  // canonical form, at most nanosecond precision: a few dozen bytes at most).
  const int64_t want = q.size() <= 64 ? ReferenceMilli(q) : -1;
  if (want >= 0) {
    FG_FUZZ_CHECK(v.ok());
    FG_FUZZ_CHECK(*v == want);
  }
  if (!v.ok()) return 0;
  FG_FUZZ_CHECK(*v >= 0 && *v <= 1'000'000'000'000);
  auto again = feedguard::controller::ParseCpuMilli(std::to_string(*v) + "m");
  FG_FUZZ_CHECK(again.ok() && *again == *v);
  return 0;
}
