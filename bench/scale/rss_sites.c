// rss_sites.c → libfg-rss-sites.so: which allocation sites hold a process's resident memory.
//
//   LD_PRELOAD=.../libfg-rss-sites.so FG_RSS_SITES_OUT=/tmp/sites.jsonl
//       FG_RSS_SITES_TRIGGER=/tmp/sites.trigger  feedguard-controller ...   (one command)
//   touch /tmp/sites.trigger     # one JSON line appended to FG_RSS_SITES_OUT, trigger removed
//
// Every live heap block is kept with its allocation site: OpenSSL's own allocations by the
// file:line OpenSSL passes to its allocator (CRYPTO_set_mem_functions), everything else by a
// short backtrace. A dump reads /proc/self/pagemap and counts, per site, the bytes of its live
// blocks that lie on resident pages (a page shared by several blocks is split by bytes; free
// heap memory on resident pages is counted by no site). So "heap allocated" and "RSS" can be
// told apart per site: a 17 KiB buffer of which only the first page was ever written costs
// 4 KiB of RSS when malloc took it from fresh memory, and 17 KiB when it reused freed pages.
//
// A measurement tool only: slow (a backtrace per allocation), and its tables (64 MiB of blocks,
// 8.5 MiB of sites) are resident as they fill: the controller's RSS before any agent was ~73 MB
// higher with it (108.8 against 35.5 MB, 500 nodes / 15,000 pods). Not built with sanitizers
// (bench/scale/tls_memory.py --sites uses it).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void __libc_free(void*);
extern void* __libc_memalign(size_t, size_t);

#define TABLE_BITS 22
#define TABLE_SIZE (1u << TABLE_BITS)
#define MAX_SITES 65536
#define DEPTH 14
#define SKIP 1  // our own hook frame

struct entry {
  uintptr_t ptr;  // 0: empty
  uint32_t size;
  uint32_t site;
};

struct site {
  uint64_t hash;
  const char* file;  // OpenSSL's file (NULL: a backtrace site)
  int line;
  int depth;
  void* frames[DEPTH];
};

static struct entry* table;
static struct site* sites;
static uint32_t nsites = 1;  // site 0: "unknown" (table or site table full)
static uint64_t live_entries;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static __thread int in_hook __attribute__((tls_model("initial-exec")));
static int ready;

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// Site id for a hash, inserting it (the caller holds mu). Linear scan over a hashed start.
static uint32_t site_for(uint64_t h, const char* file, int line, void** frames, int depth) {
  uint32_t i = (uint32_t)(h % (MAX_SITES - 1)) + 1;
  for (uint32_t n = 0; n < MAX_SITES - 1; ++n) {
    struct site* s = &sites[i];
    if (s->hash == h && s->file == file && s->line == line) return i;
    if (s->hash == 0 && s->depth == 0 && s->file == NULL) {
      if (nsites >= MAX_SITES - 1) return 0;
      s->hash = h ? h : 1;
      s->file = file;
      s->line = line;
      s->depth = depth;
      if (depth) memcpy(s->frames, frames, sizeof(void*) * (size_t)depth);
      ++nsites;
      return i;
    }
    i = i + 1 == MAX_SITES ? 1 : i + 1;
  }
  return 0;
}

static void table_put(uintptr_t p, size_t size, uint32_t site) {
  uint32_t i = (uint32_t)(mix(p) & (TABLE_SIZE - 1));
  for (;;) {
    if (table[i].ptr == 0 || table[i].ptr == p) {
      if (table[i].ptr == 0) ++live_entries;
      table[i].ptr = p;
      table[i].size = size > 0xffffffffu ? 0xffffffffu : (uint32_t)size;
      table[i].site = site;
      return;
    }
    i = (i + 1) & (TABLE_SIZE - 1);
  }
}

// Backward-shift deletion (linear probing keeps no tombstones).
static void table_del(uintptr_t p) {
  uint32_t i = (uint32_t)(mix(p) & (TABLE_SIZE - 1));
  for (;;) {
    if (table[i].ptr == 0) return;
    if (table[i].ptr == p) break;
    i = (i + 1) & (TABLE_SIZE - 1);
  }
  --live_entries;
  uint32_t j = i;
  for (;;) {
    table[i].ptr = 0;
    for (;;) {
      j = (j + 1) & (TABLE_SIZE - 1);
      if (table[j].ptr == 0) return;
      uint32_t k = (uint32_t)(mix(table[j].ptr) & (TABLE_SIZE - 1));
      // Move j to i unless its home k lies cyclically in (i, j].
      if (i <= j ? (i < k && k <= j) : (i < k || k <= j)) continue;
      break;
    }
    table[i] = table[j];
    i = j;
  }
}

