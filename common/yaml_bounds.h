// yaml_bounds.h — YAML from input we do not trust, read without a bomb going off.
//
// yaml-cpp parses aliases as references to their anchor's node, so a small document expands
// into a huge tree for whoever walks it: nested anchors (a "billion laughs") multiply the nodes,
// and a single large scalar referenced by many aliases multiplies the bytes (a 1 MiB scalar
// under 1,000 aliases is a GB for any reader that copies each value, a few MB on disk). Every
// entry point that reads YAML we did not write (fence files for `feedguard-agent plan|apply`,
// kubeconfigs, the kubelet's config file) parses through LoadYamlBounded, which walks the parsed
// tree once exactly as a reader would — aliases expanded — and refuses it before anything is
// copied when it has too many nodes, too many bytes of keys and scalars, or is too deep. The
// walk itself stops at the first bound it crosses, so refusing a bomb costs microseconds.
//
// Example:
//   YamlLimits limits{.max_input_bytes = 4 << 20, .max_nodes = 100'000,
//                     .max_expanded_bytes = 16 << 20, .max_depth = 64};
//   FG_ASSIGN_OR_RETURN(YAML::Node root, LoadYamlBounded(text, limits));
//   // InvalidArgument "YAML refused: more than 16777216 bytes of keys and scalars once aliases
//   // are expanded" for the byte bomb.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <yaml-cpp/yaml.h>

#include "feedguard/common/status.h"

namespace feedguard {

struct YamlLimits {
  size_t max_input_bytes = 0;     // the text itself
  size_t max_nodes = 0;           // nodes visited with aliases expanded (keys count)
  size_t max_expanded_bytes = 0;  // bytes of keys and scalars with aliases expanded
  int max_depth = 0;              // nesting of maps and sequences
};

// Nodes, bytes and depth of `root` as a reader sees it (aliases expanded); InvalidArgument
// naming the first bound crossed. Stops walking there.
Status CheckYamlBounds(const YAML::Node& root, const YamlLimits& limits);

// Parses one document and checks it (CheckYamlBounds); a parse error is InvalidArgument with
// yaml-cpp's message. Never throws.
Result<YAML::Node> LoadYamlBounded(std::string_view text, const YamlLimits& limits);

// The file at `path` (at most limits.max_input_bytes are read; a longer file is refused
// without reading the rest), parsed and checked. NotFound when it cannot be opened.
Result<YAML::Node> LoadYamlFileBounded(const std::string& path, const YamlLimits& limits);

}  // namespace feedguard
