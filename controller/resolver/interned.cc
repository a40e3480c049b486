#include "controller/resolver/interned.h"

#include <functional>

namespace feedguard::controller {

size_t InternHash(const std::string& s) { return std::hash<std::string>{}(s); }

}  // namespace feedguard::controller
