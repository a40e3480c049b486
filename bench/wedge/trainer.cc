// trainer.cc — fg-wedge-trainer: a synthetic DataLoader-heavy training job for the wedge benchmark.
//
// Shape (after PyTorch's DataLoader with num_workers=N, prefetch_factor=2):
//  * At start the main process encodes a few synthetic photos-like RGB images with libturbojpeg
//    (tjCompress2). They are shared copy-on-write with the workers.
//  * N worker PROCESSES (fork) loop: take a free slot of a shared-memory sample ring, decode a
//    JPEG (tjDecompress2), random-crop, random horizontal flip, normalise to float CHW into the
//    slot, hand the slot index to the main process over a pipe. The ring holds
//    prefetch_factor × workers × batch samples (DataLoader's prefetch of 2 batches per worker).
//  * The main process collates B samples into a batch buffer (the pin-memory copy) and launches
//    an "accelerator step" of S ms. The accelerator is modelled as an asynchronous device: a step
//    occupies it for S ms of wall time and uses NO CPU (the GPU computes while the host idles).
//    Like a real trainer, the main loop prepares batch k+1 while step k runs, and launches k+1 as
//    soon as both the batch and the device are ready. The device is idle exactly when the input
//    pipeline has not delivered the next batch in time — the quantity the wedge is about.
//
// After --warmup seconds it measures for --duration seconds and prints one JSON line:
//   {"samples_per_s", "accelerator_busy" (fraction of wall time the device computed),
//    "batches", "duration_s", "cpu_seconds" (main + workers, in the window),
//    "run_delay_seconds" (their time runnable but waiting for a CPU, in the window), ...}
// and also writes it to --out when given (atomically), so a driver can collect it even when the
// process runs under a kubelet stand-in that owns its stdout.
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "bench/wedge/wedge_common.h"

namespace feedguard::bench::wedge {
namespace {

struct Options {
  int workers = 2;
  int batch = 16;
  double step_ms = 40;
  int image_size = 256;
  int crop = 224;
  double duration_s = 10;
  double warmup_s = 3;
  int prefetch_factor = 2;
  int images = 8;
  int quality = 90;
  uint64_t seed = 1;
  std::string out;
};

constexpr float kMean[3] = {0.485f, 0.456f, 0.406f};
constexpr float kStd[3] = {0.229f, 0.224f, 0.225f};

// Owns a turbojpeg handle.
class TjHandle {
 public:
  explicit TjHandle(bool compress) : h_(compress ? tjInitCompress() : tjInitDecompress()) {}
  TjHandle(const TjHandle&) = delete;
  TjHandle& operator=(const TjHandle&) = delete;
  ~TjHandle() {
    if (h_ != nullptr) tjDestroy(h_);
  }
  tjhandle get() const { return h_; }

 private:
  tjhandle h_;
};

// Owns an anonymous MAP_SHARED region (visible to forked children).
class SharedRegion {
 public:
  explicit SharedRegion(size_t bytes) : bytes_(bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    p_ = p == MAP_FAILED ? nullptr : p;
  }
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;
  ~SharedRegion() {
    if (p_ != nullptr) ::munmap(p_, bytes_);
  }
  float* floats() const { return static_cast<float*>(p_); }
  bool ok() const { return p_ != nullptr; }

 private:
  size_t bytes_;
  void* p_;
};

// The worker processes this trainer forked. Destruction signals and reaps exactly those PIDs.
class WorkerSet {
 public:
  WorkerSet() = default;
  WorkerSet(const WorkerSet&) = delete;
  WorkerSet& operator=(const WorkerSet&) = delete;
  ~WorkerSet() { StopAll(); }
  void Add(pid_t pid) { pids_.push_back(pid); }
  const std::vector<pid_t>& pids() const { return pids_; }
  // Waits up to ~2 s for the workers to exit by themselves (their input pipe closed), then
  // SIGKILLs the rest; always reaps.
  void StopAll() {
    for (int i = 0; i < 200 && !pids_.empty(); ++i) {
      ReapExited();
      if (!pids_.empty()) ::usleep(10000);
    }
    for (pid_t p : pids_) ::kill(p, SIGKILL);
    for (pid_t p : pids_) ::waitpid(p, nullptr, 0);
    pids_.clear();
  }

