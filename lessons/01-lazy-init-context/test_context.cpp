// Lesson 01 tests. Every fact about initialisation is process-global, so each is observed in a
// fresh child process (CHILD_PROBE) that has made no CUDA call before the probe starts.
#include <cuda_runtime_api.h>
#include <cupti.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/cuda_check.hpp"
#include "common/driver_api.hpp"
#include "common/memory.hpp"
#include "common/testing.hpp"
#include "context.cuh"

using course::testing::report;
using course::testing::run_child_probe_ok;
using lesson01::observe;

namespace {
void report_state(const char* prefix, const lesson01::ContextState& s) {
  report(std::string(prefix) + "driver_initialised", s.driver_initialised);
  report(std::string(prefix) + "has_current", s.current != nullptr);
  report(std::string(prefix) + "primary_active", s.primary_active);
}

// Counts the modules the driver loads, through a CUPTI callback on CUPTI_CB_DOMAIN_RESOURCE /
// CUPTI_CBID_RESOURCE_MODULE_LOADED ("a module has been loaded", cupti_callbacks.h). Under
// CUDA_MODULE_LOADING=LAZY the runtime loads the module of a translation unit on the first use
// of one of its kernels (a launch, or a query that needs the kernel's code), not when the context
// is created (Programming Guide, "Lazy Loading"). So a module load during a kernel's first launch
// means that kernel's module had not been loaded before. Create it before the first CUDA call.
//
// Only one CUPTI subscriber may exist per process, and cuptiSubscribe fails with
// CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED when the program runs under Nsight Systems,
// Nsight Compute or cuda-gdb: status() is then "busy" and count() stays 0. Any other CUPTI error
// throws std::runtime_error naming the call.
class ModuleLoads {
 public:
  ModuleLoads() {
    const CUptiResult r = cuptiSubscribe(&subscriber_, &ModuleLoads::on_callback, this);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
      subscriber_ = nullptr;
      status_ = "busy";
      return;
    }
    check(r, "cuptiSubscribe");
    check(cuptiEnableCallback(1, subscriber_, CUPTI_CB_DOMAIN_RESOURCE,
                              CUPTI_CBID_RESOURCE_MODULE_LOADED),
          "cuptiEnableCallback(MODULE_LOADED)");
  }
  ~ModuleLoads() {
    if (subscriber_ != nullptr) cuptiUnsubscribe(subscriber_);
  }
  ModuleLoads(const ModuleLoads&) = delete;
  ModuleLoads& operator=(const ModuleLoads&) = delete;

  const char* status() const { return status_; }  // "ok" or "busy"
  int count() const { return count_.load(); }     // modules loaded since construction
  // Of those, the modules whose image (cubin or PTX) names kernel_a or kernel_b: for the report
  // only, so that a failure says whether it was this lesson's module that loaded late.
  int lesson_count() const { return lesson_count_.load(); }

 private:
  static void check(CUptiResult r, const char* call) {
    if (r == CUPTI_SUCCESS) return;
    const char* text = "unknown CUPTI error";
    cuptiGetResultString(r, &text);
    throw std::runtime_error(std::string(call) + " failed: " + text);
  }
  static void CUPTIAPI on_callback(void* self, CUpti_CallbackDomain domain, CUpti_CallbackId id,
                                   const void* data) {
    if (domain != CUPTI_CB_DOMAIN_RESOURCE || id != CUPTI_CBID_RESOURCE_MODULE_LOADED) return;
    auto* me = static_cast<ModuleLoads*>(self);
    me->count_.fetch_add(1);
    const auto* resource = static_cast<const CUpti_ResourceData*>(data);
    const auto* module =
        resource ? static_cast<const CUpti_ModuleResourceData*>(resource->resourceDescriptor)
                 : nullptr;
    if (module != nullptr && module->pCubin != nullptr &&
        (image_names(*module, "kernel_a") || image_names(*module, "kernel_b")))
      me->lesson_count_.fetch_add(1);
  }
  static bool image_names(const CUpti_ModuleResourceData& m, const char* name) {
    const char* end = m.pCubin + m.cubinSize;
    return std::search(m.pCubin, end, name, name + std::strlen(name)) != end;
  }

  CUpti_SubscriberHandle subscriber_ = nullptr;
  const char* status_ = "ok";
  std::atomic<int> count_{0};
  std::atomic<int> lesson_count_{0};
};
}  // namespace

