// Lesson 12 (internal to the builder and the runtime): from an engine-graph op and the addresses
// of one execution to the kernel arguments, and the one function that launches an op with a
// tactic. The builder times tactics through it; the runtime enqueues through it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "engine_kernels.cuh"
#include "graph.hpp"
#include "kernel_library.hpp"
#include "plan.hpp"

namespace lesson12 {

// The addresses of one execution: the context's arena, the bound tensors, the batch.
struct Bindings {
  void* arena = nullptr;
  const float* images = nullptr;  // [batch, 3, H, W]
  float* output = nullptr;        // [batch, 4 + C, N]
  int batch = 0;
  DType dtype = DType::f16;
};

// Where the engine keeps an op's weights on the device.
struct OpWeights {
  const void* weight = nullptr;  // [out][k][k][in], dtype
  const float* bias = nullptr;
};

const void* view_address(const View& v, const EngineGraph& g, const Bindings& b);
int view_stride(const View& v, const EngineGraph& g);  // the buffer's channel count

ConvArgs conv_args(const FusedOp& op, const EngineGraph& g, const Bindings& b, const OpWeights& w);
PoolArgs pool_args(const FusedOp& op, const EngineGraph& g, const Bindings& b);
DetectArgs detect_args(const FusedOp& op, const EngineGraph& g, const Bindings& b);
EpilogueArgs epilogue_args(const ConvArgs& a);

// A cuDNN convolution of one op at one batch: descriptors for its strided NHWC views, the
// algorithms cuDNN offers, and run() = cudnnConvolutionForward + the course's epilogue kernel.
// Without cuDNN in the build, constructing one throws std::runtime_error.
class CudnnConv {
 public:
  CudnnConv(const ConvArgs& a, DType dtype);
  ~CudnnConv();
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;
  // The forward algorithms cuDNN reports as usable for these descriptors, and their names.
  std::vector<int> algorithms() const;
  static std::string algorithm_name(int algo);
  std::size_t workspace_bytes(int algo) const;  // throws if cuDNN refuses the algorithm
  void run(KernelLibrary& lib, int algo, const ConvArgs& a, void* workspace,
           std::size_t workspace_bytes, cudaStream_t stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Creates this thread's cuDNN handle now if it has none (cudnnCreate allocates device memory,
// which a stream capture forbids: call it before capturing). No-op without cuDNN.
void cudnn_prepare_thread();

// One op ready to launch: its tactic resolved against the kernel table.
struct LaunchOp {
  OpKind kind = OpKind::conv;
  PlanTactic tactic;
  const ConvKernelInfo* kernel = nullptr;  // conv with a course kernel
  ConvArgs conv{};
  PoolArgs pool{};
  DetectArgs detect{};
  std::shared_ptr<CudnnConv> cudnn;  // conv with a cuDNN tactic
  DType dtype = DType::f16;          // copy: element size
};

// The table entry for `symbol`; throws PlanError if this build has no such kernel.
const ConvKernelInfo& conv_kernel_by_symbol(const std::string& symbol);

// Launches convolution kernel `k` for `a` on `stream`: conv_grid, conv_smem_bytes, and a
// cluster of k.split_k blocks for the split-K kernels. programmatic: as KernelLibrary::launch.
void launch_conv_kernel(KernelLibrary& lib, const ConvKernelInfo& k, const ConvArgs& a,
                        cudaStream_t stream, bool programmatic = false);

// Launches one op on `stream`. programmatic: launch a course kernel with programmatic dependent
// launch (KernelLibrary::launch; cuDNN's convolutions and copies are launched as usual).
void launch(KernelLibrary& lib, const LaunchOp& op, cudaStream_t stream, void* workspace,
            std::size_t workspace_bytes, bool programmatic = false);

}  // namespace lesson12
