#pragma once
#include <cuda_runtime_api.h>

// One thread that spins for `ns` nanoseconds of the GPU's %globaltimer; writes the timer value
// it started at to *started_at (device memory) unless that is null.
void test_spin(cudaStream_t stream, unsigned long long ns,
               unsigned long long* started_at = nullptr);

// One thread follows a chain of indices in device memory: i = chain[i], `steps` times, from 0,
// each load through the L2 only (ld.global.cg: no L1), each waiting for the one before. Writes
// the last index to *sink (so the loads are not optimised away). Its time is `steps` times the
// latency of wherever the chain's lines are: the L2 or DRAM.
void test_chase(cudaStream_t stream, const int* chain, int steps, int* sink);
