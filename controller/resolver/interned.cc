#include "controller/resolver/interned.h"

#include <functional>

namespace feedguard::controller {

size_t InternHash(const Labels& labels) {
  size_t h = labels.size();
  for (const auto& [k, v] : labels) {
    h = h * 1000003u ^ std::hash<std::string>{}(k);
    h = h * 1000003u ^ std::hash<std::string>{}(v);
  }
  return h;
}

size_t InternHash(const std::string& s) { return std::hash<std::string>{}(s); }

}  // namespace feedguard::controller
