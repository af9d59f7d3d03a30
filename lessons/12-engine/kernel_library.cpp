#include "kernel_library.hpp"

#include <stdexcept>

#include "common/cuda_check.hpp"
#include "common/driver_api.hpp"

// The fatbinary, as bytes, generated at build time by bin2c (CMakeLists.txt).
extern "C" const unsigned char lesson12_kernel_image[];
extern "C" const unsigned long long lesson12_kernel_image_size;
extern "C" const char lesson12_kernel_targets[];

namespace lesson12 {

const std::vector<std::uint8_t>& built_kernel_image() {
  static const std::vector<std::uint8_t> image(lesson12_kernel_image,
                                               lesson12_kernel_image + lesson12_kernel_image_size);
  return image;
}

const char* built_kernel_targets() {
  return lesson12_kernel_targets;
}

KernelLibrary::KernelLibrary(const std::vector<std::uint8_t>& image) {
  if (image.empty()) throw std::invalid_argument("KernelLibrary: the code image is empty");
  const course::DriverApi& cu = course::driver();
  // The runtime initialised the driver when it created the primary context; cuInit is cheap
  // and idempotent, and makes this class usable before any runtime call too.
  CU_CHECK(cu.cuInit(0));
  CU_CHECK(cu.cuLibraryLoadData(&library_, image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
}

KernelLibrary::~KernelLibrary() {
  if (library_ != nullptr) course::driver().cuLibraryUnload(library_);
}

CUkernel KernelLibrary::kernel(const std::string& symbol) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = kernels_.find(symbol);
  if (it != kernels_.end()) return it->second;
  CUkernel k = nullptr;
  const CUresult r = course::driver().cuLibraryGetKernel(&k, library_, symbol.c_str());
  if (r != CUDA_SUCCESS) {
    throw std::runtime_error("KernelLibrary: the code image has no kernel named '" + symbol +
                             "' (" + course::describe(r) + ")");
  }
  kernels_.emplace(symbol, k);
  return k;
}

void KernelLibrary::launch_raw(const std::string& symbol, dim3 grid, dim3 block,
                               std::size_t dynamic_smem, cudaStream_t stream, void** params,
                               bool programmatic, unsigned cluster_z) {
  CUkernel k = kernel(symbol);
  const course::DriverApi& cu = course::driver();
  if (dynamic_smem > 48 * 1024) {
    // Above 48 KiB a kernel must opt in, per device (CUDA Programming Guide, "Shared Memory").
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    const std::string key = symbol + "@" + std::to_string(device);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = smem_limit_.find(key);
    if (it == smem_limit_.end() || it->second < dynamic_smem) {
      CU_CHECK(cu.cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                       static_cast<int>(dynamic_smem), k, device));
      smem_limit_[key] = dynamic_smem;
    }
  }
  // A CUkernel stands for a CUfunction in the current context (the runtime's primary context).
  if (programmatic || cluster_z > 1) {
    CUlaunchAttribute attrs[2]{};
    unsigned n = 0;
    if (programmatic) {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attrs[n++].value.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster_z > 1) {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attrs[n].value.clusterDim.x = 1;
      attrs[n].value.clusterDim.y = 1;
      attrs[n++].value.clusterDim.z = cluster_z;
    }
    CUlaunchConfig config{};
    config.gridDimX = grid.x, config.gridDimY = grid.y, config.gridDimZ = grid.z;
    config.blockDimX = block.x, config.blockDimY = block.y, config.blockDimZ = block.z;
    config.sharedMemBytes = static_cast<unsigned>(dynamic_smem);
    config.hStream = reinterpret_cast<CUstream>(stream);
    config.attrs = attrs;
    config.numAttrs = n;
    CU_CHECK(cu.cuLaunchKernelEx(&config, reinterpret_cast<CUfunction>(k), params, nullptr));
    return;
  }
  CU_CHECK(cu.cuLaunchKernel(reinterpret_cast<CUfunction>(k), grid.x, grid.y, grid.z, block.x,
                             block.y, block.z, static_cast<unsigned>(dynamic_smem),
                             reinterpret_cast<CUstream>(stream), params, nullptr));
}

}  // namespace lesson12