static void record(void* p, size_t size, const char* file, int line) {
  if (!p || !ready) return;
  uint32_t site;
  if (file) {
    uint64_t h = mix((uint64_t)(uintptr_t)file ^ ((uint64_t)line << 40));
    pthread_mutex_lock(&mu);
    site = site_for(h, file, line, NULL, 0);
  } else {
    void* frames[DEPTH + SKIP];
    int n = backtrace(frames, DEPTH + SKIP) - SKIP;
    if (n < 0) n = 0;
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    for (int k = 0; k < n; ++k) h = mix(h ^ (uint64_t)(uintptr_t)frames[k + SKIP]);
    pthread_mutex_lock(&mu);
    site = site_for(h, NULL, 0, frames + SKIP, n);
  }
  if (live_entries < TABLE_SIZE / 2) table_put((uintptr_t)p, size, site);
  pthread_mutex_unlock(&mu);
}

static void forget(void* p) {
  if (!p || !ready) return;
  pthread_mutex_lock(&mu);
  table_del((uintptr_t)p);
  pthread_mutex_unlock(&mu);
}

// The hooks' own bookkeeping allocates too: record and forget only outside it.
static void record_outside_hook(void* p, size_t n, const char* file, int line) {
  if (in_hook) return;
  in_hook = 1;
  record(p, n, file, line);
  in_hook = 0;
}

static void forget_outside_hook(void* p) {
  if (in_hook || !p) return;
  in_hook = 1;
  forget(p);
  in_hook = 0;
}

// ---- the C allocator ----------------------------------------------------------------------
void* malloc(size_t n) {
  void* p = __libc_malloc(n);
  record_outside_hook(p, n, NULL, 0);
  return p;
}

void* calloc(size_t a, size_t b) {
  void* p = __libc_calloc(a, b);
  record_outside_hook(p, a * b, NULL, 0);
  return p;
}

void* realloc(void* old, size_t n) {
  forget_outside_hook(old);
  void* p = __libc_realloc(old, n);
  record_outside_hook(p, n, NULL, 0);
  return p;
}

void free(void* p) {
  forget_outside_hook(p);
  __libc_free(p);
}

void* memalign(size_t align, size_t n) {
  void* p = __libc_memalign(align, n);
  record_outside_hook(p, n, NULL, 0);
  return p;
}

void* aligned_alloc(size_t align, size_t n) { return memalign(align, n); }

int posix_memalign(void** out, size_t align, size_t n) {
  void* p = memalign(align, n);
  if (!p) return 12;  // ENOMEM
  *out = p;
  return 0;
}

void* valloc(size_t n) { return memalign((size_t)sysconf(_SC_PAGESIZE), n); }

// ---- OpenSSL's allocator: its own file:line names the site ----------------------------------
static void* ossl_malloc(size_t n, const char* file, int line) {
  void* p = __libc_malloc(n);
  record_outside_hook(p, n, file, line);
  return p;
}

static void* ossl_realloc(void* old, size_t n, const char* file, int line) {
  forget_outside_hook(old);
  void* p = __libc_realloc(old, n);
  record_outside_hook(p, n, file, line);
  return p;
}

static void ossl_free(void* p, const char* file, int line) {
  (void)file;
  (void)line;
  free(p);
}

// ---- the dump -----------------------------------------------------------------------------
struct agg {
  uint64_t count, bytes, resident;
};

static int pagemap_fd = -1;

// Bytes of [p, p+size) on resident pages. Reads pagemap a page run at a time.
static uint64_t resident_bytes(uintptr_t p, uint64_t size) {
  if (size == 0) return 0;
  const uintptr_t page = 4096;
  uintptr_t first = p / page, last = (p + size - 1) / page;
  uint64_t res = 0;
  uint64_t buf[64];
  for (uintptr_t pg = first; pg <= last;) {
    uintptr_t n = last - pg + 1;
    if (n > 64) n = 64;
    ssize_t got = pread(pagemap_fd, buf, n * 8, (off_t)(pg * 8));
    if (got < (ssize_t)(n * 8)) return res;
    for (uintptr_t k = 0; k < n; ++k) {
      if (!(buf[k] >> 63 & 1)) continue;
      uintptr_t a = (pg + k) * page, b = a + page;
      uintptr_t lo = a > p ? a : p, hi = b < p + size ? b : p + size;
      res += hi - lo;
    }
    pg += n;
  }
  return res;
}

static long status_kb(const char* key) {
  FILE* f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long v = -1;
  size_t kl = strlen(key);
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, key, kl) == 0) {
      v = strtol(line + kl, NULL, 10);
      break;
    }
  }
  fclose(f);
  return v;
}

