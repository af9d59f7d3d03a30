#include "common/cuda_check.hpp"

#include <cstring>

namespace course {
namespace {
const char* basename_of(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}
}  // namespace

std::string describe(cudaError_t code) {
  return std::string(cudaGetErrorName(code)) + " (" + cudaGetErrorString(code) + ")";
}

CudaError::CudaError(cudaError_t code, const char* call, const char* file, int line)
    : std::runtime_error(std::string(call) + " failed at " + basename_of(file) + ":" +
                         std::to_string(line) + ": " + describe(code)),
      code_(code) {}

}  // namespace course