// ---------------------------------------------------------------- CPU tests: bad input

TEST_CASE("A negative device ordinal is rejected before anything touches the driver", "[args]") {
  CHECK_THROWS_AS(observe(-1), std::invalid_argument);
  CHECK_THROWS_WITH(lesson01::primary_context(-1), course::testing::Contains(">= 0"));
}

TEST_CASE("to_string names a missing context 'none'", "[args]") {
  CHECK(lesson01::to_string(nullptr) == "none");
}

// ---------------------------------------------------------------- the lesson's facts

CHILD_PROBE(fresh_process) {
  report_state("", observe(0));
  return 0;
}

TEST_CASE("Before any CUDA call the driver is not initialised and no context is current", "[gpu]") {
  const auto c = run_child_probe_ok("fresh_process");
  CHECK(c.value("driver_initialised") == "0");
  CHECK(c.value("has_current") == "0");
}

CHILD_PROBE(after_get_device_count) {
  int n = 0;
  CUDA_CHECK(cudaGetDeviceCount(&n));
  report_state("", observe(0));
  return 0;
}

TEST_CASE("cudaGetDeviceCount initialises the driver but creates no context", "[gpu]") {
  const auto c = run_child_probe_ok("after_get_device_count");
  CHECK(c.value("driver_initialised") == "1");
  CHECK(c.value("has_current") == "0");
  CHECK(c.value("primary_active") == "0");
}

CHILD_PROBE(after_set_device) {
  CUDA_CHECK(cudaSetDevice(0));
  const auto s = observe(0);
  report_state("", s);
  report("current_is_primary", s.current == lesson01::primary_context(0));
  return 0;
}

TEST_CASE("cudaSetDevice creates the primary context and makes it current (CUDA 12+)", "[gpu]") {
  // Before CUDA 12.0 cudaSetDevice only recorded the choice; the next call that needed a context
  // created it. This course requires CUDA 12, so the new behaviour is what we pin.
  const auto c = run_child_probe_ok("after_set_device");
  CHECK(c.value("primary_active") == "1");
  CHECK(c.value("has_current") == "1");
  CHECK(c.value("current_is_primary") == "1");
}

CHILD_PROBE(runtime_context_is_primary) {
  course::DeviceBuffer<int> buf(1);  // any runtime call that needs a context
  CUcontext current = nullptr;
  CU_CHECK(course::driver().cuCtxGetCurrent(&current));
  report("current_is_primary", current == lesson01::primary_context(0));
  report("allocation_in_primary", lesson01::context_of_pointer(buf.data()) == current);
  return 0;
}

TEST_CASE("The runtime's context is the device's primary context", "[gpu]") {
  const auto c = run_child_probe_ok("runtime_context_is_primary");
  CHECK(c.value("current_is_primary") == "1");
  CHECK(c.value("allocation_in_primary") == "1");
}

CHILD_PROBE(after_device_reset) {
  CUDA_CHECK(cudaFree(nullptr));
  report_state("before_", observe(0));
  CUDA_CHECK(cudaDeviceReset());
  report_state("after_", observe(0));
  CUDA_CHECK(cudaFree(nullptr));  // the next runtime call makes a new one
  report_state("again_", observe(0));
  return 0;
}

TEST_CASE("cudaDeviceReset releases the primary context; the next call creates it again", "[gpu]") {
  const auto c = run_child_probe_ok("after_device_reset");
  CHECK(c.value("before_primary_active") == "1");
  CHECK(c.value("after_primary_active") == "0");
  CHECK(c.value("again_primary_active") == "1");
}

CHILD_PROBE(after_init_device) {
  CUDA_CHECK(cudaInitDevice(0, 0, 0));
  report_state("", observe(0));
  return 0;
}

TEST_CASE("cudaInitDevice creates the primary context without making it current", "[gpu]") {
  const auto c = run_child_probe_ok("after_init_device");
  CHECK(c.value("primary_active") == "1");
  CHECK(c.value("has_current") == "0");
}

CHILD_PROBE(new_thread) {
  CUDA_CHECK(cudaFree(nullptr));
  CUcontext main_ctx = nullptr;
  CU_CHECK(course::driver().cuCtxGetCurrent(&main_ctx));
  lesson01::ContextState before, after;
  int thread_device = -1;
  std::thread t([&] {
    before = observe(0);
    CUDA_CHECK(cudaGetDevice(&thread_device));
    CUDA_CHECK(cudaFree(nullptr));
    after = observe(0);
  });
  t.join();
  report("before_has_current", before.current != nullptr);
  report("after_is_main_context", after.current == main_ctx);
  report("thread_device", thread_device);
  return 0;
}

