#pragma once
#include <cuda_runtime_api.h>

// One thread that spins for `ns` nanoseconds of the GPU's %globaltimer; writes the timer value
// it started at to *started_at (device memory) unless that is null.
void test_spin(cudaStream_t stream, unsigned long long ns, unsigned long long* started_at = nullptr);
