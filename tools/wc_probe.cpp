// wc_probe: is write-combined host memory really write-combined on this machine?
//
// Lesson 02 measured the CPU reading cudaHostAllocWriteCombined memory faster than ordinary
// pinned memory. On x86 a write-combining (USWC) mapping is not cached, so CPU reads of it should
// be far slower than reads of cached memory; a result like lesson 02's suggests the WC attribute
// was not applied (for example by a hypervisor that keeps guest memory write-back). This probe
// gathers the evidence in one run:
//   1. the kernel's record of the page attribute table (PAT):
//   /sys/kernel/debug/x86/pat_memtype_list
//      (debugfs is mounted if it is not, which needs root), with the entries that cover each
//      buffer's physical pages (from /proc/self/pagemap, which gives frame numbers only to root)
//   2. the mapping flags of each buffer (/proc/self/smaps VmFlags), the CPU model, whether the
//      CPU says it runs under a hypervisor, and the kernel release
//   3. CPU read bandwidth of malloc, cudaHostAlloc (default flags) and cudaHostAlloc
//      (cudaHostAllocWriteCombined) memory, each read with memcpy into a cached buffer and with a
//      loop of volatile 8-byte loads; median of 5 runs, in GB/s (10^9 bytes per second).
// It writes nothing to disk; a debugfs it had to mount is unmounted again.
//
// Build and run (host code only, no nvcc needed; CUDA_HOME defaults to /usr/local/cuda):
//   CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}; mkdir -p build
//   g++ -O2 -std=c++17 -I$CUDA_HOME/include tools/wc_probe.cpp -o build/wc_probe
//       -L$CUDA_HOME/lib64 -lcudart -Wl,-rpath,$CUDA_HOME/lib64        (one command line)
//   sudo build/wc_probe            # or as root
// Options: --mib N (buffer size in MiB, default 64); --no-cuda (the malloc buffer only: checks the
// probe itself on a machine without a GPU). Exit status: 0 when every measurement ran, 1 on a
// CUDA error or bad arguments.
#include <cuda_runtime_api.h>
#include <sys/mount.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

const char* const kPatList = "/sys/kernel/debug/x86/pat_memtype_list";

void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string(call) + " failed: " + cudaGetErrorName(e) + ": " +
                             cudaGetErrorString(e));
  }
}

// The first line of /proc/cpuinfo that starts with `key`, without the key; "" if none.
std::string cpuinfo(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.compare(0, key.size(), key) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? "" : line.substr(colon + 2);
    }
  }
  return "";
}

bool has_flag(const std::string& flags, const std::string& flag) {
  std::istringstream words(flags);
  for (std::string w; words >> w;) {
    if (w == flag) return true;
  }
  return false;
}

// Physical address of the page holding `p`, from /proc/self/pagemap (bits 0-54: frame number,
// bit 63: present). 0 when unknown: not root (the kernel then reports frame 0), or not present.
std::uint64_t physical_address(const void* p) {
  const long page = sysconf(_SC_PAGESIZE);
  std::ifstream in("/proc/self/pagemap", std::ios::binary);
  if (!in) return 0;
  const std::uint64_t vpn = reinterpret_cast<std::uintptr_t>(p) / static_cast<std::uint64_t>(page);
  in.seekg(static_cast<std::streamoff>(vpn * sizeof(std::uint64_t)));
  std::uint64_t entry = 0;
  if (!in.read(reinterpret_cast<char*>(&entry), sizeof(entry))) return 0;
  if ((entry >> 63) == 0) return 0;
  const std::uint64_t pfn = entry & ((std::uint64_t{1} << 55) - 1);
  return pfn * static_cast<std::uint64_t>(page) +
         reinterpret_cast<std::uintptr_t>(p) % static_cast<std::uint64_t>(page);
}

// The VmFlags line of the mapping (from /proc/self/smaps) that contains `p`; "" if not found.
std::string vm_flags(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream in("/proc/self/smaps");
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = a >= lo && a < hi;
    } else if (inside && line.compare(0, 8, "VmFlags:") == 0) {
      return line.substr(9);
    }
  }
  return "";
}

