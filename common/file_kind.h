// file_kind.h — what stands at a path, by stat(2) (links followed). Each is false when nothing
// does or the path cannot be stat'ed (no error to report: callers ask to choose a way, not to
// explain one).
#pragma once

#include <sys/stat.h>

#include <string>

namespace feedguard {

inline bool PathExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

inline bool IsDir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

inline bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace feedguard
