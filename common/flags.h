// flags.h — command-line flags for the agent and controller, parsed by CLI11 (Debian's
// libcli11-dev): `--name value`, `--name=value`, boolean `--name` (or `--name=true|false`), `--`
// ends the flags; every flag declared with its help text, unknown flags rejected, help generated.
//
// The facade keeps CLI11 out of the callers' headers. Values are kept as the strings given;
// the typed getters convert them and say clearly what was wrong:
//
//   Flags f;
//   f.Define("stale-after-ms", "60000", "an agent disconnected this long is reported stale");
//   f.DefineBool("insecure", "no TLS");
//   FG_RETURN_IF_ERROR(f.Parse(argc, argv, 1));
//   FG_ASSIGN_OR_RETURN(std::chrono::milliseconds stale, f.GetMillis("stale-after-ms"));
//   // --stale-after-ms=abc → "--stale-after-ms: \"abc\" is not a whole number of milliseconds"
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "feedguard/common/status.h"

namespace CLI {
class App;
}

namespace feedguard {

class Flags {
 public:
  Flags();
  ~Flags();
  Flags(const Flags&) = delete;
  Flags& operator=(const Flags&) = delete;

  // Declares a flag taking a value, with its default.
  void Define(const std::string& name, const std::string& default_value, const std::string& help);
  // Declares a boolean flag (present = true).
  void DefineBool(const std::string& name, const std::string& help);

  // Parses argv[first..]; positional arguments are kept in order. A flag given twice: the last
  // value wins.
  Status Parse(int argc, char** argv, int first);

  // The value as given (or the default). Asking for an undeclared flag is a programming error
  // (throws std::logic_error).
  const std::string& Get(const std::string& name) const;
  bool GetBool(const std::string& name) const;
  // A whole number (decimal, optional sign, nothing else).
  Result<int64_t> GetInt(const std::string& name) const;
  // A whole, non-negative number of milliseconds (the "-ms" flags).
  Result<std::chrono::milliseconds> GetMillis(const std::string& name) const;
  bool IsSet(const std::string& name) const;  // given on the command line
  const std::vector<std::string>& positional() const { return positional_; }
  std::string Help() const;

 private:
  struct Flag {
    std::string value;
    std::string help;
    bool is_bool = false;
    bool bool_value = false;  // CLI11's target for boolean flags
    bool set = false;
  };
  const Flag& Find(const std::string& name) const;

  std::unique_ptr<CLI::App> app_;
  std::map<std::string, Flag> flags_;  // node-stable: CLI11 writes into the values
  std::vector<std::string> order_;
  std::vector<std::string> positional_;
};

}  // namespace feedguard