TEST_CASE("A new thread starts with no current context and binds the same primary context",
          "[gpu]") {
  const auto c = run_child_probe_ok("new_thread");
  CHECK(c.value("before_has_current") == "0");
  CHECK(c.value("after_is_main_context") == "1");
  CHECK(c.value("thread_device") == "0");
}

CHILD_PROBE(driver_context_hosts_runtime_calls) {
  const course::DriverApi& cu = course::driver();
  CU_CHECK(cu.cuInit(0));
  CUdevice dev = 0;
  CU_CHECK(cu.cuDeviceGet(&dev, 0));
  CUcontext own = nullptr;
#if CUDA_VERSION >= 13000
  CU_CHECK(cu.cuCtxCreate(&own, nullptr, 0, dev));
#else
  CU_CHECK(cu.cuCtxCreate(&own, 0, dev));
#endif
  bool in_own = false;
  {
    course::DeviceBuffer<float> buf(256);  // a runtime call while `own` is current
    in_own = lesson01::context_of_pointer(buf.data()) == own;
  }
  report("allocation_in_own_context", in_own);
  report("primary_active_meanwhile", observe(0).primary_active);
  CU_CHECK(cu.cuCtxDestroy(own));
  report("current_after_destroy", observe(0).current != nullptr);
  return 0;
}

TEST_CASE("Runtime calls run in a context created with the Driver API when it is current",
          "[gpu]") {
  const auto c = run_child_probe_ok("driver_context_hosts_runtime_calls");
  CHECK(c.value("allocation_in_own_context") == "1");
  CHECK(c.value("primary_active_meanwhile") == "0");  // the runtime adopted ours, made none
  CHECK(c.value("current_after_destroy") == "0");
}

CHILD_PROBE(loading_mode) {
  CUDA_CHECK(cudaSetDevice(0));
  report("lazy_mode", lesson01::lazy_loading_enabled());
  return 0;
}

TEST_CASE("CUDA_MODULE_LOADING sets the driver's module loading mode", "[gpu]") {
  // Whether one kernel is loaded could not be observed: on the H200 (CUDA 13.0), cuFuncIsLoaded
  // said "loaded" before the first launch, with the CUfunction from cudaGetFuncBySymbol and from
  // cudaGetKernel + cuKernelGetFunction alike, so getting the handle may itself load it. The
  // mode is observable, and so is a module being loaded (CUPTI: exercise 2's test); the binary
  // times the effect.
  CHECK(run_child_probe_ok("loading_mode", {"CUDA_MODULE_LOADING=LAZY"}).value("lazy_mode") == "1");
  CHECK(run_child_probe_ok("loading_mode", {"CUDA_MODULE_LOADING=EAGER"}).value("lazy_mode") ==
        "0");
}

CHILD_PROBE(first_call) {
  const char* call = std::getenv("LESSON01_CALL");
  lesson01::make_first_call(call ? call : "", 0);
  report_state("", observe(0));
  return 0;
}

TEST_CASE("Which first call creates the primary context, and which makes it current", "[gpu]") {
  struct Expect {
    const char* call;
    const char* creates;
    const char* current;
  };
  // cudaGetDeviceProperties is left out on purpose: the binary prints what it does, and we pin
  // only what the documentation implies. Queries of a device's attributes need no context;
  // memory calls need one, and make it current.
  const Expect expected[] = {{"cudaGetDeviceCount", "0", "0"}, {"cudaDeviceGetAttribute", "0", "0"},
                             {"cudaSetDevice", "1", "1"},      {"cudaInitDevice", "1", "0"},
                             {"cudaMemGetInfo", "1", "1"},     {"cudaFree(0)", "1", "1"},
                             {"cudaMalloc", "1", "1"}};
  for (const auto& e : expected) {
    const auto c = run_child_probe_ok("first_call", {std::string("LESSON01_CALL=") + e.call});
    INFO("first call: " << e.call);
    CHECK(c.value("driver_initialised") == "1");
    CHECK(c.value("primary_active") == e.creates);
    CHECK(c.value("has_current") == e.current);
  }
}

