// fg-cgwatch — records every write(2) to a set of cgroup files, as the VM node's measurements
// need them (tests/vm/node/guest/scenario_fences.sh): inotify IN_MODIFY on each file (the VFS
// raises it for every write, by any process, to a cgroupfs file), and right after each event the
// file's bytes. One line per observation on stdout:
//
//   <CLOCK_REALTIME ns> <event|initial> <path> <value, whitespace runs as '_'>
//
// Usage: fg-cgwatch FILE...   (runs until SIGTERM/SIGINT; files that vanish are dropped)
//
// A test tool, not part of the product: the analysis (tests/vm/node/analyze.py) turns the lines
// into unfenced windows and write counts.
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

long long NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

std::string ReadFlat(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "<gone>";
  std::stringstream ss;
  ss << in.rdbuf();
  std::string out;
  bool space = false;
  for (char c : ss.str()) {
    if (c == ' ' || c == '\n' || c == '\t') {
      space = true;
      continue;
    }
    if (space && !out.empty()) out += '_';
    space = false;
    out += c;
  }
  return out.empty() ? "<empty>" : out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: fg-cgwatch FILE...\n");
    return 2;
  }
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  const int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (fd < 0) {
    std::perror("inotify_init1");
    return 1;
  }
  std::map<int, std::string> watches;
  for (int i = 1; i < argc; ++i) {
    const int wd = inotify_add_watch(fd, argv[i], IN_MODIFY);
    if (wd < 0) {
      std::fprintf(stderr, "fg-cgwatch: cannot watch %s: %s\n", argv[i], std::strerror(errno));
      continue;
    }
    watches[wd] = argv[i];
    std::printf("%lld initial %s %s\n", NowNs(), argv[i], ReadFlat(argv[i]).c_str());
  }
  std::fflush(stdout);
  alignas(inotify_event) char buf[8192];
  while (!g_stop && !watches.empty()) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    const ssize_t len = read(fd, buf, sizeof buf);
    if (len <= 0) continue;
    const long long t = NowNs();
    for (char* ptr = buf; ptr < buf + len;) {
      auto* ev = reinterpret_cast<inotify_event*>(ptr);
      ptr += sizeof(inotify_event) + ev->len;
      auto it = watches.find(ev->wd);
      if (it == watches.end()) continue;
      if (ev->mask & IN_IGNORED) {
        std::printf("%lld gone %s -\n", t, it->second.c_str());
        watches.erase(it);
        continue;
      }
      if (ev->mask & IN_MODIFY) {
        std::printf("%lld event %s %s\n", t, it->second.c_str(), ReadFlat(it->second).c_str());
      }
    }
    std::fflush(stdout);
  }
  close(fd);
  return 0;
}
