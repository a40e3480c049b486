// flags.h — a small command-line parser for the agent and controller: `--name value`,
// `--name=value` and boolean `--name`; every flag declared with its help text, unknown flags
// rejected, `--help` generated.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "feedguard/common/status.h"

namespace feedguard {

class Flags {
 public:
  // Declares a flag taking a value, with its default.
  void Define(const std::string& name, const std::string& default_value, const std::string& help);
  // Declares a boolean flag (present = true).
  void DefineBool(const std::string& name, const std::string& help);

  // Parses argv[first..]; positional arguments are kept in order.
  Status Parse(int argc, char** argv, int first);

  const std::string& Get(const std::string& name) const;
  bool GetBool(const std::string& name) const;
  bool IsSet(const std::string& name) const;  // given on the command line
  const std::vector<std::string>& positional() const { return positional_; }
  std::string Help() const;

 private:
  struct Flag {
    std::string value;
    std::string help;
    bool is_bool = false;
    bool set = false;
  };
  std::map<std::string, Flag> flags_;
  std::vector<std::string> order_;
  std::vector<std::string> positional_;
};

}  // namespace feedguard