 private:
  void ReapExited() {
    std::vector<pid_t> alive;
    for (pid_t p : pids_) {
      if (::waitpid(p, nullptr, WNOHANG) == 0) alive.push_back(p);
    }
    pids_ = std::move(alive);
  }
  std::vector<pid_t> pids_;
};

// Photo-like content: smooth colour gradients, a few discs, mild noise (so the JPEGs have the
// entropy of a real picture: neither flat nor white noise).
std::vector<unsigned char> SynthImage(int size, std::mt19937_64& rng) {
  std::vector<unsigned char> img(static_cast<size_t>(size) * size * 3);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::normal_distribution<double> noise(0.0, 12.0);
  double fx[3], fy[3], ph[3];
  for (int c = 0; c < 3; ++c) {
    fx[c] = 1 + 6 * u(rng);
    fy[c] = 1 + 6 * u(rng);
    ph[c] = 6.283 * u(rng);
  }
  struct Disc {
    double x, y, r;
    unsigned char col[3];
  };
  std::vector<Disc> discs(6);
  for (auto& d : discs) {
    d.x = size * u(rng);
    d.y = size * u(rng);
    d.r = size * (0.05 + 0.2 * u(rng));
    for (auto& c : d.col) c = static_cast<unsigned char>(255 * u(rng));
  }
  for (int y = 0; y < size; ++y) {
    for (int x = 0; x < size; ++x) {
      unsigned char* px = &img[(static_cast<size_t>(y) * size + x) * 3];
      for (int c = 0; c < 3; ++c) {
        double v = 128 + 90 * std::sin(fx[c] * x / size * 6.283 + ph[c]) *
                             std::cos(fy[c] * y / size * 6.283);
        px[c] = static_cast<unsigned char>(std::clamp(v + noise(rng), 0.0, 255.0));
      }
      for (const auto& d : discs) {
        double dx = x - d.x, dy = y - d.y;
        if (dx * dx + dy * dy < d.r * d.r) {
          for (int c = 0; c < 3; ++c) {
            px[c] = static_cast<unsigned char>(std::clamp(d.col[c] + noise(rng), 0.0, 255.0));
          }
        }
      }
    }
  }
  return img;
}

std::vector<std::vector<unsigned char>> MakeJpegs(const Options& o, std::string* err) {
  TjHandle tj(/*compress=*/true);
  if (tj.get() == nullptr) {
    *err = "tjInitCompress failed";
    return {};
  }
  std::mt19937_64 rng(o.seed);
  std::vector<std::vector<unsigned char>> out;
  for (int i = 0; i < o.images; ++i) {
    std::vector<unsigned char> rgb = SynthImage(o.image_size, rng);
    unsigned char* jpeg = nullptr;
    unsigned long jpeg_size = 0;
    if (tjCompress2(tj.get(), rgb.data(), o.image_size, 0, o.image_size, TJPF_RGB, &jpeg,
                    &jpeg_size, TJSAMP_420, o.quality, 0) != 0) {
      *err = std::string("tjCompress2: ") + tjGetErrorStr2(tj.get());
      if (jpeg != nullptr) tjFree(jpeg);
      return {};
    }
    out.emplace_back(jpeg, jpeg + jpeg_size);
    tjFree(jpeg);
  }
  return out;
}

bool ReadAll(int fd, void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool WriteAll(int fd, const void* buf, size_t n) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t r = ::write(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Body of one worker process. Returns the exit code.
int WorkerMain(int index, const Options& o, const std::vector<std::vector<unsigned char>>& jpegs,
               float* ring, int free_fd, int ready_fd) {
  TjHandle tj(/*compress=*/false);
  if (tj.get() == nullptr) return 3;
  std::mt19937_64 rng(o.seed * 7919 + static_cast<uint64_t>(index) + 1);
  std::uniform_int_distribution<int> pick(0, static_cast<int>(jpegs.size()) - 1);
  std::uniform_int_distribution<int> off(0, o.image_size - o.crop);
  std::bernoulli_distribution flip(0.5);
  std::vector<unsigned char> rgb(static_cast<size_t>(o.image_size) * o.image_size * 3);
  const size_t plane = static_cast<size_t>(o.crop) * o.crop;
  float scale[3], bias[3];
  for (int c = 0; c < 3; ++c) {
    scale[c] = 1.0f / (255.0f * kStd[c]);
    bias[c] = -kMean[c] / kStd[c];
  }
  for (;;) {
    uint32_t slot = 0;
    if (!ReadAll(free_fd, &slot, sizeof slot)) return 0;  // EOF: the trainer is done
    const auto& j = jpegs[static_cast<size_t>(pick(rng))];
    if (tjDecompress2(tj.get(), j.data(), j.size(), rgb.data(), o.image_size, 0, o.image_size,
                      TJPF_RGB, 0) != 0) {
      return 4;
    }
    const int x0 = off(rng), y0 = off(rng);
    const bool mirror = flip(rng);
    float* dst = ring + static_cast<size_t>(slot) * plane * 3;
    for (int y = 0; y < o.crop; ++y) {
      const unsigned char* row = &rgb[(static_cast<size_t>(y0 + y) * o.image_size + x0) * 3];
      for (int x = 0; x < o.crop; ++x) {
        const int sx = mirror ? o.crop - 1 - x : x;
        const size_t d = static_cast<size_t>(y) * o.crop + x;
        for (int c = 0; c < 3; ++c) {
          dst[c * plane + d] = row[sx * 3 + c] * scale[c] + bias[c];
        }
      }
    }
    if (!WriteAll(ready_fd, &slot, sizeof slot)) return 0;
  }
}

// Waits until `fd` is readable or the absolute monotonic time `deadline` passes.
// Returns true if readable.
bool WaitReadable(int fd, double deadline) {
  for (;;) {
    double left_ms = (deadline - MonoNow()) * 1000.0;
    if (left_ms <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::ceil(std::min(left_ms, 1e6))));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

struct Window {
  double t0 = 0, t1 = 0;  // planned measurement window (monotonic seconds)
  bool started = false, ended = false;
  double cpu0 = 0, cpu1 = 0, tc0 = 0, tc1 = 0;  // CPU of main+workers at the actual sample times
  double wait0 = 0, wait1 = 0;                  // their run-queue wait at the same times
};

double CpuOf(const std::vector<pid_t>& workers) {
  double sum = ProcessCpuSeconds(0).value_or(0.0);
  for (pid_t p : workers) sum += ProcessCpuSeconds(p).value_or(0.0);
  return sum;
}

double RunDelayOf(const std::vector<pid_t>& workers) {
  double sum = ProcessRunDelaySeconds(0).value_or(0.0);
  for (pid_t p : workers) sum += ProcessRunDelaySeconds(p).value_or(0.0);
  return sum;
}

int Run(const Options& o) {
  std::string err;
  auto jpegs = MakeJpegs(o, &err);
  if (jpegs.empty()) {
    std::fprintf(stderr, "fg-wedge-trainer: %s\n", err.c_str());
    return 2;
  }
  const size_t plane = static_cast<size_t>(o.crop) * o.crop;
  const size_t sample_floats = plane * 3;
  const int slots = o.prefetch_factor * o.workers * o.batch;
  SharedRegion ring(sample_floats * sizeof(float) * static_cast<size_t>(slots));
  if (!ring.ok()) {
    std::fprintf(stderr, "fg-wedge-trainer: mmap of %d slots failed\n", slots);
    return 2;
  }
  auto free_pipe = Pipe::Make();
  auto ready_pipe = Pipe::Make();
  if (!free_pipe || !ready_pipe) {
    std::fprintf(stderr, "fg-wedge-trainer: pipe: %s\n", std::strerror(errno));
    return 2;
  }
  const pid_t self = ::getpid();
  WorkerSet workers;
  for (int i = 0; i < o.workers; ++i) {
    pid_t pid = ::fork();
    if (pid < 0) {
      std::fprintf(stderr, "fg-wedge-trainer: fork: %s\n", std::strerror(errno));
      return 2;
    }
    if (pid == 0) {
      // Child: die with the trainer; keep only the worker ends of the pipes.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != self) ::_exit(0);
      free_pipe->write_end.Reset();
      ready_pipe->read_end.Reset();
      ::_exit(WorkerMain(i, o, jpegs, ring.floats(), free_pipe->read_end.get(),
                         ready_pipe->write_end.get()));
    }
    workers.Add(pid);
  }
  free_pipe->read_end.Reset();
  ready_pipe->write_end.Reset();
  for (uint32_t s = 0; s < static_cast<uint32_t>(slots); ++s) {
    if (!WriteAll(free_pipe->write_end.get(), &s, sizeof s)) {
      std::fprintf(stderr, "fg-wedge-trainer: cannot queue slot %u\n", s);
      return 2;
    }
  }

  std::vector<float> batch_buf(sample_floats * static_cast<size_t>(o.batch));
  const double step_s = o.step_ms / 1000.0;
  const double start = MonoNow();
  Window w;
  w.t0 = start + o.warmup_s;
  w.t1 = w.t0 + o.duration_s;
  double device_free_at = start;  // the accelerator is idle from this time on
  double busy_s = 0;              // device busy time inside [t0, t1]
  int64_t batches = 0;
  double wait_s = 0;  // device idle inside the window because the batch was not ready
  const int ready_fd = ready_pipe->read_end.get();
  const int free_fd = free_pipe->write_end.get();

  auto mark = [&](double now) {
    if (!w.started && now >= w.t0) {
      w.started = true;
      w.tc0 = MonoNow();
      w.cpu0 = CpuOf(workers.pids());
      w.wait0 = RunDelayOf(workers.pids());
    }
    if (!w.ended && now >= w.t1) {
      w.ended = true;
      w.tc1 = MonoNow();
      w.cpu1 = CpuOf(workers.pids());
      w.wait1 = RunDelayOf(workers.pids());
    }
  };
  auto overlap = [&](double a, double b) {
    return std::max(0.0, std::min(b, w.t1) - std::max(a, w.t0));
  };

  bool failed = false;
  while (!w.ended && !failed) {
    // Collate the next batch while the device runs the previous step.
    for (int i = 0; i < o.batch && !w.ended; ++i) {
      for (;;) {
        double next = !w.started ? w.t0 : w.t1;
        if (WaitReadable(ready_fd, next)) break;
        mark(MonoNow());
        if (w.ended) break;
      }
      if (w.ended) break;
      uint32_t slot = 0;
      if (!ReadAll(ready_fd, &slot, sizeof slot) || slot >= static_cast<uint32_t>(slots)) {
        std::fprintf(stderr, "fg-wedge-trainer: a worker died\n");
        failed = true;
        break;
      }
      std::memcpy(&batch_buf[sample_floats * static_cast<size_t>(i)],
                  ring.floats() + sample_floats * slot, sample_floats * sizeof(float));
      WriteAll(free_fd, &slot, sizeof slot);
      mark(MonoNow());
    }
    if (w.ended || failed) break;
    // Batch ready. Wait (no CPU) for the device, then launch the step.
    double now = MonoNow();
    if (now < device_free_at) {
      SleepUntil(std::min(device_free_at, w.started ? w.t1 : w.t0));
      mark(MonoNow());
      if (w.ended) break;
      if (MonoNow() < device_free_at) SleepUntil(device_free_at);
      now = MonoNow();
    } else {
      wait_s += overlap(device_free_at, now);
    }
    mark(now);
    if (w.ended) break;
    busy_s += overlap(now, now + step_s);
    if (now >= w.t0) ++batches;
    device_free_at = now + step_s;
  }
  if (!w.ended) {
    mark(std::max(MonoNow(), w.t1));
  }
  // Stop the workers: EOF on their slot pipe, then reap.
  free_pipe->write_end.Reset();
  ready_pipe->read_end.Reset();
  workers.StopAll();
  if (failed) return 3;

  const double dur = w.t1 - w.t0;
  const double cpu = w.cpu1 - w.cpu0;
  const double cpu_total = RusageSeconds(RUSAGE_SELF) + RusageSeconds(RUSAGE_CHILDREN);
  std::string j = "{";
  auto add = [&](const char* k, const std::string& v) {
    if (j.size() > 1) j += ", ";
    j += std::string("\"") + k + "\": " + v;
  };
  add("samples_per_s", JsonNum(static_cast<double>(batches * o.batch) / dur));
  add("accelerator_busy", JsonNum(busy_s / dur));
  add("accelerator_wait_s", JsonNum(wait_s));
  add("batches", std::to_string(batches));
  add("duration_s", JsonNum(dur));
  add("cpu_seconds", JsonNum(cpu));
  add("cpu_cores", JsonNum(cpu / std::max(1e-9, w.tc1 - w.tc0)));
  add("cpu_seconds_total", JsonNum(cpu_total));
  add("run_delay_seconds", JsonNum(w.wait1 - w.wait0));
  add("t_start_mono", JsonNum(w.t0));
  add("t_end_mono", JsonNum(w.t1));
  add("workers", std::to_string(o.workers));
  add("batch", std::to_string(o.batch));
  add("step_ms", JsonNum(o.step_ms));
  add("image_size", std::to_string(o.image_size));
  add("crop", std::to_string(o.crop));
  add("warmup_s", JsonNum(o.warmup_s));
  add("max_samples_per_s", JsonNum(o.batch / step_s));
  j += "}\n";
  std::fputs(j.c_str(), stdout);
  std::fflush(stdout);
  if (!o.out.empty() && !WriteFileAtomic(o.out, j)) {
    std::fprintf(stderr, "fg-wedge-trainer: cannot write %s: %s\n", o.out.c_str(),
                 std::strerror(errno));
    return 2;
  }
  return 0;
}

constexpr char kUsage[] =
    "usage: fg-wedge-trainer [--workers N] [--batch B] [--step-ms S] [--image-size PX]\n"
    "         [--crop PX] [--duration S] [--warmup S] [--prefetch-factor F] [--images K]\n"
    "         [--quality Q] [--seed N] [--out FILE] [--gpu-bound]\n"
    "  --gpu-bound: control-arm preset (1 worker, batch 8, 200 ms step): little CPU per step.\n";

}  // namespace
}  // namespace feedguard::bench::wedge

int main(int argc, char** argv) {
  using namespace feedguard::bench::wedge;
  Flags f(argc, argv, {"gpu-bound", "help"});
  if (f.Has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  Options o;
  if (f.Has("gpu-bound")) {
    o.workers = 1;
    o.batch = 8;
    o.step_ms = 200;
  }
  f.Str("gpu-bound", "");
  o.workers = f.Int("workers", o.workers);
  o.batch = f.Int("batch", o.batch);
  o.step_ms = f.Num("step-ms", o.step_ms);
  o.image_size = f.Int("image-size", o.image_size);
  o.crop = f.Int("crop", std::min(o.crop, o.image_size));
  o.duration_s = f.Num("duration", o.duration_s);
  o.warmup_s = f.Num("warmup", o.warmup_s);
  o.prefetch_factor = f.Int("prefetch-factor", o.prefetch_factor);
  o.images = f.Int("images", o.images);
  o.quality = f.Int("quality", o.quality);
  o.seed = static_cast<uint64_t>(f.Num("seed", 1));
  o.out = f.Str("out", "");
  auto errors = f.Errors();
  if (o.workers < 1 || o.workers > 256) errors.push_back("--workers must be in 1..256");
  if (o.batch < 1 || o.batch > 4096) errors.push_back("--batch must be in 1..4096");
  if (!(o.step_ms > 0)) errors.push_back("--step-ms must be > 0");
  if (o.image_size < 16 || o.image_size > 4096) errors.push_back("--image-size in 16..4096");
  if (o.crop < 8 || o.crop > o.image_size) errors.push_back("--crop in 8..image-size");
  if (!(o.duration_s > 0) || o.duration_s > 86400) errors.push_back("--duration in (0, 86400]");
  if (o.warmup_s < 0 || o.warmup_s > 3600) errors.push_back("--warmup in [0, 3600]");
  if (o.prefetch_factor < 1 || o.prefetch_factor > 16) errors.push_back("--prefetch-factor 1..16");
  if (o.images < 1 || o.images > 1024) errors.push_back("--images in 1..1024");
  if (o.quality < 1 || o.quality > 100) errors.push_back("--quality in 1..100");
  if (static_cast<int64_t>(o.prefetch_factor) * o.workers * o.batch > 16384) {
    errors.push_back("prefetch-factor × workers × batch must be ≤ 16384 (one pipe of slot ids)");
  }
  if (!errors.empty()) {
    for (const auto& e : errors) std::fprintf(stderr, "fg-wedge-trainer: %s\n", e.c_str());
    std::fputs(kUsage, stderr);
    return 64;
  }
  return Run(o);
}
