// Lesson 01: lazy initialisation and the primary context.
//
// Functions that look at the CUDA driver's state without changing it, the two kernels the lesson
// launches, and the exercises. Every function taking `device` expects an ordinal in
// [0, cudaGetDeviceCount()) and throws std::invalid_argument for a negative one; driver failures
// throw course::DriverError, runtime failures course::CudaError, a missing driver
// course::DriverUnavailable.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <string>

namespace lesson01 {

// The calling thread's view of the driver and of one device's primary context.
struct ContextState {
  bool driver_initialised = false;  // has anyone in this process called cuInit (the runtime does)?
  CUcontext current = nullptr;      // the calling thread's current context (nullptr: none)
  bool primary_active = false;      // does the device's primary context exist right now?
};

// Reads the state WITHOUT initialising anything: it never calls cuInit, so a process that has
// made no CUDA call still has made none afterwards. Before initialisation the driver answers
// CUDA_ERROR_NOT_INITIALIZED, and that answer is the observation.
ContextState observe(int device);

// The device's primary context handle, from cuDevicePrimaryCtxRetain (then released again).
// Note: retaining CREATES the primary context if it is not active; the release drops it again
// only if nobody else (such as the runtime) holds it. Initialises the driver.
CUcontext primary_context(int device);

// The context a device pointer was allocated in (cuPointerGetAttribute CONTEXT). Throws
// std::invalid_argument for nullptr (before any driver call), DriverError for a pointer the driver
// does not know (pageable host memory, a freed allocation), DriverUnavailable without libcuda.
CUcontext context_of_pointer(const void* device_ptr);

// "0x55d0c3a1f2b0" or "none"
std::string to_string(CUcontext ctx);

// Two trivial kernels. With lazy module loading (the default since CUDA 12.2) each is loaded
// into the context the first time it is launched, not when the context is created.
// `out`: a device pointer to one int, which the kernel writes (it is not checked to be device
// memory). Throws std::invalid_argument, before launching, if it is null; CudaError if the
// launch fails.
void launch_kernel_a(int* out, cudaStream_t stream = nullptr);  // writes 1 to *out
void launch_kernel_b(int* out, cudaStream_t stream = nullptr);  // writes 2 to *out
const void* kernel_a_symbol();  // the host stub address the runtime knows the kernel by
const void* kernel_b_symbol();

// Does the driver load modules lazily in this process (cuModuleGetLoadingMode)? Set by the
// environment variable CUDA_MODULE_LOADING=LAZY|EAGER, read when the driver is initialised.
bool lazy_loading_enabled();

// The runtime calls a process might make first, by name: "cudaGetDeviceCount",
// "cudaDeviceGetAttribute", "cudaGetDeviceProperties", "cudaSetDevice", "cudaInitDevice",
// "cudaMemGetInfo", "cudaFree(0)", "cudaMalloc". first_call_names() lists them in that order.
// make_first_call(name, device) makes that call (throws std::invalid_argument for an unknown
// name; CudaError if the call fails). Used in fresh processes to see what each call initialises.
// first_call_names sets *count (which must not be null) to the number of names; the array is
// static.
const char* const* first_call_names(int* count);
void make_first_call(const std::string& name, int device);

// Wall-clock time of f() in milliseconds (steady_clock: host time, which is what the first
// runtime call costs the caller).
template <class F>
double wall_ms(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

// ---------------------------------------------------------------- exercises (exercise.cu)

// Exercise 1: is the device's primary context active? Must NOT create it (nor make anything
// current): a monitoring thread that asks must not allocate hundreds of MiB on the GPU.
bool primary_context_is_active(int device);

// Exercise 2: warm the device up, so that the first real launch pays nothing extra: after
// warm_up(device) the primary context of `device` exists and is current on the calling thread,
// and both lesson kernels are loaded into it (even with CUDA_MODULE_LOADING=LAZY). The tests
// check the context, and that the first launches after warm_up load no module (a CUPTI module-
// loaded callback; whether one kernel is loaded is not observable, see test_context.cpp). The
// binary shows the effect by timing. Throws std::invalid_argument for device < 0, CudaError if a
// CUDA call fails.
void warm_up(int device);

// Exercise 3: a context of your own with the Driver API. Creates a new (non-primary) context on
// `device`, makes it current on the calling thread while `fn()` runs (runtime calls inside fn
// then run in it), and restores the previous state afterwards, even if fn throws. Returns the
// context fn ran in; it has been destroyed by the time this returns (compare handles only).
template <class F>
CUcontext run_in_new_context(int device, F&& fn);

// The non-template part of exercise 3 (what you write): a move-only owner of a created context.
class OwnContext {
 public:
  explicit OwnContext(int device);  // cuCtxCreate: the new context is also made current
  ~OwnContext();                    // cuCtxDestroy, which also pops it if it is current
  OwnContext(const OwnContext&) = delete;
  OwnContext& operator=(const OwnContext&) = delete;
  CUcontext get() const noexcept { return ctx_; }

 private:
  CUcontext ctx_ = nullptr;
};

template <class F>
CUcontext run_in_new_context(int device, F&& fn) {
  OwnContext ctx(device);
  fn();
  return ctx.get();
}

}  // namespace lesson01
