// list_splitter.cc — ListSplitter: a byte-level walk of the list's JSON structure (strings,
// escapes, nesting), not a parser: each item is parsed afterwards on its own.
#include "controller/kube/list_splitter.h"

namespace feedguard::kube {

namespace {
bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
}  // namespace

ListSplitter::StringPart ListSplitter::StringByte(char c) {
  if (escape_) {
    escape_ = false;
    return StringPart::kEscape;
  }
  if (c == '\\') {
    escape_ = true;
    return StringPart::kEscape;
  }
  if (c == '"') {
    in_string_ = false;
    return StringPart::kEnd;
  }
  return StringPart::kChar;
}

Result<bool> ListSplitter::Feed(std::string_view chunk,
                                const std::function<bool(std::string_view)>& on_item) {
  size_t i = 0;
  while (i < chunk.size()) {
    bool stop = false;
    if (mode_ == Mode::kInItem) {
      // Most of a list's bytes are inside items: walked in one tight loop, copied in one piece.
      FG_ASSIGN_OR_RETURN(const size_t used, ScanItem(chunk.substr(i), on_item, &stop));
      i += used;
    } else {
      FG_RETURN_IF_ERROR(Step(chunk[i++]));
    }
    if (stop) return false;
  }
  return true;
}

Result<size_t> ListSplitter::ScanItem(std::string_view bytes,
                                      const std::function<bool(std::string_view)>& on_item,
                                      bool* stop) {
  size_t n = 0;
  bool complete = false;
  while (n < bytes.size() && !complete) {
    const char c = bytes[n++];
    if (in_string_) {
      if (escape_) {
        escape_ = false;
      } else if (c == '\\') {
        escape_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
    } else if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if (c == '}' || c == ']') {
      complete = --depth_ == 2;
    }
  }
  if (item_.size() + n > max_item_) {
    return Status(StatusCode::kResourceExhausted,
                  "list response: an item exceeds " + std::to_string(max_item_) + " bytes");
  }
  item_.append(bytes.data(), n);
  if (complete) {
    mode_ = Mode::kBetweenItems;
    if (!on_item(item_)) *stop = true;
    item_.clear();
  }
  return n;
}

Status ListSplitter::Step(char c) {
  if (done_) {
    if (IsSpace(c)) return OkStatus();
    return InvalidArgument("list response: bytes after the list");
  }
  if (mode_ == Mode::kBetweenItems) {
    // Inside "items": [ … ] at depth 2, between elements.
    if (IsSpace(c) || c == ',') return OkStatus();
    if (c == ']') {
      --depth_;
      mode_ = Mode::kOutside;
      rest_ += "[]";
      return OkStatus();
    }
    if (c != '{') return InvalidArgument("list response: an item is not a JSON object");
    mode_ = Mode::kInItem;
    item_.assign(1, c);
    ++depth_;
    return OkStatus();
  }
  // Outside the items: kept in rest_, and watched for the top-level "items" key.
  if (rest_.size() >= max_rest_) {
    return Status(
        StatusCode::kResourceExhausted,
        "list response: more than " + std::to_string(max_rest_) + " bytes outside its items");
  }
  if (in_string_) {
    rest_ += c;
    const StringPart part = StringByte(c);
    if (part == StringPart::kEnd && in_key_) {
      in_key_ = false;
      key_is_items_ = key_ == "items";
    } else if (part == StringPart::kChar && in_key_ && key_.size() < 8) {
      key_ += c;
    }
    return OkStatus();
  }
  if (IsSpace(c)) {
    rest_ += c;
    return OkStatus();
  }
  if (!started_) {
    if (c != '{') return InvalidArgument("list response is not a JSON object");
    started_ = true;
  }
  if (c == '"') {
    in_string_ = true;
    if (depth_ == 1 && expect_key_) {
      in_key_ = true;
      expect_key_ = false;
      key_.clear();
    }
    rest_ += c;
    return OkStatus();
  }
  if (c == '[' && depth_ == 1 && key_is_items_) {
    // The value of the top-level "items": its elements are split out, not kept.
    key_is_items_ = false;
    ++depth_;
    mode_ = Mode::kBetweenItems;
    return OkStatus();
  }
  rest_ += c;
  if (c == '{' || c == '[') {
    ++depth_;
    if (depth_ == 1) expect_key_ = true;
  } else if (c == '}' || c == ']') {
    if (--depth_ < 0) return InvalidArgument("list response: unbalanced brackets");
    if (depth_ == 0) done_ = true;
  } else if (c == ',' && depth_ == 1) {
    expect_key_ = true;
    key_is_items_ = false;
  } else if (c != ':' && depth_ == 1) {
    key_is_items_ = false;  // a scalar value at depth 1: the key was not followed by '['
  }
  return OkStatus();
}

Result<std::string> ListSplitter::Finish() const {
  if (!done_) return Unavailable("list response ended before the list did");
  return rest_;
}

}  // namespace feedguard::kube
