// Test helper: base64url without padding (RFC 4648 §5), the encoding of a JWT's parts — for tests
// that build or re-sign tokens (agent_auth_test, tests/integration/kube's agent identity suite).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace feedguard::testing {

inline std::string B64UrlEncode(std::string_view in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (unsigned char c : in) {
    acc = (acc << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(kAlphabet[(acc >> bits) & 63u]);
    }
  }
  if (bits > 0) out.push_back(kAlphabet[(acc << (6 - bits)) & 63u]);
  return out;
}

}  // namespace feedguard::testing