TEST_CASE("make_first_call rejects an unknown call", "[args]") {
  CHECK_THROWS_AS(lesson01::make_first_call("cudaNoSuchCall", 0), std::invalid_argument);
}

TEST_CASE("context_of_pointer rejects nullptr before any driver call", "[args]") {
  CHECK_THROWS_AS(lesson01::context_of_pointer(nullptr), std::invalid_argument);
}

TEST_CASE("The kernel launchers reject a null output before launching", "[args]") {
  // Checked before any CUDA call, so this runs in the shared test process: no context is made.
  CHECK_THROWS_AS(lesson01::launch_kernel_a(nullptr), std::invalid_argument);
  CHECK_THROWS_AS(lesson01::launch_kernel_b(nullptr), std::invalid_argument);
}

// ---------------------------------------------------------------- exercise 1

TEST_CASE("Exercise 1: primary_context_is_active rejects a negative ordinal", "[ex1]") {
  CHECK_THROWS_AS(lesson01::primary_context_is_active(-1), std::invalid_argument);
}

CHILD_PROBE(ex1_is_active) {
  report("fresh", lesson01::primary_context_is_active(0));
  report("created_by_asking", observe(0).primary_active);
  CUDA_CHECK(cudaSetDevice(0));
  report("after_set_device", lesson01::primary_context_is_active(0));
  CUDA_CHECK(cudaDeviceReset());
  report("after_reset", lesson01::primary_context_is_active(0));
  return 0;
}

TEST_CASE("Exercise 1: primary_context_is_active answers without creating a context",
          "[gpu][ex1]") {
  const auto c = run_child_probe_ok("ex1_is_active");
  CHECK(c.value("fresh") == "0");
  CHECK(c.value("created_by_asking") == "0");
  CHECK(c.value("after_set_device") == "1");
  CHECK(c.value("after_reset") == "0");
}

// ---------------------------------------------------------------- exercise 2

TEST_CASE("Exercise 2: warm_up rejects a negative ordinal", "[ex2]") {
  CHECK_THROWS_AS(lesson01::warm_up(-1), std::invalid_argument);
}

// What the two probes below observe: the modules CUPTI reports loaded (ModuleLoads), in a child
// started with CUDA_MODULE_LOADING=LAZY, during the first launch of kernel_a and kernel_b (from
// just before the launches to the end of the copy that waits for them). The control, without
// warm_up, must see at least one load there: that proves the observation works on this
// platform (and that lazy loading is in effect), so the check on warm_up is not vacuous. After a
// correct warm_up the same window must see none: warm_up loaded the module already. A warm_up
// that only creates the context (cudaSetDevice) leaves the load to the first launch and fails.
// Limit: the lesson's two kernels share one module, so this sees whether the module was loaded,
// not each kernel (a warm_up that touches only kernel_a passes).
CHILD_PROBE(ex2_first_launch_without_warm_up) {
  ModuleLoads loads;  // before the first CUDA call
  report("cupti", loads.status());
  CUDA_CHECK(cudaSetDevice(0));
  report("lazy_mode", lesson01::lazy_loading_enabled());
  course::DeviceBuffer<int> a(1), b(1);
  const int before = loads.count(), before_lesson = loads.lesson_count();
  lesson01::launch_kernel_a(a.data());
  lesson01::launch_kernel_b(b.data());
  report("a_result", course::to_host(a)[0]);
  report("loads_in_first_launches", loads.count() - before);
  report("lesson_loads_in_first_launches", loads.lesson_count() - before_lesson);
  return 0;
}

CHILD_PROBE(ex2_warm_up) {
  ModuleLoads loads;  // before the first CUDA call
  report("cupti", loads.status());
  lesson01::warm_up(0);
  report("loads_in_warm_up", loads.count());
  report("lesson_loads_in_warm_up", loads.lesson_count());
  report("lazy_mode", lesson01::lazy_loading_enabled());
  const auto s = observe(0);
  report("primary_active", s.primary_active);
  report("current_is_primary", s.current != nullptr && s.current == lesson01::primary_context(0));
  // The kernels still launch and compute after the warm-up, and load nothing on the way.
  course::DeviceBuffer<int> a(1), b(1);
  const int before = loads.count(), before_lesson = loads.lesson_count();
  lesson01::launch_kernel_a(a.data());
  lesson01::launch_kernel_b(b.data());
  report("a_result", course::to_host(a)[0]);
  report("b_result", course::to_host(b)[0]);
  report("loads_in_first_launches", loads.count() - before);
  report("lesson_loads_in_first_launches", loads.lesson_count() - before_lesson);
  return 0;
}

