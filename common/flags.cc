#include "common/flags.h"

#include <stdexcept>

namespace feedguard {

void Flags::Define(const std::string& name, const std::string& default_value,
                   const std::string& help) {
  flags_[name] = Flag{default_value, help, false, false};
  order_.push_back(name);
}

void Flags::DefineBool(const std::string& name, const std::string& help) {
  flags_[name] = Flag{"false", help, true, false};
  order_.push_back(name);
}

Status Flags::Parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      for (++i; i < argc; ++i) positional_.push_back(argv[i]);
      break;
    }
    if (a.rfind("--", 0) != 0 || a.size() == 2) {
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it = flags_.find(name);
    if (it == flags_.end()) return InvalidArgument("unknown flag --" + name + " (see --help)");
    Flag& f = it->second;
    if (f.is_bool) {
      if (has_value && value != "true" && value != "false") {
        return InvalidArgument("--" + name + " takes no value (or =true/=false)");
      }
      f.value = has_value ? value : "true";
    } else {
      if (!has_value) {
        if (i + 1 >= argc) return InvalidArgument("--" + name + " needs a value");
        value = argv[++i];
      }
      f.value = value;
    }
    f.set = true;
  }
  return OkStatus();
}

const std::string& Flags::Get(const std::string& name) const {
  auto it = flags_.find(name);
  if (it == flags_.end()) throw std::logic_error("undeclared flag " + name);
  return it->second.value;
}

bool Flags::GetBool(const std::string& name) const { return Get(name) == "true"; }

bool Flags::IsSet(const std::string& name) const {
  auto it = flags_.find(name);
  return it != flags_.end() && it->second.set;
}

std::string Flags::Help() const {
  std::string out;
  for (const auto& name : order_) {
    const Flag& f = flags_.at(name);
    std::string head = "  --" + name + (f.is_bool ? "" : " VALUE");
    if (head.size() < 34) head.resize(34, ' ');
    out += head + " " + f.help;
    if (!f.is_bool && !f.value.empty()) out += " (default: " + f.value + ")";
    out += "\n";
  }
  return out;
}

}  // namespace feedguard