// Makes sure debugfs is mounted where the PAT list lives; says what it did. Returns true when it
// mounted debugfs itself (run() unmounts it again at the end).
bool ensure_debugfs() {
  if (std::ifstream(kPatList).good()) return false;
  if (mount("none", "/sys/kernel/debug", "debugfs", 0, nullptr) == 0) {
    std::printf("mounted debugfs on /sys/kernel/debug (for this run only)\n");
    return true;
  }
  std::printf("could not mount debugfs on /sys/kernel/debug: %s\n", std::strerror(errno));
  return false;
}

struct PatEntry {
  std::uint64_t begin = 0, end = 0;
  std::string type, line;
};

// Parses lines such as "PAT: [mem 0x00000000fd000000-0x00000000fe000000] write-combining".
std::vector<PatEntry> read_pat_list(bool* present) {
  std::vector<PatEntry> entries;
  std::ifstream in(kPatList);
  *present = in.good();
  for (std::string line; std::getline(in, line);) {
    PatEntry e;
    e.line = line;
    const auto mem = line.find("[mem ");
    const auto close = line.find(']');
    if (mem == std::string::npos || close == std::string::npos) continue;
    unsigned long long b = 0, x = 0;
    if (std::sscanf(line.c_str() + mem, "[mem %llx-%llx]", &b, &x) != 2) continue;
    e.begin = b;
    e.end = x;
    e.type = line.substr(close + 1);
    e.type.erase(0, e.type.find_first_not_of(' '));
    entries.push_back(e);
  }
  return entries;
}

struct Buffer {
  std::string name;
  void* data = nullptr;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// GB/s of `read` (which reads `bytes` bytes), median of `runs` timed runs after one untimed one.
template <class Fn>
double bandwidth(std::size_t bytes, int runs, Fn read) {
  read();
  std::vector<double> gbps;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    read();
    const auto t1 = std::chrono::steady_clock::now();
    gbps.push_back(static_cast<double>(bytes) / std::chrono::duration<double>(t1 - t0).count() /
                   1e9);
  }
  return median(gbps);
}

// Every 8-byte word read once through a volatile pointer: the compiler must issue each load.
std::uint64_t volatile_sum(const void* p, std::size_t bytes) {
  const volatile std::uint64_t* w = static_cast<const volatile std::uint64_t*>(p);
  std::uint64_t acc = 0;
  for (std::size_t i = 0; i < bytes / sizeof(std::uint64_t); ++i) acc += w[i];
  return acc;
}

