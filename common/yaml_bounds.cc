#include "common/yaml_bounds.h"

#include <fstream>
#include <vector>

namespace feedguard {
namespace {

struct Walk {
  const YamlLimits& limits;
  size_t nodes = 0;
  size_t bytes = 0;
  std::string refused;  // the bound crossed, empty while within

  // False once a bound is crossed (the walk stops).
  bool Visit(const YAML::Node& n, int depth) {
    if (++nodes > limits.max_nodes) {
      refused =
          "more than " + std::to_string(limits.max_nodes) + " nodes once aliases are expanded";
      return false;
    }
    switch (n.Type()) {
      case YAML::NodeType::Scalar:
        // Scalar() is a reference to the node's own string: counting copies nothing.
        bytes += n.Scalar().size();
        if (bytes > limits.max_expanded_bytes) {
          refused = "more than " + std::to_string(limits.max_expanded_bytes) +
                    " bytes of keys and scalars once aliases are expanded";
          return false;
        }
        return true;
      case YAML::NodeType::Map:
      case YAML::NodeType::Sequence:
        if (depth >= limits.max_depth) {
          refused = "nested deeper than " + std::to_string(limits.max_depth) + " levels";
          return false;
        }
        for (const auto& it : n) {
          if (n.IsMap()) {
            if (!Visit(it.first, depth + 1) || !Visit(it.second, depth + 1)) return false;
          } else if (!Visit(it, depth + 1)) {
            return false;
          }
        }
        return true;
      default:
        return true;  // null, undefined
    }
  }
};

}  // namespace

Status CheckYamlBounds(const YAML::Node& root, const YamlLimits& limits) {
  Walk w{limits};
  try {
    if (!w.Visit(root, 0)) return InvalidArgument("YAML refused: " + w.refused);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(std::string("YAML refused: ") + e.what());
  }
  return OkStatus();
}

Result<YAML::Node> LoadYamlBounded(std::string_view text, const YamlLimits& limits) {
  if (text.size() > limits.max_input_bytes) {
    return InvalidArgument("YAML refused: " + std::to_string(text.size()) + " bytes, more than " +
                           std::to_string(limits.max_input_bytes));
  }
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return InvalidArgument(std::string("not valid YAML: ") + e.what());
  }
  FG_RETURN_IF_ERROR(CheckYamlBounds(root, limits));
  return root;
}

Result<YAML::Node> LoadYamlFileBounded(const std::string& path, const YamlLimits& limits) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read " + path);
  std::string text;
  std::vector<char> buf(64 * 1024);
  while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
    text.append(buf.data(), static_cast<size_t>(in.gcount()));
    if (text.size() > limits.max_input_bytes) {
      return InvalidArgument(path + ": YAML refused: larger than " +
                             std::to_string(limits.max_input_bytes) + " bytes");
    }
  }
  if (in.bad()) return Internal("error reading " + path);
  auto root = LoadYamlBounded(text, limits);
  if (!root.ok()) return root.status().Annotate(path);
  return root;
}

}  // namespace feedguard
