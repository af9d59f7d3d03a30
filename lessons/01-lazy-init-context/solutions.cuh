// Lesson 01: the exercise solutions. Read them after you have tried.
//
// Not compiled on its own: context.cu includes this file at its end, in the lesson build only, so
// the solutions share its translation unit (its helpers, and the kernels that call them).
// The exercise build (make check LESSON=01) compiles context.cu with LESSON_EXERCISE_BUILD
// defined, which leaves this file out, and exercise.cu supplies the same functions instead.
#pragma once

namespace lesson01 {

// Exercise 1. cuInit initialises the driver but creates no context, and
// cuDevicePrimaryCtxGetState only reads. (cudaFree(0), cudaSetDevice or cuDevicePrimaryCtxRetain
// would each create the context we were asked about.)
bool primary_context_is_active(int device) {
  require_ordinal(device);
  const course::DriverApi& cu = course::driver();
  CU_CHECK(cu.cuInit(0));
  CUdevice dev = 0;
  CU_CHECK(cu.cuDeviceGet(&dev, device));
  unsigned flags = 0;
  int active = 0;
  CU_CHECK(cu.cuDevicePrimaryCtxGetState(dev, &flags, &active));
  return active != 0;
}

// Exercise 2. cudaSetDevice creates the primary context and makes it current (CUDA 12+);
// cudaFuncGetAttributes needs the kernel's code in the context, so it loads a lazily-loaded
// kernel without launching it.
void warm_up(int device) {
  require_ordinal(device);
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaFree(nullptr));  // with CUDA 11 and older, this line created the context
  for (const void* kernel : {kernel_a_symbol(), kernel_b_symbol()}) {
    cudaFuncAttributes attr{};
    CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  }
}

// Exercise 3. cuCtxCreate pushes the new context onto the calling thread's context stack;
// cuCtxDestroy pops it again if it is current, so the previous context is current afterwards.
OwnContext::OwnContext(int device) {
  require_ordinal(device);
  const course::DriverApi& cu = course::driver();
  CU_CHECK(cu.cuInit(0));
  CUdevice dev = 0;
  CU_CHECK(cu.cuDeviceGet(&dev, device));
#if CUDA_VERSION >= 13000
  CU_CHECK(cu.cuCtxCreate(&ctx_, nullptr, 0, dev));  // CUDA 13: (ctx, params, flags, dev)
#else
  CU_CHECK(cu.cuCtxCreate(&ctx_, 0, dev));
#endif
}

OwnContext::~OwnContext() {
  if (ctx_ != nullptr) course::driver().cuCtxDestroy(ctx_);  // a destructor must not throw
}

}  // namespace lesson01
