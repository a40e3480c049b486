#include "common/flags.h"

#include <CLI/CLI.hpp>
#include <charconv>
#include <stdexcept>

namespace feedguard {

Flags::Flags() : app_(std::make_unique<CLI::App>()) {
  app_->set_help_flag();     // callers declare --help themselves and print Help()
  app_->allow_extras(true);  // unknown flags are reported below, in our own words
  app_->add_option("args", positional_, "positional arguments");
}

Flags::~Flags() = default;

void Flags::Define(const std::string& name, const std::string& default_value,
                   const std::string& help) {
  Flag& f = flags_[name];
  f = Flag{default_value, help, false, false, false};
  app_->add_option("--" + name, f.value, help)
      ->type_name("VALUE")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  order_.push_back(name);
}

void Flags::DefineBool(const std::string& name, const std::string& help) {
  Flag& f = flags_[name];
  f = Flag{"false", help, true, false, false};
  app_->add_flag("--" + name, f.bool_value, help)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  order_.push_back(name);
}

Status Flags::Parse(int argc, char** argv, int first) {
  std::vector<std::string> args;  // CLI11 takes them in reverse order
  for (int i = argc - 1; i >= first; --i) {
    const std::string a = argv[i];
    // "--name=" sets an empty value (CLI11 would call it missing): hand it over as "--name" "".
    if (a.size() > 3 && a.rfind("--", 0) == 0 && a.back() == '=' && a.find('=') == a.size() - 1) {
      auto it = flags_.find(a.substr(2, a.size() - 3));
      if (it != flags_.end() && !it->second.is_bool) {
        args.emplace_back("");
        args.push_back(a.substr(0, a.size() - 1));
        continue;
      }
    }
    args.push_back(a);
  }
  positional_.clear();
  try {
    app_->parse(args);
  } catch (const CLI::ArgumentMismatch& e) {
    // "--NAME: 1 required VALUE missing": a value flag at the end of the line.
    const std::string what = e.what();
    if (what.rfind("--", 0) == 0 && what.find(": ") != std::string::npos &&
        what.find("missing") != std::string::npos) {
      return InvalidArgument(what.substr(0, what.find(": ")) + " needs a value");
    }
    return InvalidArgument(what);
  } catch (const CLI::ConversionError& e) {
    return InvalidArgument(std::string(e.what()) +
                           " (boolean flags take no value, or =true/=false)");
  } catch (const CLI::ParseError& e) {
    return InvalidArgument(e.what());
  }
  bool separator_seen = false;
  for (const std::string& extra : app_->remaining()) {
    if (extra == "--" && !separator_seen) {  // CLI11 leaves the "--" that ended the flags here
      separator_seen = true;
      continue;
    }
    if (extra.rfind("--", 0) == 0 && extra.size() > 2) {
      return InvalidArgument("unknown flag " + extra.substr(0, extra.find('=')) + " (see --help)");
    }
    positional_.push_back(extra);  // e.g. "-x": not one of ours, kept as an argument
  }
  for (auto& [name, f] : flags_) {
    f.set = app_->get_option("--" + name)->count() > 0;
    if (f.is_bool) f.value = f.bool_value ? "true" : "false";
  }
  return OkStatus();
}

const Flags::Flag& Flags::Find(const std::string& name) const {
  auto it = flags_.find(name);
  if (it == flags_.end()) throw std::logic_error("undeclared flag " + name);
  return it->second;
}

const std::string& Flags::Get(const std::string& name) const { return Find(name).value; }

namespace {

// The whole string is one decimal integer that fits (std::from_chars: no spaces, no "+").
bool ParseInt(const std::string& s, int64_t* out) {
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, *out);
  return !s.empty() && ec == std::errc() && ptr == end;
}

}  // namespace

bool Flags::GetBool(const std::string& name) const { return Get(name) == "true"; }

Result<int64_t> Flags::GetInt(const std::string& name) const {
  const std::string& v = Get(name);
  int64_t out = 0;
  if (!ParseInt(v, &out)) {
    return InvalidArgument("--" + name + ": \"" + v + "\" is not a whole number");
  }
  return out;
}

Result<std::chrono::milliseconds> Flags::GetMillis(const std::string& name) const {
  const std::string& v = Get(name);
  int64_t out = 0;
  if (!ParseInt(v, &out) || out < 0) {
    return InvalidArgument("--" + name + ": \"" + v +
                           "\" is not a whole number of milliseconds (0 or more)");
  }
  return std::chrono::milliseconds(out);
}

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
