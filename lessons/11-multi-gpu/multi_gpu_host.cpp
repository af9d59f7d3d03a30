// Lesson 11: host logic (see multi_gpu_host.hpp). No CUDA here.
#include "multi_gpu_host.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>

namespace lesson11 {

namespace {
[[noreturn]] void bad(const std::string& what) {
  throw std::invalid_argument(what);
}

// A base-10 integer that is the whole of `s` (no sign, no spaces); nullopt otherwise.
std::optional<long> whole_number(const std::string& s) {
  if (s.empty() || s.size() > 9 || !std::all_of(s.begin(), s.end(), ::isdigit)) {
    return std::nullopt;
  }
  return std::strtol(s.c_str(), nullptr, 10);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string::size_type start = 0;
  for (;;) {
    const auto end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

void require_positive_finite(const char* who, const char* name, double v) {
  if (!(v > 0) || !std::isfinite(v)) {
    bad(std::string(who) + ": " + name + " must be > 0 and finite, got " + std::to_string(v));
  }
}
}  // namespace

// ------------------------------------------------------------------------------------ devices

void check_device_ordinal(const char* who, int ordinal, int device_count) {
  if (ordinal < 0 || ordinal >= device_count) {
    std::ostringstream m;
    m << who << ": device " << ordinal << " does not exist: ";
    if (device_count <= 0) {
      m << "no CUDA device";
    } else {
      m << device_count << " CUDA device(s), ordinals 0.." << device_count - 1;
    }
    bad(m.str());
  }
}

void check_device_list(const char* who, const std::vector<int>& devices, int device_count) {
  if (devices.empty()) bad(std::string(who) + ": the device list is empty");
  std::set<int> seen;
  for (int d : devices) {
    check_device_ordinal(who, d, device_count);
    if (!seen.insert(d).second) {
      bad(std::string(who) + ": device " + std::to_string(d) +
          " is listed twice; each GPU may appear once (one NCCL rank / one replica per GPU)");
    }
  }
}

std::optional<int> visible_device_count(const std::string& value, int physical) {
  if (value.empty()) return 0;
  int visible = 0;
  std::set<long> seen;
  for (const std::string& entry : split(value, ',')) {
    if (entry.rfind("GPU-", 0) == 0 || entry.rfind("MIG-", 0) == 0) return std::nullopt;
    const auto index = whole_number(entry);
    if (!index || *index >= physical) break;  // the first invalid entry ends the list
    if (!seen.insert(*index).second) return std::nullopt;
    ++visible;
  }
  return visible;
}

// ---------------------------------------------------------------------------------- topology

std::string strip_ansi(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\x1b' && i + 1 < text.size() && text[i + 1] == '[') {
      std::size_t j = i + 2;  // parameters and intermediates, then one final byte in @..~
      while (j < text.size() && !(text[j] >= '@' && text[j] <= '~')) ++j;
      i = j;  // skip the final byte too
      continue;
    }
    out += text[i];
  }
  return out;
}

std::vector<std::vector<Link>> parse_topology(const std::string& text) {
  std::istringstream lines(text);
  std::string line;
  int gpus = -1;
  std::vector<std::vector<Link>> matrix;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string t; words >> t;) w.push_back(t);
    if (w.empty()) continue;
    if (gpus < 0) {
      if (w[0] != "GPU0") continue;  // the header starts with the column names
      gpus = static_cast<int>(std::count_if(w.begin(), w.end(), [](const std::string& s) {
        return s.rfind("GPU", 0) == 0 && whole_number(s.substr(3)).has_value();
      }));
      continue;
    }
    if (w[0] != "GPU" + std::to_string(matrix.size())) continue;  // NIC rows, the legend
    if (static_cast<int>(w.size()) < gpus + 1) bad("parse_topology: row '" + line + "' is short");
    std::vector<Link> row;
    for (int j = 1; j <= gpus; ++j) {
      const std::string& c = w[static_cast<std::size_t>(j)];
      Link l;
      if (c.rfind("NV", 0) == 0 && whole_number(c.substr(2))) {
        l.kind = "NV";
        l.nvlinks = static_cast<int>(*whole_number(c.substr(2)));
      } else if (c == "X" || c == "PIX" || c == "PXB" || c == "PHB" || c == "NODE" || c == "SYS") {
        l.kind = c;
      } else {
        bad("parse_topology: unknown link '" + c + "' in row '" + line + "'");
      }
      row.push_back(l);
    }
    matrix.push_back(row);
  }
  if (gpus < 0) bad("parse_topology: no 'GPU0' header (is this nvidia-smi topo -m's output?)");
  return matrix;
}

