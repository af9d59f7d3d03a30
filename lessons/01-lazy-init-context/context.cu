// Lesson 01: lazy initialisation and the primary context. See README.md for the walkthrough.
#include "context.cuh"

#include <cstdio>
#include <stdexcept>

#include "common/cuda_check.hpp"
#include "common/driver_api.hpp"

namespace lesson01 {

namespace {
void require_ordinal(int device) {
  if (device < 0) {
    throw std::invalid_argument("device ordinal must be >= 0, got " + std::to_string(device));
  }
}
}  // namespace

ContextState observe(int device) {
  require_ordinal(device);
  const course::DriverApi& cu = course::driver();
  ContextState s;
  // cuCtxGetCurrent is one of the calls that answer CUDA_ERROR_NOT_INITIALIZED instead of
  // initialising: it tells us whether cuInit has run in this process.
  const CUresult r = cu.cuCtxGetCurrent(&s.current);
  if (r == CUDA_ERROR_NOT_INITIALIZED) return s;  // nothing exists yet
  CU_CHECK(r);
  s.driver_initialised = true;
  CUdevice dev = 0;
  CU_CHECK(cu.cuDeviceGet(&dev, device));
  unsigned flags = 0;
  int active = 0;
  CU_CHECK(cu.cuDevicePrimaryCtxGetState(dev, &flags, &active));
  s.primary_active = active != 0;
  return s;
}

CUcontext primary_context(int device) {
  require_ordinal(device);
  const course::DriverApi& cu = course::driver();
  CU_CHECK(cu.cuInit(0));
  CUdevice dev = 0;
  CU_CHECK(cu.cuDeviceGet(&dev, device));
  CUcontext ctx = nullptr;
  CU_CHECK(cu.cuDevicePrimaryCtxRetain(&ctx, dev));
  CU_CHECK(cu.cuDevicePrimaryCtxRelease(dev));
  return ctx;
}

CUcontext context_of_pointer(const void* device_ptr) {
  if (device_ptr == nullptr) {
    throw std::invalid_argument("context_of_pointer: expected a device pointer, got nullptr");
  }
  CUcontext ctx = nullptr;
  CU_CHECK(course::driver().cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT,
                                                  reinterpret_cast<CUdeviceptr>(device_ptr)));
  return ctx;
}

std::string to_string(CUcontext ctx) {
  if (ctx == nullptr) return "none";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", static_cast<void*>(ctx));
  return buf;
}

const char* const* first_call_names(int* count) {
  static const char* const names[] = {"cudaGetDeviceCount",
                                      "cudaDeviceGetAttribute",
                                      "cudaGetDeviceProperties",
                                      "cudaSetDevice",
                                      "cudaInitDevice",
                                      "cudaMemGetInfo",
                                      "cudaFree(0)",
                                      "cudaMalloc"};
  *count = static_cast<int>(sizeof names / sizeof names[0]);
  return names;
}

void make_first_call(const std::string& name, int device) {
  require_ordinal(device);
  if (name == "cudaGetDeviceCount") {
    int n = 0;
    CUDA_CHECK(cudaGetDeviceCount(&n));
  } else if (name == "cudaDeviceGetAttribute") {
    int sms = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  } else if (name == "cudaGetDeviceProperties") {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  } else if (name == "cudaSetDevice") {
    CUDA_CHECK(cudaSetDevice(device));
  } else if (name == "cudaInitDevice") {
    CUDA_CHECK(cudaInitDevice(device, 0, 0));
  } else if (name == "cudaMemGetInfo") {
    std::size_t free_bytes = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  } else if (name == "cudaFree(0)") {
    CUDA_CHECK(cudaFree(nullptr));
  } else if (name == "cudaMalloc") {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, 256));
    CUDA_CHECK(cudaFree(p));
  } else {
    throw std::invalid_argument("make_first_call: unknown call '" + name + "'");
  }
}

// ---------------------------------------------------------------- the two kernels

__global__ void kernel_a(int* out) {
  *out = 1;
}
__global__ void kernel_b(int* out) {
  *out = 2;
}

// A null `out` would fault inside the kernel: an illegal address is a sticky error that ruins
// the context for every later call, so it is caught here, before the launch.
void launch_kernel_a(int* out, cudaStream_t stream) {
  if (out == nullptr) throw std::invalid_argument("launch_kernel_a: out is null");
  kernel_a<<<1, 1, 0, stream>>>(out);
  CUDA_CHECK_LAUNCH();
}

void launch_kernel_b(int* out, cudaStream_t stream) {
  if (out == nullptr) throw std::invalid_argument("launch_kernel_b: out is null");
  kernel_b<<<1, 1, 0, stream>>>(out);
  CUDA_CHECK_LAUNCH();
}

const void* kernel_a_symbol() {
  return reinterpret_cast<const void*>(&kernel_a);
}
const void* kernel_b_symbol() {
  return reinterpret_cast<const void*>(&kernel_b);
}

bool lazy_loading_enabled() {
  CUmoduleLoadingMode mode{};
  CU_CHECK(course::driver().cuModuleGetLoadingMode(&mode));
  return mode == CU_MODULE_LAZY_LOADING;
}

}  // namespace lesson01

// The exercise solutions (solutions.cuh): compiled here, in this translation unit, by the
// lesson build only; the exercise build takes exercise.cu instead. Try the exercises first.
#ifndef LESSON_EXERCISE_BUILD
#include "solutions.cuh"
#endif