int run(std::size_t mib, bool use_cuda) {
  const std::size_t bytes = mib << 20;
  utsname u{};
  uname(&u);
  const std::string flags = cpuinfo("flags");
  std::printf("kernel %s %s; CPU %s; hypervisor flag: %s; pat flag: %s; running as uid %d\n",
              u.release, u.machine, cpuinfo("model name").c_str(),
              has_flag(flags, "hypervisor") ? "yes" : "no", has_flag(flags, "pat") ? "yes" : "no",
              static_cast<int>(getuid()));
  int driver = 0, runtime = 0;
  check(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
  check(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
  std::printf("CUDA driver %d, runtime %d; buffers of %zu MiB%s\n\n", driver, runtime, mib,
              use_cuda ? "" : "; --no-cuda: malloc only");

  // The three buffers, written once (writes to WC memory are fast; every page is then present).
  std::unique_ptr<void, void (*)(void*)> plain(std::malloc(bytes), std::free);
  if (!plain) throw std::runtime_error("malloc failed");
  void* pinned = nullptr;
  void* wc = nullptr;
  if (use_cuda) {
    check(cudaHostAlloc(&pinned, bytes, cudaHostAllocDefault), "cudaHostAlloc(default)");
  }
  std::unique_ptr<void, cudaError_t (*)(void*)> pinned_owner(pinned, cudaFreeHost);
  if (use_cuda) {
    check(cudaHostAlloc(&wc, bytes, cudaHostAllocWriteCombined), "cudaHostAlloc(WriteCombined)");
  }
  std::unique_ptr<void, cudaError_t (*)(void*)> wc_owner(wc, cudaFreeHost);
  std::unique_ptr<void, void (*)(void*)> sink(std::malloc(bytes), std::free);
  if (!sink) throw std::runtime_error("malloc failed");
  std::vector<Buffer> buffers = {{"malloc", plain.get()}};
  if (use_cuda) {
    buffers.push_back({"cudaHostAlloc default", pinned});
    buffers.push_back({"cudaHostAlloc WC", wc});
  }
  for (const Buffer& b : buffers) std::memset(b.data, 1, bytes);
  std::memset(sink.get(), 0, bytes);

  // 1. PAT.
  const bool mounted = ensure_debugfs();
  bool present = false;
  const std::vector<PatEntry> pat = read_pat_list(&present);
  if (mounted) umount("/sys/kernel/debug");
  if (!present) {
    std::printf("%s: absent (no debugfs, not root, or a kernel without PAT debug output)\n",
                kPatList);
  } else {
    std::map<std::string, int> per_type;
    for (const PatEntry& e : pat) ++per_type[e.type];
    std::printf("%s: %zu entries;", kPatList, pat.size());
    for (const auto& t : per_type) std::printf(" %s: %d;", t.first.c_str(), t.second);
    std::printf("\n");
  }
  for (const Buffer& b : buffers) {
    std::printf("%-22s VmFlags: %s\n", b.name.c_str(), vm_flags(b.data).c_str());
    for (std::size_t offset : {std::size_t{0}, bytes / 2, bytes - 1}) {
      const void* p = static_cast<const char*>(b.data) + offset;
      const std::uint64_t phys = physical_address(p);
      std::printf("  offset %9zu: physical ", offset);
      if (phys == 0) {
        std::printf("unknown (pagemap gives frame numbers only with CAP_SYS_ADMIN)\n");
        continue;
      }
      std::printf("0x%012llx; PAT: ", static_cast<unsigned long long>(phys));
      int found = 0;
      for (const PatEntry& e : pat) {
        if (phys >= e.begin && phys < e.end) {
          std::printf("%s[%s]", found++ ? ", " : "", e.line.c_str());
        }
      }
      std::printf("%s\n", found ? "" : "no entry (the kernel tracks no special type: write-back)");
    }
  }

  // 3. CPU read bandwidth.
  std::printf("\nCPU read bandwidth, median of 5 (GB/s):\n");
  std::printf("  %-22s %12s %18s\n", "buffer", "memcpy", "volatile 8-byte");
  volatile std::uint64_t keep = 0;
  for (const Buffer& b : buffers) {
    const double copy = bandwidth(bytes, 5, [&] { std::memcpy(sink.get(), b.data, bytes); });
    const double loads = bandwidth(bytes, 5, [&] { keep = keep + volatile_sum(b.data, bytes); });
    std::printf("  %-22s %12.2f %18.2f\n", b.name.c_str(), copy, loads);
  }
  std::printf(
      "\nOn x86 with WC applied, expect the WC row far below the other two in both columns.\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t mib = 64;
  bool use_cuda = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-cuda") == 0) {
      use_cuda = false;
    } else if (std::strcmp(argv[i], "--mib") == 0 && i + 1 < argc) {
      char* end = nullptr;
      const unsigned long v = std::strtoul(argv[++i], &end, 10);
      if (*end != '\0' || v < 1 || v > 4096) {
        std::fprintf(stderr, "wc_probe: --mib takes an integer in [1, 4096]\n");
        return 1;
      }
      mib = v;
    } else {
      std::fprintf(stderr,
                   "usage: wc_probe [--mib N] [--no-cuda]   (N: MiB per buffer, default 64)\n");
      return std::strcmp(argv[i], "--help") == 0 ? 0 : 1;
    }
  }
  try {
    return run(mib, use_cuda);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wc_probe: %s\n", e.what());
    return 1;
  }
}
