#include "common/driver_api.hpp"

#include <dlfcn.h>

#include <cstring>
#include <type_traits>

namespace course {
namespace {

const char* basename_of(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

// Stringify after macro expansion, so COURSE_SYMBOL(cuCtxCreate) is "cuCtxCreate_v4" in CUDA 13.
#define COURSE_STRINGIFY_(x) #x
#define COURSE_SYMBOL(x) COURSE_STRINGIFY_(x)

struct Loaded {
  DriverApi api{};
  std::string error;  // empty on success
};

Loaded load() {
  Loaded out;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    out.error = std::string("the NVIDIA driver library libcuda.so.1 could not be loaded (") +
                dlerror() + "): is the NVIDIA driver installed?";
    return out;
  }
  // The handle is never closed: the runtime holds the same library for the whole process.
  auto resolve = [&](auto& member, const char* symbol) {
    member = reinterpret_cast<std::remove_reference_t<decltype(member)>>(dlsym(lib, symbol));
    if (member == nullptr && out.error.empty()) {
      out.error = std::string("libcuda.so.1 has no symbol ") + symbol +
                  ": the driver is older than this CUDA toolkit";
    }
  };
#define COURSE_LOAD(fn) resolve(out.api.fn, COURSE_SYMBOL(fn))
  COURSE_LOAD(cuInit);
  COURSE_LOAD(cuDriverGetVersion);
  COURSE_LOAD(cuGetErrorName);
  COURSE_LOAD(cuGetErrorString);
  COURSE_LOAD(cuDeviceGet);
  COURSE_LOAD(cuDeviceGetCount);
  COURSE_LOAD(cuDeviceGetName);
  COURSE_LOAD(cuCtxCreate);
  COURSE_LOAD(cuCtxDestroy);
  COURSE_LOAD(cuCtxGetCurrent);
  COURSE_LOAD(cuCtxSetCurrent);
  COURSE_LOAD(cuCtxPushCurrent);
  COURSE_LOAD(cuCtxPopCurrent);
  COURSE_LOAD(cuCtxGetDevice);
  COURSE_LOAD(cuCtxGetApiVersion);
  COURSE_LOAD(cuDevicePrimaryCtxRetain);
  COURSE_LOAD(cuDevicePrimaryCtxRelease);
  COURSE_LOAD(cuDevicePrimaryCtxGetState);
  COURSE_LOAD(cuMemAlloc);
  COURSE_LOAD(cuMemFree);
  COURSE_LOAD(cuPointerGetAttribute);
  COURSE_LOAD(cuModuleGetLoadingMode);
  COURSE_LOAD(cuLibraryLoadData);
  COURSE_LOAD(cuLibraryUnload);
  COURSE_LOAD(cuLibraryGetKernel);
  COURSE_LOAD(cuKernelSetAttribute);
  COURSE_LOAD(cuLaunchKernel);
  COURSE_LOAD(cuLaunchKernelEx);
#undef COURSE_LOAD
  return out;
}

const Loaded& loaded() {
  static const Loaded instance = load();  // C++11 guarantees one thread-safe initialisation
  return instance;
}

}  // namespace

const DriverApi& driver() {
  const Loaded& l = loaded();
  if (!l.error.empty()) throw DriverUnavailable(l.error);
  return l.api;
}

bool driver_library_present(std::string* why) {
  const Loaded& l = loaded();
  if (why != nullptr) *why = l.error;
  return l.error.empty();
}

std::string describe(CUresult code) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (driver_library_present()) {
    // Both work before cuInit.
    driver().cuGetErrorName(code, &name);
    driver().cuGetErrorString(code, &text);
  }
  const std::string n = name ? name : "CUresult " + std::to_string(static_cast<int>(code));
  return n + " (" + (text ? text : "no description") + ")";
}

DriverError::DriverError(CUresult code, const char* call, const char* file, int line)
    : std::runtime_error(std::string(call) + " failed at " + basename_of(file) + ":" +
                         std::to_string(line) + ": " + describe(code)),
      code_(code) {}

}  // namespace course
