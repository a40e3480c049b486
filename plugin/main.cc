// kubectl-feedguard — the kubectl plugin (`kubectl feedguard top|explain`). See plugin/cli.h.
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "plugin/cli.h"

int main(int argc, char** argv) {
  try {
    // stdout carries the table, the JSON or the policy YAML: the libraries' log lines, if any,
    // go to stderr, warnings and up only.
    auto logger = spdlog::stderr_logger_st("kubectl-feedguard");
    logger->set_level(spdlog::level::warn);
    spdlog::set_default_logger(logger);
    const std::vector<std::string> args(argv + 1, argv + argc);
    return feedguard::plugin::RunPlugin(args, feedguard::plugin::RealPluginEnv(), std::cout,
                                        std::cerr);
  } catch (const std::exception& e) {
    std::cerr << "kubectl-feedguard: internal error: " << e.what() << "\n";
    return 1;
  }
}
