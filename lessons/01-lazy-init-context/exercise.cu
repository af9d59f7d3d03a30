// Lesson 01 exercises. Replace each TODO with your code, then run
//   make check LESSON=01
// until every test passes. The declarations and what each function must do are in context.cuh;
// README.md has hints. Useful: course::driver() (common/driver_api.hpp) gives the Driver API,
// CU_CHECK / CUDA_CHECK check calls, kernel_a_symbol() / kernel_b_symbol() (context.cuh) are the
// kernels' host stubs (exercise 2). context.cu's require_ordinal is private to it: check
// `device >= 0` yourself (std::invalid_argument).
#include <stdexcept>

#include "common/cuda_check.hpp"
#include "common/driver_api.hpp"
#include "context.cuh"

namespace lesson01 {

// Exercise 1: report whether the primary context of `device` is active, without creating it.
// Hint: which Driver API call initialises the driver but creates no context? Which one only
// reads a primary context's state?
bool primary_context_is_active(int device) {
  (void)device;
  throw std::logic_error("TODO(exercise 1): primary_context_is_active is not written yet");
}

// Exercise 2: after warm_up(device), the primary context exists and is current on this thread,
// and kernel_a and kernel_b are loaded, so their first launch costs no more than the second.
// Hint: creating the context is one runtime call; loading a kernel without launching it is a
// query that needs the kernel's code (look at cudaFuncGetAttributes).
void warm_up(int device) {
  (void)device;
  throw std::logic_error("TODO(exercise 2): warm_up is not written yet");
}

// Exercise 3: create a context of your own on `device` with the Driver API and destroy it.
// Hint: cuCtxCreate's signature changed in CUDA 13 (check <cuda.h> for CUDA_VERSION); what does
// cuCtxCreate do to the calling thread's context stack, and what does cuCtxDestroy undo?
OwnContext::OwnContext(int device) {
  (void)device;
  throw std::logic_error("TODO(exercise 3): OwnContext's constructor is not written yet");
}

OwnContext::~OwnContext() {
  // TODO(exercise 3): destroy the context (a destructor must not throw)
}

}  // namespace lesson01
