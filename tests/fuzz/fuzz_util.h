// fuzz_util.h — the shared bits of feedguard's libFuzzer targets.
//
// Every target defines LLVMFuzzerTestOneInput and checks properties, not just "no crash": a
// parser that accepts an input must give a value that survives its own round trip where one
// exists. FG_FUZZ_CHECK aborts (a finding) when a property fails.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string_view>

#define FG_FUZZ_CHECK(cond)                                                            \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)

inline std::string_view AsText(const unsigned char* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}
