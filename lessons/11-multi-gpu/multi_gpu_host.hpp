// Lesson 11: the host half of the multi-GPU lesson, which needs no GPU and is tested on the CPU.
//
//   check_device_ordinal  a device index against the count: std::invalid_argument before CUDA
//   visible_device_count  what CUDA_VISIBLE_DEVICES leaves visible (integer lists)
//   parse_topology        the GPU x GPU matrix of `nvidia-smi topo -m`
//   link ceilings         NVLink (links x per-link rate) and PCIe (rate x lanes x encoding)
//   partition             splitting N (column-parallel) or K (row-parallel) over g GPUs
//   bus bandwidth         algbw and busbw as nccl-tests defines them (doc/PERFORMANCE.md)
//   scaling_efficiency    throughput on g GPUs against g times one GPU
//   gemm error bound      how far a split sum may move from the one-GPU sum
//   nccl env              NCCL_NVLS_ENABLE=0 (NVLink SHARP / multicast off), set without overwrite
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lesson11 {

// ------------------------------------------------------------------------------------ devices

// Throws std::invalid_argument unless 0 <= ordinal < device_count, naming `who`, the ordinal and
// the valid range ("device 3 does not exist: 2 CUDA devices, ordinals 0..1"). Call it with
// cudaGetDeviceCount's answer before cudaSetDevice, so a bad index gets a clear message rather
// than cudaErrorInvalidDevice from deep inside a worker thread.
void check_device_ordinal(const char* who, int ordinal, int device_count);

// Throws std::invalid_argument for an empty list, a bad ordinal (check_device_ordinal) or an
// ordinal listed twice (NCCL runs one rank per GPU; a replica per GPU means distinct GPUs).
void check_device_list(const char* who, const std::vector<int>& devices, int device_count);

// How many devices the CUDA runtime shows under CUDA_VISIBLE_DEVICES=`value` on a machine with
// `physical` GPUs, for lists of integer indices. The rule (CUDA C++ Programming Guide, "CUDA
// Environment Variables", CUDA_VISIBLE_DEVICES): the listed GPUs are renumbered 0, 1, ... in the
// order listed, and the list is read up to the first invalid entry (an index >= physical, a
// negative or malformed one): only the entries before it are visible. An empty value shows none.
// Entries are separated by commas; spaces are not allowed. Returns nullopt for a list holding
// a UUID ("GPU-...") or MIG ("MIG-...") entry, which this function does not resolve, and for
// a list naming one index twice (the runtime's behaviour there is not documented).
std::optional<int> visible_device_count(const std::string& value, int physical);

// ---------------------------------------------------------------------------------- topology

// How two GPUs are connected, as `nvidia-smi topo -m` prints it:
//   X      the GPU itself
//   NV#    # NVLink links (bonded)
//   PIX    at most one PCIe bridge          PXB  several PCIe bridges, no host bridge
//   PHB    a PCIe host bridge (the CPU)     NODE within a NUMA node, across host bridges
//   SYS    across NUMA nodes (the SMP interconnect, QPI/UPI)
struct Link {
  std::string kind;  // "X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS"
  int nvlinks = 0;   // for "NV": the number of links
};
// The GPU x GPU part of `nvidia-smi topo -m`'s output: rows "GPU<i>" whose cells up to the
// number of GPUs in the header are the links to GPU0, GPU1, ... (NIC columns and the CPU
// affinity columns are ignored). Throws std::invalid_argument if the text has no "GPU0" header
// or a row is shorter than the header or holds an unknown cell.
std::vector<std::vector<Link>> parse_topology(const std::string& topo_m_output);
// The text without ANSI escape sequences (ESC '[' parameters, then a final letter): nvidia-smi
// underlines the matrix's header with them even when its output goes to a pipe (seen on the
// H200 host, driver 580).
std::string strip_ansi(const std::string& text);

// Peak bandwidth of a link, one direction, GB/s (1e9 bytes/s).
//  NVLink: links x per-link rate. NVLink 2, 3 and 4 (Volta, Ampere, Hopper) carry 25 GB/s per
//  link per direction (H100/H200 SXM: 18 links, 450 GB/s; A100 SXM: 12 links, 300 GB/s);
//  NVLink 5 (Blackwell) 50 GB/s. nvlink_gen: 2..5, else std::invalid_argument; links >= 1.
double nvlink_gbps(int links, int nvlink_gen);
// NVLink generation from compute capability: 7.0 -> 2, 8.0 -> 3, 9.0 -> 4, 10.x -> 5; 0 for a
// GPU without NVLink between boards (7.5, 8.6, 8.9, 12.x).
int nvlink_gen_of(int cc_major, int cc_minor);
//  PCIe: transfer rate (GT/s per lane) x lanes x encoding / 8 bits. Gen 1 and 2 (2.5, 5 GT/s)
//  encode 8b/10b, gen 3 and later 128b/130b: gen 5 x16 = 32 x 16 x 128/130 / 8 = 63.0 GB/s,
//  before packet (TLP) overheads, which keep real copies near 85-90% of it. Throws
//  std::invalid_argument unless gt_per_s > 0 and lanes >= 1.
double pcie_gbps(double gt_per_s, int lanes);
// The rate in a sysfs max_link_speed file ("32.0 GT/s PCIe", "16 GT/s"); nullopt if unreadable.
std::optional<double> parse_link_speed(const std::string& text);

// ---------------------------------------------------------------------- tensor-parallel split

// How a dimension of n elements is split over `parts` GPUs: part p covers [offset[p],
// offset[p] + size[p]).
struct Partition {
  std::vector<int> offset, size;
  int max_size() const { return size.empty() ? 0 : size.front(); }  // the first part's
  bool even() const;                                                // all parts the same size
};
// EXERCISE 1. The rule: every part but the last takes c = ceil(n / parts) rounded up to a
// multiple of `align`; the last takes what is left, n - (parts - 1) c, which must be >= 1.
//   n = 4096, parts = 2, align 8: 2048 + 2048 (even)
//   n = 4096, parts = 3, align 8: 1368 + 1368 + 1360 (uneven, every offset a multiple of 8)
//   n = 10, parts = 4, align 8: c = 8, and 3 x 8 > 10 leaves nothing for the last: an error
// `align` keeps each part's start 16-byte aligned for FP16 (8 elements; 32 bytes of FP32), so the
// vectorised kernels of lessons 07 and 10 take their fast path on each part. An even split is
// the case n % (parts x align) == 0.
// Throws std::invalid_argument for n < 1, parts < 1, align < 1, or a split that leaves a part
// empty, saying what is allowed (for the empty part, its message contains "multiples of
// <align>", e.g. "multiples of 8", which the test checks).
Partition partition(int n, int parts, int align);
constexpr int kSplitAlign = 8;

// ------------------------------------------------------------------------ collective bandwidth

// nccl-tests' definitions (NVIDIA/nccl-tests, doc/PERFORMANCE.md), GB/s = 1e9 bytes/s:
//   algbw = S / t, S the operation's size in bytes (for all-reduce the buffer; for all-gather the
//           whole receive buffer, n x the send size), t in seconds
//   busbw = algbw x factor: 2 (n - 1) / n for all-reduce, (n - 1) / n for all-gather, the
//           fraction of S each rank must send over its links in the best algorithm (ring), so that
//           busbw is comparable to the link's bandwidth whatever n is.
// With n = 1 the factor is 0: a one-rank collective moves nothing between GPUs.
// Throw std::invalid_argument for bytes == 0, seconds <= 0 or not finite, ranks < 1.
double algbw_gbps(std::size_t bytes, double seconds);
// EXERCISE 2: the bus-bandwidth factors.
double allreduce_bus_factor(int ranks);
double allgather_bus_factor(int ranks);
inline double allreduce_busbw_gbps(std::size_t bytes, double seconds, int ranks) {
  return algbw_gbps(bytes, seconds) * allreduce_bus_factor(ranks);
}
inline double allgather_busbw_gbps(std::size_t bytes, double seconds, int ranks) {
  return algbw_gbps(bytes, seconds) * allgather_bus_factor(ranks);
}

// ------------------------------------------------------------------------------------ scaling

// Throughput on `gpus` GPUs against `gpus` x the throughput on one: 1.0 is linear scaling.
// Throws std::invalid_argument unless both rates are > 0 and finite and gpus >= 1.
double scaling_efficiency(double rate_one_gpu, double rate_n_gpus, int gpus);

// ----------------------------------------------------------------------------- GEMM agreement

// An FP32 sum of K products, in any order (and with or without fused multiply-add), lies within
// gamma_K x sum_k |a_k b_k| of the exact sum, gamma_K = K u / (1 - K u), u = 2^-24 (Higham,
// "Accuracy and Stability of Numerical Algorithms", 2nd ed., section 3.1: any summation tree
// has at most K - 1 additions on a path, plus the product's rounding). The row-parallel split
// sums K/g products per GPU and then the g partial sums in NCCL's order: another order of the
// same sum, under the same bound. So the split and the one-GPU result, each within that bound of
// the exact value, differ by at most twice it. abs_sum = sum_k |a_mk b_kn| (computed in double).
// Throws std::invalid_argument for K < 0, abs_sum < 0, or K u >= 1.
double fp32_sum_error_bound(int K, double abs_sum);
double split_vs_single_bound(int K, double abs_sum);  // 2 x fp32_sum_error_bound

// rows x cols row-major floats, uniform in [-1, 1), from std::mt19937(seed): the GEMM inputs of
// the tests and the binary (deterministic for a seed).
std::vector<float> random_matrix(int rows, int cols, unsigned seed);

// -------------------------------------------------------------------------------------- NCCL

// NVLink SHARP (NVLS) makes NCCL create multicast objects (cuMulticastCreate) on NVSwitch
// systems. This course keeps it off: setenv("NCCL_NVLS_ENABLE", "0", 0) before any
// communicator is created. overwrite = 0: a value the user set is kept and reported. Returns
// the value in force afterwards ("0", or the user's).
std::string nccl_disable_nvls();

}  // namespace lesson11
