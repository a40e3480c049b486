#include "controller/kube/proto_list.h"

#include <optional>

namespace feedguard::kube {
namespace {

// Protocol buffers wire types (the encoding guide).
constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

enum class Read { kOk, kNeedMore, kMalformed };

// A varint at data[*pos]: advances *pos past it.
Read ReadVarint(std::string_view data, size_t* pos, uint64_t* out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*pos >= data.size()) return Read::kNeedMore;
    const auto b = static_cast<uint8_t>(data[(*pos)++]);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *out = v;
      return Read::kOk;
    }
  }
  return Read::kMalformed;  // more than 10 bytes
}

// A field's header: its number, wire type and the size of what follows it.
struct Header {
  uint64_t number = 0;
  int wire_type = 0;
  size_t header_bytes = 0;  // tag (+ length)
  uint64_t payload = 0;     // bytes after the header (a varint's own bytes are in the header)
};

Read ReadHeader(std::string_view data, size_t at, Header* h) {
  size_t pos = at;
  uint64_t tag = 0;
  if (Read r = ReadVarint(data, &pos, &tag); r != Read::kOk) return r;
  h->number = tag >> 3;
  h->wire_type = static_cast<int>(tag & 7);
  if (h->number == 0) return Read::kMalformed;
  uint64_t value = 0;
  switch (h->wire_type) {
    case kVarint:
      if (Read r = ReadVarint(data, &pos, &value); r != Read::kOk) return r;
      h->payload = 0;
      break;
    case kLengthDelimited:
      if (Read r = ReadVarint(data, &pos, &value); r != Read::kOk) return r;
      h->payload = value;
      break;
    case kFixed64:
      h->payload = 8;
      break;
    case kFixed32:
      h->payload = 4;
      break;
    default:  // groups (3, 4) are not in Kubernetes' messages; 6, 7 do not exist
      return Read::kMalformed;
  }
  h->header_bytes = pos - at;
  return Read::kOk;
}

// ListMeta's resourceVersion (field 2), reading past the rest.
std::optional<std::string> ListMetaResourceVersion(std::string_view meta) {
  std::string rv;
  size_t pos = 0;
  while (pos < meta.size()) {
    Header h;
    if (ReadHeader(meta, pos, &h) != Read::kOk) return std::nullopt;
    if (h.payload > meta.size() - pos - h.header_bytes) return std::nullopt;
    if (h.number == 2 && h.wire_type == kLengthDelimited) {
      rv.assign(meta.substr(pos + h.header_bytes, h.payload));
    }
    pos += h.header_bytes + h.payload;
  }
  return rv;
}

}  // namespace

Result<bool> ProtoListSplitter::Step(const std::function<bool(std::string_view)>& on_item,
                                     bool* stop) {
  const std::string_view avail = std::string_view(buf_).substr(pos_);
  switch (stage_) {
    case Stage::kMagic:
      if (avail.size() < kProtobufMagic.size()) return false;
      if (avail.substr(0, kProtobufMagic.size()) != kProtobufMagic) {
        return Internal("not a Kubernetes protobuf body (no \"k8s\\0\" prefix)");
      }
      pos_ += kProtobufMagic.size();
      stage_ = Stage::kEnvelope;
      return true;
    case Stage::kDone:
      return false;
    case Stage::kEnvelope:
    case Stage::kList:
      break;
  }
  if (stage_ == Stage::kList && list_left_ == 0) {
    stage_ = Stage::kEnvelope;
    return true;
  }
  if (avail.empty()) return false;
  Header h;
  switch (ReadHeader(avail, 0, &h)) {
    case Read::kNeedMore:
      if (avail.size() > 20) return Internal("protobuf list: a field header longer than 20 bytes");
      return false;
    case Read::kMalformed:
      return Internal("protobuf list: malformed field header");
    case Read::kOk:
      break;
  }
  const uint64_t total = h.header_bytes + h.payload;
  if (stage_ == Stage::kEnvelope) {
    if (h.number == 2 && h.wire_type == kLengthDelimited) {  // Unknown.raw: the list
      if (saw_list_) return Internal("protobuf list: two lists in one body");
      pos_ += h.header_bytes;
      saw_list_ = true;
      list_left_ = h.payload;
      stage_ = Stage::kList;
      return true;
    }
    if (h.payload > max_rest_) return Internal("protobuf list: an envelope field over the limit");
    if (avail.size() < total) return false;
    pos_ += total;  // TypeMeta, contentEncoding, contentType: not needed
    return true;
  }
  // Inside the list.
  if (total > list_left_) return Internal("protobuf list: a field runs past the list's end");
  const bool item = h.number == 2 && h.wire_type == kLengthDelimited;
  if (h.payload > (item ? max_item_ : max_rest_)) {
    return Internal(item ? "protobuf list: an item over the limit"
                         : "protobuf list: a field outside the items over the limit");
  }
  if (avail.size() < total) return false;
  const std::string_view payload = avail.substr(h.header_bytes, h.payload);
  if (item) {
    if (!on_item(payload)) *stop = true;
  } else if (h.number == 1 && h.wire_type == kLengthDelimited) {  // ListMeta
    auto rv = ListMetaResourceVersion(payload);
    if (!rv) return Internal("protobuf list: malformed ListMeta");
    resource_version_ = std::move(*rv);
  }
  pos_ += total;
  list_left_ -= total;
  return true;
}

Result<bool> ProtoListSplitter::Feed(std::string_view chunk,
                                     const std::function<bool(std::string_view)>& on_item) {
  buf_.append(chunk);
  bool stop = false;
  while (!stop) {
    FG_ASSIGN_OR_RETURN(bool progressed, Step(on_item, &stop));
    if (!progressed) break;
  }
  buf_.erase(0, pos_);
  pos_ = 0;
  return !stop;
}

Result<std::string> ProtoListSplitter::Finish() const {
  if (!saw_list_ || stage_ != Stage::kEnvelope || list_left_ != 0 || pos_ != buf_.size()) {
    return Internal("protobuf list: the body ended before the list did");
  }
  return resource_version_;
}

}  // namespace feedguard::kube