TEST_CASE("Exercise 2: after warm_up the primary context exists and is current", "[gpu][ex2]") {
  const auto c = run_child_probe_ok("ex2_warm_up", {"CUDA_MODULE_LOADING=LAZY"});
  CHECK(c.value("primary_active") == "1");
  CHECK(c.value("current_is_primary") == "1");
  CHECK(c.value("a_result") == "1");
  CHECK(c.value("b_result") == "2");
}

TEST_CASE("Exercise 2: after warm_up the first launches load no module (CUPTI, lazy loading)",
          "[gpu][ex2]") {
  const auto control =
      run_child_probe_ok("ex2_first_launch_without_warm_up", {"CUDA_MODULE_LOADING=LAZY"});
  if (control.value("cupti") == "busy") {
    WARN(
        "CUPTI is held by another tool (Nsight, cuda-gdb, a sanitizer): module loading cannot be "
        "observed in this run, so warm_up's loading is not checked");
    return;
  }
  INFO("control child (cudaSetDevice only) printed:\n" << control.output);
  REQUIRE(control.value("lazy_mode") == "1");
  REQUIRE(control.value("a_result") == "1");
  // Without a warm-up the first launch loads the module: the observation works.
  REQUIRE(std::stoi(control.value("loads_in_first_launches")) >= 1);

  const auto c = run_child_probe_ok("ex2_warm_up", {"CUDA_MODULE_LOADING=LAZY"});
  INFO("warm_up child printed:\n" << c.output);
  REQUIRE(c.value("cupti") == "ok");
  CHECK(c.value("lazy_mode") == "1");
  CHECK(std::stoi(c.value("loads_in_warm_up")) >= 1);
  CHECK(c.value("loads_in_first_launches") == "0");
}

// ---------------------------------------------------------------- exercise 3

TEST_CASE("Exercise 3: OwnContext rejects a negative ordinal", "[ex3]") {
  CHECK_THROWS_AS(lesson01::OwnContext(-1), std::invalid_argument);
}

CHILD_PROBE(ex3_own_context) {
  CUDA_CHECK(cudaFree(nullptr));  // the primary context is current before
  CUcontext primary = nullptr;
  CU_CHECK(course::driver().cuCtxGetCurrent(&primary));
  CUcontext seen = nullptr, alloc_ctx = nullptr;
  const CUcontext returned = lesson01::run_in_new_context(0, [&] {
    CU_CHECK(course::driver().cuCtxGetCurrent(&seen));
    course::DeviceBuffer<int> buf(16);
    alloc_ctx = lesson01::context_of_pointer(buf.data());
  });
  CUcontext after = nullptr;
  CU_CHECK(course::driver().cuCtxGetCurrent(&after));
  // Gone afterwards: the driver no longer accepts the handle (a context that was only popped
  // still answers cuCtxGetApiVersion). Free device memory is no witness: on the H200 a correctly
  // destroyed context still left cudaMemGetInfo 216 MiB below where it was before it existed
  // (a popped one: 523 MiB), so this test does not look at it.
  unsigned version = 0;
  const CUresult query = course::driver().cuCtxGetApiVersion(returned, &version);
  report("handle_rejected_afterwards", query != CUDA_SUCCESS);
  report("new_context_is_not_primary", returned != nullptr && returned != primary);
  report("fn_ran_in_it", seen == returned);
  report("runtime_allocated_in_it", alloc_ctx == returned);
  report("primary_current_again", after == primary);
  return 0;
}

TEST_CASE("Exercise 3: a Driver API context hosts runtime calls and is gone afterwards",
          "[gpu][ex3]") {
  const auto c = run_child_probe_ok("ex3_own_context");
  CHECK(c.value("new_context_is_not_primary") == "1");
  CHECK(c.value("fn_ran_in_it") == "1");
  CHECK(c.value("runtime_allocated_in_it") == "1");
  CHECK(c.value("primary_current_again") == "1");
  // A context popped instead of destroyed passes every check above: this one catches it.
  CHECK(c.value("handle_rejected_afterwards") == "1");
}