static void dump(const char* out_path, const char* label) {
  // Copy the table under the lock, then read pagemap without holding it.
  size_t bytes = sizeof(struct entry) * TABLE_SIZE;
  struct entry* copy =
      mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  struct agg* aggs = mmap(NULL, sizeof(struct agg) * MAX_SITES, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (copy == MAP_FAILED || aggs == MAP_FAILED) return;
  size_t n = 0;
  pthread_mutex_lock(&mu);
  for (uint32_t i = 0; i < TABLE_SIZE; ++i) {
    if (table[i].ptr) copy[n++] = table[i];
  }
  uint32_t site_count = nsites;
  pthread_mutex_unlock(&mu);
  uint64_t total = 0, total_res = 0;
  for (size_t i = 0; i < n; ++i) {
    uint64_t r = resident_bytes(copy[i].ptr, copy[i].size);
    struct agg* a = &aggs[copy[i].site];
    a->count++;
    a->bytes += copy[i].size;
    a->resident += r;
    total += copy[i].size;
    total_res += r;
  }
  FILE* f = fopen(out_path, "a");
  if (f) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    fprintf(f,
            "{\"label\":\"%s\",\"t\":%ld.%03ld,\"vmrss_kb\":%ld,\"live_blocks\":%zu,\"sites\":%u,"
            "\"heap_bytes\":%llu,\"heap_resident_bytes\":%llu,\"by_site\":[",
            label, (long)ts.tv_sec, ts.tv_nsec / 1000000, status_kb("VmRSS:"), n, site_count,
            (unsigned long long)total, (unsigned long long)total_res);
    int first = 1;
    for (uint32_t s = 0; s < MAX_SITES; ++s) {
      if (aggs[s].count == 0) continue;
      fprintf(f, "%s{\"site\":%u,\"count\":%llu,\"bytes\":%llu,\"resident\":%llu,",
              first ? "" : ",", s, (unsigned long long)aggs[s].count,
              (unsigned long long)aggs[s].bytes, (unsigned long long)aggs[s].resident);
      first = 0;
      if (sites[s].file) {
        fprintf(f, "\"openssl\":\"%s:%d\"}", sites[s].file, sites[s].line);
        continue;
      }
      fprintf(f, "\"frames\":[");
      for (int k = 0; k < sites[s].depth; ++k) {
        Dl_info info;
        const char* obj = "?";
        const char* sym = "?";
        uintptr_t off = 0, soff = 0;
        if (dladdr(sites[s].frames[k], &info)) {
          obj = info.dli_fname ? info.dli_fname : "?";
          off = (uintptr_t)sites[s].frames[k] - (uintptr_t)info.dli_fbase;
          if (info.dli_sname) {
            sym = info.dli_sname;
            soff = (uintptr_t)sites[s].frames[k] - (uintptr_t)info.dli_saddr;
          }
        }
        const char* base = strrchr(obj, '/');
        fprintf(f, "%s\"%s+0x%lx %s+0x%lx\"", k ? "," : "", base ? base + 1 : obj,
                (unsigned long)off, sym, (unsigned long)soff);
      }
      fprintf(f, "]}");
    }
    fprintf(f, "]}\n");
    fclose(f);
  }
  munmap(copy, bytes);
  munmap(aggs, sizeof(struct agg) * MAX_SITES);
}

static void* watcher(void* arg) {
  (void)arg;
  in_hook = 1;  // this thread's own allocations are not tracked
  const char* trigger = getenv("FG_RSS_SITES_TRIGGER");
  const char* out = getenv("FG_RSS_SITES_OUT");
  if (!trigger || !out) return NULL;
  pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  for (;;) {
    char label[128] = "dump";
    int fd = open(trigger, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ssize_t got = read(fd, label, sizeof label - 1);
      close(fd);
      label[got > 0 ? got : 4] = 0;
      for (char* c = label; *c; ++c) {
        if (*c == '\n' || *c == '"' || *c == '\\') *c = 0;
      }
      if (!label[0]) strcpy(label, "dump");
      dump(out, label);
      unlink(trigger);
    }
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

__attribute__((constructor)) static void init(void) {
  in_hook = 1;
  table = mmap(NULL, sizeof(struct entry) * TABLE_SIZE, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  sites = mmap(NULL, sizeof(struct site) * MAX_SITES, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (table == MAP_FAILED || sites == MAP_FAILED) {
    in_hook = 0;
    return;
  }
  void* warm[4];
  backtrace(warm, 4);  // loads libgcc_s now, not inside a hook
  if (!CRYPTO_set_mem_functions(ossl_malloc, ossl_realloc, ossl_free)) {
    fprintf(stderr, "rss_sites: CRYPTO_set_mem_functions refused (OpenSSL allocated already)\n");
  }
  ready = 1;
  pthread_t t;
  if (getenv("FG_RSS_SITES_TRIGGER")) pthread_create(&t, NULL, watcher, NULL);
  in_hook = 0;
}
