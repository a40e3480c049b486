#include "agent/client/utf8_fields.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/reflection.h>

#include <string>
#include <type_traits>
#include <vector>

#include "common/utf8.h"

namespace feedguard::agent {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// Visits the message's set fields; `on_string` is called with each string value's field and
// index (-1: singular) and returns false to stop the walk. Returns false when it was stopped.
template <typename M, typename OnString>
bool Walk(M& m, const OnString& on_string) {
  const auto* refl = m.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  refl->ListFields(m, &fields);
  for (const FieldDescriptor* f : fields) {
    if (f->type() == FieldDescriptor::TYPE_STRING) {
      if (!f->is_repeated()) {
        if (!on_string(m, f, -1)) return false;
        continue;
      }
      for (int i = 0; i < refl->FieldSize(m, f); ++i) {
        if (!on_string(m, f, i)) return false;
      }
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (!f->is_repeated()) {
        if constexpr (std::is_const_v<M>) {
          if (!Walk(refl->GetMessage(m, f), on_string)) return false;
        } else {
          if (!Walk(*refl->MutableMessage(&m, f), on_string)) return false;
        }
        continue;
      }
      for (int i = 0; i < refl->FieldSize(m, f); ++i) {
        if constexpr (std::is_const_v<M>) {
          if (!Walk(refl->GetRepeatedMessage(m, f, i), on_string)) return false;
        } else {
          if (!Walk(*refl->MutableRepeatedMessage(&m, f, i), on_string)) return false;
        }
      }
    }
  }
  return true;
}

std::string Get(const Message& m, const FieldDescriptor* f, int i) {
  const auto* refl = m.GetReflection();
  return i < 0 ? refl->GetString(m, f) : refl->GetRepeatedString(m, f, i);
}

}  // namespace

bool StringFieldsAreUtf8(const Message& m) {
  return Walk(m, [](const Message& msg, const FieldDescriptor* f, int i) {
    return IsValidUtf8(Get(msg, f, i));
  });
}

size_t EscapeInvalidUtf8Fields(Message* m) {
  size_t rewritten = 0;
  Walk(*m, [&](Message& msg, const FieldDescriptor* f, int i) {
    const std::string v = Get(msg, f, i);
    if (IsValidUtf8(v)) return true;
    const auto* refl = msg.GetReflection();
    if (i < 0) {
      refl->SetString(&msg, f, EscapeInvalidUtf8(v));
    } else {
      refl->SetRepeatedString(&msg, f, i, EscapeInvalidUtf8(v));
    }
    ++rewritten;
    return true;
  });
  return rewritten;
}

}  // namespace feedguard::agent