double nvlink_gbps(int links, int nvlink_gen) {
  if (links < 1) bad("nvlink_gbps: links must be >= 1, got " + std::to_string(links));
  if (nvlink_gen < 2 || nvlink_gen > 5) {
    bad("nvlink_gbps: NVLink generation must be 2..5, got " + std::to_string(nvlink_gen));
  }
  return links * (nvlink_gen == 5 ? 50.0 : 25.0);
}

int nvlink_gen_of(int cc_major, int cc_minor) {
  if (cc_major == 7 && cc_minor == 0) return 2;
  if (cc_major == 8 && cc_minor == 0) return 3;
  if (cc_major == 9 && cc_minor == 0) return 4;
  if (cc_major == 10) return 5;
  return 0;
}

double pcie_gbps(double gt_per_s, int lanes) {
  require_positive_finite("pcie_gbps", "the transfer rate (GT/s)", gt_per_s);
  if (lanes < 1) bad("pcie_gbps: lanes must be >= 1, got " + std::to_string(lanes));
  const double encoding = gt_per_s <= 5.0 ? 8.0 / 10.0 : 128.0 / 130.0;
  return gt_per_s * lanes * encoding / 8.0;
}

std::optional<double> parse_link_speed(const std::string& text) {
  std::istringstream in(text);
  double rate = 0;
  std::string unit;
  if (!(in >> rate >> unit) || unit != "GT/s" || !(rate > 0)) return std::nullopt;
  return rate;
}

// ---------------------------------------------------------------------- tensor-parallel split

bool Partition::even() const {
  return std::all_of(size.begin(), size.end(), [&](int s) { return s == size.front(); });
}

// partition() is exercise 1: solutions.cuh (lesson build) or exercise.cu (exercise build).

// ------------------------------------------------------------------------ collective bandwidth

double algbw_gbps(std::size_t bytes, double seconds) {
  if (bytes == 0) bad("algbw_gbps: bytes must be > 0");
  require_positive_finite("algbw_gbps", "seconds", seconds);
  return static_cast<double>(bytes) / seconds / 1e9;
}

// allreduce_bus_factor and allgather_bus_factor are exercise 2 (solutions.cuh / exercise.cu).

// ------------------------------------------------------------------------------------ scaling

double scaling_efficiency(double rate_one_gpu, double rate_n_gpus, int gpus) {
  require_positive_finite("scaling_efficiency", "the one-GPU rate", rate_one_gpu);
  require_positive_finite("scaling_efficiency", "the n-GPU rate", rate_n_gpus);
  if (gpus < 1) bad("scaling_efficiency: gpus must be >= 1, got " + std::to_string(gpus));
  return rate_n_gpus / (gpus * rate_one_gpu);
}

// ----------------------------------------------------------------------------- GEMM agreement

double fp32_sum_error_bound(int K, double abs_sum) {
  constexpr double u = 1.0 / (1 << 24);
  if (K < 0) bad("fp32_sum_error_bound: K must be >= 0, got " + std::to_string(K));
  if (!(abs_sum >= 0)) bad("fp32_sum_error_bound: abs_sum must be >= 0");
  const double ku = K * u;
  if (ku >= 1) bad("fp32_sum_error_bound: K u >= 1, no bound (K = " + std::to_string(K) + ")");
  return ku / (1 - ku) * abs_sum;
}

double split_vs_single_bound(int K, double abs_sum) {
  return 2 * fp32_sum_error_bound(K, abs_sum);
}

std::vector<float> random_matrix(int rows, int cols, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> m(static_cast<std::size_t>(rows) * cols);
  for (float& x : m) x = dist(gen);
  return m;
}

// -------------------------------------------------------------------------------------- NCCL

std::string nccl_disable_nvls() {
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  const char* v = std::getenv("NCCL_NVLS_ENABLE");
  return v != nullptr ? v : "";
}

}  // namespace lesson11

#ifndef LESSON_EXERCISE_BUILD
#include "solutions.cuh"
#endif
