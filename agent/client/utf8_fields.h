// utf8_fields.h — every string field of a protobuf message made valid UTF-8 before the agent
// sends it (issue 28, item 3).
//
// Proto3 strings must be UTF-8. The agent's messages carry text it did not choose — cgroup
// paths a tenant named (a child dir "\xff\xfe" below its container), kernel and file contents
// in error messages — and C++ protobuf serializes an invalid string but the controller's parser
// refuses the whole message: one such byte made a node's reports unreadable, forever. Walked
// with reflection, so every string field of every message kind (hello, NACK, report, and
// whatever is added later) is covered at the one place messages leave the agent
// (FenceClient's stream writes).
//
// Example:
//   AgentMessage m = ...;                  // a pod message naming ".../\xff\xfe/cpuset.cpus"
//   EscapeInvalidUtf8Fields(&m);           // → ".../\\xFF\\xFE/cpuset.cpus"; returns 1
#pragma once

#include <cstddef>

namespace google::protobuf {
class Message;
}

namespace feedguard::agent {

// Whether every string field (singular, repeated, in nested messages and maps) is valid UTF-8.
bool StringFieldsAreUtf8(const google::protobuf::Message& m);
// Rewrites each string field that is not valid UTF-8 with EscapeInvalidUtf8 (common/utf8.h);
// returns how many values it rewrote. Bytes fields are left alone (they may hold anything).
size_t EscapeInvalidUtf8Fields(google::protobuf::Message* m);

}  // namespace feedguard::agent
