// Lesson 01: lazy initialisation and the primary context, measured on this machine.
//
//   lesson01 [--device N] [--help]
//
// Walks through what the CUDA runtime does on its first calls, observing the driver's state with
// the Driver API after each step and timing each step on the host clock. Two measurements run in
// fresh child processes of this binary (CUDA_MODULE_LOADING=LAZY and =EAGER), because
// initialisation happens once per process.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/headline.hpp"
#include "common/cuda_check.hpp"
#include "common/device.hpp"
#include "common/driver_api.hpp"
#include "common/lesson_main.hpp"
#include "common/timing.hpp"
#include "common/memory.hpp"
#include "common/process.hpp"
#include "context.cuh"

using namespace lesson01;

namespace {

const char* yes_no(bool b) {
  return b ? "yes" : "no";
}

void print_state(const ContextState& s) {
  std::printf("        driver initialised: %-3s  current context: %-16s  primary context: %s\n",
              yes_no(s.driver_initialised), to_string(s.current).c_str(),
              s.primary_active ? "active" : "inactive");
}

void step(int n, const char* what) {
  std::printf("\nStep %d  %s\n", n, what);
}

// Child mode: time context creation (or warm_up, exercise 2) and the first launches under the
// CUDA_MODULE_LOADING the parent set, and print them as key=value lines.
int child_first_launch(int device, bool warm) {
  const double set_device_ms = wall_ms([&] {
    if (warm) {
      warm_up(device);
    } else {
      CUDA_CHECK(cudaSetDevice(device));
    }
  });
  course::DeviceBuffer<int> out(1);
  const double a_first = wall_ms([&] {
    launch_kernel_a(out.data());
    CUDA_CHECK(cudaDeviceSynchronize());
  });
  const double a_second = wall_ms([&] {
    launch_kernel_a(out.data());
    CUDA_CHECK(cudaDeviceSynchronize());
  });
  const double b_first = wall_ms([&] {
    launch_kernel_b(out.data());
    CUDA_CHECK(cudaDeviceSynchronize());
  });
  std::printf("set_device_ms=%.3f\na_first_ms=%.3f\na_second_ms=%.3f\nb_first_ms=%.3f\n",
              set_device_ms, a_first, a_second, b_first);
  return 0;
}

// Child mode: make one runtime call first, then report what it initialised.
int child_first_call(const std::string& call, int device) {
  double ms = wall_ms([&] { make_first_call(call, device); });
  const ContextState s = observe(device);
  std::printf("ms=%.3f\ninit=%d\nprimary=%d\ncurrent=%d\n", ms, s.driver_initialised,
              s.primary_active, s.current != nullptr);
  return 0;
}

double value_of(const std::string& output, const std::string& key) {
  const auto at = output.find(key + "=");
  if (at == std::string::npos) throw std::runtime_error("child printed no " + key + ":\n" + output);
  return std::atof(output.c_str() + at + key.size() + 1);
}

int run(int device) {
  std::printf("Lesson 01: lazy initialisation and the primary context\n");
  std::printf("=======================================================\n");
  int runtime_version = 0, driver_version = 0;
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime_version));  // a constant of the linked cudart
  CU_CHECK(course::driver().cuDriverGetVersion(&driver_version));  // allowed before cuInit
  const char* loading = std::getenv("CUDA_MODULE_LOADING");
  std::printf("CUDA runtime %d.%d (linked into this binary), driver API %d.%d (libcuda.so.1)\n",
              runtime_version / 1000, runtime_version % 1000 / 10, driver_version / 1000,
              driver_version % 1000 / 10);
  std::printf("CUDA_MODULE_LOADING=%s\n",
              loading ? loading : "(unset: LAZY, the default since CUDA 12.2)");

  step(1,
       "Before any runtime call (cudaRuntimeGetVersion and cuDriverGetVersion need no driver "
       "state)");
  print_state(observe(device));

  step(2, "cudaGetDeviceCount()");
  int count = 0;
  const double count_ms = wall_ms([&] { CUDA_CHECK(cudaGetDeviceCount(&count)); });
  std::printf("        took %.1f ms; %d device(s)\n", count_ms, count);
  print_state(observe(device));
  std::printf(
      "        -> the first runtime call initialised the driver (cuInit) but made no context\n");
  if (device >= count)
    throw std::invalid_argument("--device " + std::to_string(device) + ": there are " +
                                std::to_string(count) + " device(s)");
  const course::DeviceInfo info = course::query_device(device);
  std::printf("        device %d: %s\n", device, course::summary(info).c_str());

  std::printf(
      "        Each candidate first call, alone in a fresh process (this binary re-run):\n");
  std::printf("        %-24s %10s %18s %18s %10s\n", "first call", "time", "driver initialised",
              "primary context", "current");
  int ncalls = 0;
  const char* const* calls = first_call_names(&ncalls);
  double held_count_ms = -1.0;  // cudaGetDeviceCount in a child, while this process has the GPU
  for (int i = 0; i < ncalls; ++i) {
    const auto r = course::run_process(
        {course::self_executable(), "--child-first-call", calls[i], std::to_string(device)});
    if (r.exit_code != 0)
      throw std::runtime_error(std::string("child (") + calls[i] + ") failed:\n" + r.output);
    if (std::strcmp(calls[i], "cudaGetDeviceCount") == 0) held_count_ms = value_of(r.output, "ms");
    std::printf("        %-24s %7.1f ms %18s %18s %10s\n", calls[i], value_of(r.output, "ms"),
                yes_no(value_of(r.output, "init") != 0),
                value_of(r.output, "primary") != 0 ? "created" : "-",
                yes_no(value_of(r.output, "current") != 0));
  }

  step(3, "cudaSetDevice(device)");
  const double set_ms = wall_ms([&] { CUDA_CHECK(cudaSetDevice(device)); });
  std::printf("        took %.1f ms\n", set_ms);
  const ContextState after_set = observe(device);
  print_state(after_set);
  std::printf("        -> %s\n",
              after_set.primary_active
                  ? "cudaSetDevice created the primary context and made it current (CUDA 12+)"
                  : "cudaSetDevice only chose the device (CUDA 11 and older behaviour)");

  step(4, "The calls that used to pay for initialisation are now cheap");
  const double free_ms = wall_ms([&] { CUDA_CHECK(cudaFree(nullptr)); });
  void* p = nullptr;
  const double malloc_ms = wall_ms([&] { CUDA_CHECK(cudaMalloc(&p, 1 << 20)); });
  CUDA_CHECK(cudaFree(p));
  std::printf("        cudaFree(0): %.3f ms   cudaMalloc(1 MiB): %.3f ms\n", free_ms, malloc_ms);

  step(5, "The runtime's context is the primary context");
  const CUcontext primary = primary_context(device);
  std::printf("        current: %s   cuDevicePrimaryCtxRetain: %s   same: %s\n",
              to_string(observe(device).current).c_str(), to_string(primary).c_str(),
              yes_no(observe(device).current == primary));

  step(6, "Lazy module loading: the first launch of each kernel loads it");
  std::printf("        driver's loading mode in this process: %s\n",
              lazy_loading_enabled() ? "LAZY" : "EAGER");
  course::DeviceBuffer<int> out(1);
  const double a1 = wall_ms([&] {
    launch_kernel_a(out.data());
    CUDA_CHECK(cudaDeviceSynchronize());
  });
  const double a2 = wall_ms([&] {
    launch_kernel_a(out.data());
    CUDA_CHECK(cudaDeviceSynchronize());
  });
  std::printf("        kernel_a launch + sync: first %.3f ms, second %.3f ms\n", a1, a2);
  std::printf(
      "        In fresh processes (this binary re-run), context creation and first launches:\n");
  std::printf("        %-26s %16s %14s %14s %14s\n", "CUDA_MODULE_LOADING", "context",
              "1st kernel_a", "2nd kernel_a", "1st kernel_b");
  struct Run {
    const char* label;
    const char* mode;
    bool warm;
  };
  const Run runs[] = {
      {"LAZY", "LAZY", false}, {"EAGER", "EAGER", false}, {"LAZY, then warm_up()", "LAZY", true}};
  double extra[3] = {0, 0, 0};
  for (int m = 0; m < 3; ++m) {
    const auto r = course::run_process({course::self_executable(), "--child-first-launch",
                                        std::to_string(device), runs[m].warm ? "warm" : "cold"},
                                       {std::string("CUDA_MODULE_LOADING=") + runs[m].mode});
    if (r.exit_code != 0)
      throw std::runtime_error(std::string("child (") + runs[m].label + ") failed:\n" + r.output);
    extra[m] = value_of(r.output, "a_first_ms") - value_of(r.output, "a_second_ms");
    std::printf("        %-26s %13.3f ms %11.3f ms %11.3f ms %11.3f ms\n", runs[m].label,
                value_of(r.output, "set_device_ms"), value_of(r.output, "a_first_ms"),
                value_of(r.output, "a_second_ms"), value_of(r.output, "b_first_ms"));
  }
  std::printf(
      "        -> the first launch of kernel_a cost %.3f ms more than the second with LAZY, %.3f "
      "ms with\n"
      "           EAGER, %.3f ms after warm_up. Eager loading pays for every kernel of every "
      "module at\n"
      "           context creation (this binary has two tiny ones; a TensorRT plugin library has\n"
      "           hundreds); warm_up (exercise 2) pays for the ones you name, before the first "
      "request.\n",
      extra[0], extra[1], extra[2]);

  step(7, "Contexts are current per thread");
  ContextState before, after;
  int thread_device = -1;
  std::thread t([&] {
    before = observe(device);
    CUDA_CHECK(cudaGetDevice(&thread_device));
    CUDA_CHECK(cudaSetDevice(device));
    after = observe(device);
  });
  t.join();
  std::printf(
      "        new thread before any call: current %s; cudaGetDevice says %d (the default, not "
      "ours)\n",
      to_string(before.current).c_str(), thread_device);
  std::printf("        after cudaSetDevice there:  current %s (the same primary context: %s)\n",
              to_string(after.current).c_str(), yes_no(after.current == primary));

  step(8, "The Driver API way: a context of our own");
  {
    CUcontext inside = nullptr, alloc_ctx = nullptr;
    const double own_ms = wall_ms([&] {
      const CUcontext own = run_in_new_context(device, [&] {
        CU_CHECK(course::driver().cuCtxGetCurrent(&inside));
        course::DeviceBuffer<float> buf(256);
        alloc_ctx = context_of_pointer(buf.data());
      });
      (void)own;
    });
    std::printf(
        "        cuCtxCreate .. cuCtxDestroy took %.1f ms; inside, current: %s (primary: %s)\n",
        own_ms, to_string(inside).c_str(), yes_no(inside == primary));
    std::printf(
        "        a cudaMalloc made inside belongs to it: %s; current afterwards: %s (primary "
        "again: %s)\n",
        yes_no(alloc_ctx == inside), to_string(observe(device).current).c_str(),
        yes_no(observe(device).current == primary));
  }

  step(9, "cudaDeviceReset()");
  const double reset_ms = wall_ms([&] { CUDA_CHECK(cudaDeviceReset()); });
  std::printf("        took %.1f ms\n", reset_ms);
  print_state(observe(device));
  std::printf(
      "        -> the primary context is released (inactive), though the thread still holds its "
      "old\n"
      "           handle as current; the next runtime call creates a new primary context\n");

  // Read after every measurement: NVML opens the GPU too, which would change what step 2 sees.
  const course::GpuClocks clocks = course::read_gpu_clocks(device);
  std::printf("\nGPU state (NVML, read at the end): %s\n", course::describe(clocks).c_str());
  std::printf(
      "\nSummary (host time): cudaGetDeviceCount %.1f ms in this process, %.1f ms in a child while "
      "this\nprocess held the GPU open (driver initialisation); cudaSetDevice %.1f ms (primary "
      "context);\nfirst kernel launch %.3f ms vs %.3f ms after\n",
      count_ms, held_count_ms, set_ms, a1, a2);
  course::add_headline(
      "driver init %.0f ms (%.0f ms while another process holds the GPU), primary context %.0f ms, "
      "first launch %.2f ms (then %.3f ms)",
      count_ms, held_count_ms, set_ms, a1, a2);
  course::print_headline();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int device = 0;
  CLI::App app{
      "Lesson 01: lazy initialisation and the primary context.\n"
      "Times the runtime's first calls and shows, with the Driver API, what each one did:\n"
      "when the driver is initialised, when the primary context is created, that the runtime's\n"
      "context is the primary context, lazy module loading, per-thread current contexts and a\n"
      "context made with the Driver API."};
  app.add_option("--device", device, "the device to use (default 0)")
      ->type_name("N")
      ->check(course::integer_in(0, std::numeric_limits<int>::max()));
  std::function<int()> body = [&] {
    // Checking for a device here would initialise the driver, and step 1 must come first; so
    // the check runs in a child process, which leaves this one untouched.
    const auto check = course::run_process({course::self_executable(), "--check-device"});
    if (check.exit_code != 0) {
      std::fputs(check.output.c_str(), stderr);
      return 1;
    }
    return run(device);
  };
  // The modes this binary runs in as its own child process (run() starts them) are matched by
  // hand: their values are positional and they are not for people, so they stay out of --help,
  // and the parser then sees no arguments.
  bool child = true;
  if (argc == 4 && std::strcmp(argv[1], "--child-first-call") == 0) {
    body = [&] { return child_first_call(argv[2], std::atoi(argv[3])); };
  } else if (argc == 4 && std::strcmp(argv[1], "--child-first-launch") == 0) {
    body = [&] {
      return child_first_launch(std::atoi(argv[2]), std::strcmp(argv[3], "warm") == 0);
    };
  } else if (argc == 2 && std::strcmp(argv[1], "--check-device") == 0) {
    body = [&] { return course::require_device(argv[0]) ? 0 : 1; };
  } else {
    child = false;
  }
  // DeviceCheck::none: nothing may touch the driver before step 1, so the body checks for a
  // device in a child process (or, as that child, itself).
  return course::lesson_main(app, child ? 1 : argc, argv, body, course::DeviceCheck::none);
}
