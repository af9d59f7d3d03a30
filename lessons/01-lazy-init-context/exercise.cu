// Lesson 01 exercises. Replace each TODO with your code, then run
//   make check LESSON=01
// until every test passes (one exercise: build/lessons/01-lazy-init-context/
// lesson01_exercise_tests "[ex1]"). Each stub's comment is its contract; context.cuh declares
// the functions, and README.md has folded hints (solutions.cuh the answers: try first).
// Useful: course::driver() (common/driver_api.hpp) gives the Driver API, CU_CHECK / CUDA_CHECK
// check calls, kernel_a_symbol() / kernel_b_symbol() (context.cuh) are the kernels' host stubs.
// context.cu's require_ordinal is private to it: check `device >= 0` yourself.
#include <stdexcept>

#include "common/cuda_check.hpp"
#include "common/driver_api.hpp"
#include "context.cuh"

namespace lesson01 {

// Exercise 1 [ex1]: is the primary context of `device` active?
// In:     device, a CUDA device ordinal.
// Out:    true if the device's primary context exists at the time of the call, false if not.
// Effect: none on what it observes. It may initialise the driver, but it must not create the
//         primary context nor make any context current: asking must not cost the device the
//         memory of a context. The [gpu] test asks in a fresh process (expects false, and
//         still no context afterwards), after cudaSetDevice (true) and after cudaDeviceReset
//         (false).
// Errors: device < 0: std::invalid_argument, before any driver call (the test checks the type,
//         not the text); a failed driver call: course::DriverError (CU_CHECK).
bool primary_context_is_active(int device) {
  (void)device;
  throw std::logic_error("TODO(exercise 1): primary_context_is_active is not written yet");
}

// Exercise 2 [ex2]: warm the device up, so that the first real launch pays nothing extra.
// In:     device, a CUDA device ordinal.
// Effect: afterwards the primary context of `device` exists and is current on the calling
//         thread, and kernel_a and kernel_b are loaded into it without having been launched,
//         also under CUDA_MODULE_LOADING=LAZY. The [gpu] tests run it in a child process with
//         lazy loading and watch module loads through CUPTI: warm_up must load the lesson's
//         module, and the first launches after it must load none (a warm_up that only creates
//         the context leaves the load to the first launch and fails). Both kernels share one
//         module, so loading only one of them is not observable.
// Errors: device < 0: std::invalid_argument, before any CUDA call (type checked, not text); a
//         failed runtime call: course::CudaError (CUDA_CHECK).
void warm_up(int device) {
  (void)device;
  throw std::logic_error("TODO(exercise 2): warm_up is not written yet");
}

// Exercise 3 [ex3]: a context of your own, created and destroyed with the Driver API.
// Constructor: creates a new context (not the primary one) on `device`, stores it in ctx_ (what
//         get() returns) and leaves it current on the calling thread, the previously current
//         context below it on the thread's context stack.
// Destructor: destroys that context, after which the driver rejects its handle and the previous
//         context is current again. It must not throw.
// The [gpu] test runs run_in_new_context (context.cuh) in a child process: fn must run in the
//         new context, a runtime allocation inside fn must land in it, the primary context must
//         be current again afterwards, and the handle must be rejected (a context that was
//         only popped, not destroyed, fails this last check).
// Errors (constructor): device < 0: std::invalid_argument, before any driver call (type
//         checked, not text); a failed driver call: course::DriverError (CU_CHECK).
OwnContext::OwnContext(int device) {
  (void)device;
  throw std::logic_error("TODO(exercise 3): OwnContext's constructor is not written yet");
}

OwnContext::~OwnContext() {
  // TODO(exercise 3)
}

}  // namespace lesson01
