// utf8.h — UTF-8 validity, decided once for every component: the controller's sanitizer
// (controller/sanitize) and the agent's escaping of the strings it sends (agent/client) both
// read sequences with Utf8SequenceLength.
//
// Proto3 `string` fields must be valid UTF-8: C++ protobuf serializes one that is not (it only
// logs) but refuses to parse it, so a single such byte in an agent's report (a cgroup dir a
// tenant named "\xff\xfe") would make the whole message unreadable to the controller.
//
// Example:
//   IsValidUtf8("caf\xc3\xa9")               → true
//   EscapeInvalidUtf8("pod/\xff\xfe/cpus")  → "pod/\\xFF\\xFE/cpus"  (as text: pod/\xFF\xFE/cpus)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace feedguard {

// Length (1..4) of the well-formed UTF-8 sequence at s[i], its code point in *cp; 0 when the
// bytes there are not one (a bad lead or continuation byte, a cut sequence, an overlong form, a
// surrogate, a code point above U+10FFFF).
size_t Utf8SequenceLength(std::string_view s, size_t i, uint32_t* cp);

bool IsValidUtf8(std::string_view s);

// `s` with every byte that is not part of a well-formed sequence written as the four ASCII
// characters \xHH (upper-case hex); valid text, a backslash included, is kept as it is.
std::string EscapeInvalidUtf8(std::string_view s);

}  // namespace feedguard
