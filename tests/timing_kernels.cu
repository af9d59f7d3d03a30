// Kernels for the tests of common/timing.hpp (kept out of test_common.cpp, which the C++
// compiler builds).
#include "common/cuda_check.hpp"
#include "tests/timing_kernels.hpp"

namespace {
__global__ void spin_kernel(unsigned long long ns, unsigned long long* started_at) {
  unsigned long long t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  if (started_at != nullptr) *started_at = t0;
  unsigned long long t = t0;
  while (t - t0 < ns) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
}

__global__ void chase_kernel(const int* chain, int steps, int* sink) {
  int i = 0;
  for (int s = 0; s < steps; ++s) i = __ldcg(chain + i);
  *sink = i;
}
}  // namespace

void test_spin(cudaStream_t stream, unsigned long long ns, unsigned long long* started_at) {
  spin_kernel<<<1, 1, 0, stream>>>(ns, started_at);
  CUDA_CHECK(cudaGetLastError());
}

void test_chase(cudaStream_t stream, const int* chain, int steps, int* sink) {
  chase_kernel<<<1, 1, 0, stream>>>(chain, steps, sink);
  CUDA_CHECK(cudaGetLastError());
}
