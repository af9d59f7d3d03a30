// Lesson 10, the CUTLASS 3.x baseline: one Hopper GEMM assembled from CUTLASS's collective
// builders, compiled ONLY for sm_90a and ONLY when CMake found CUTLASS's headers (this file is its
// own static library, lesson10_cutlass; see CMakeLists.txt). The API and its checks are in
// cutlass_gemm.cuh / cutlass_gemm.cpp; cutlass_gemm() calls cutlass_baseline::run_sm90 here.
//
// What the builders assemble, in the terms of v6 (tensor_gemm_sm90.cu):
//   mainloop  KernelTmaWarpSpecializedCooperative: one producer warp group issues TMA loads of
//             128x64 tiles of A and 64x256 tiles of B into a ring of shared-memory stages (as many
//             48 KiB stages as fit beside the epilogue's buffers, StageCountAutoCarveout: 4, as
//             v6's), two consumer warp groups split the 128 rows and issue wgmma.m64n256k16 on
//             them: v6's division of labour. (KernelScheduleAuto picks this same schedule for a
//             tile of 128 rows; it is named here so that the comparison reads off the code.) The
//             kernel is persistent: one block per SM looping over the tiles, as v7. A block:
//             384 threads, 225 KiB of shared memory (v6: 193 KiB), 0 bytes of workspace.
//   epilogue  TmaWarpSpecializedCooperative: accumulators through shared memory, out by TMA
//             stores, in subtiles of EpilogueTileAuto's choosing (128x32 here).
//             EpilogueScheduleAuto would pick NoSmemWarpSpecialized, each thread storing its own
//             fragments straight to global memory, which CUTLASS's own builder comment says is not
//             chosen for speed; v6 stages its write-out through shared memory too, so the TMA
//             epilogue is the fair match.
//   ping-pong The same tile and stages with KernelTmaWarpSpecializedPingpong (and the
//             TmaWarpSpecialized epilogue): each consumer warp group owns a whole tile (128x128:
//             two wgmma.m64n128k16 rows; 64x256: one m64n256k16) and the two take turns, one
//             multiplying while the other writes its tile out, ordered by barriers between them.
//             Not one of v1..v12's ideas: it is here to measure whether it pays on this GPU
//             (CutlassKernel in cutlass_gemm.cuh).
//   cluster   1x1x1: v6 launches no clusters, so the two differ in implementation, not in
//             algorithm. ClusterShape = Shape<_2, _1, _1> below would be v9's idea (two blocks
//             along M sharing B's tile by TMA multicast); keeping both would be a second
//             instantiation, and twice the compile time.
// Layouts in CUTLASS's terms: A is M x K row-major (K-major), B is K x N row-major (N-major: the
// wgmma transpose-B mode v5..v9 use), C and D are M x N row-major; D is written over C.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "common/cuda_check.hpp"
#include "cutlass_gemm.cuh"

// CUTLASS and CuTe (header-only). Only this file includes them.
#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/kernel_hardware_info.h>
#include <cutlass/util/packed_stride.hpp>

namespace lesson10 {
namespace cutlass_baseline {
namespace {

// CUTLASS's 16-bit types have the same bits as CUDA's (the pointers are reinterpreted).
template <class T>
struct CutlassElement;
template <>
struct CutlassElement<__half> {
  using type = cutlass::half_t;
};
template <>
struct CutlassElement<__nv_bfloat16> {
  using type = cutlass::bfloat16_t;
};

// A kernel's schedule and tile (CutlassKernel's three).
template <CutlassKernel kKernel>
struct Schedule;
template <>
struct Schedule<CutlassKernel::cooperative_128x256> {
  using TileShape = cute::Shape<cute::_128, cute::_256, cute::_64>;
  using Mainloop = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using Epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
};
template <>
struct Schedule<CutlassKernel::pingpong_128x128> {
  using TileShape = cute::Shape<cute::_128, cute::_128, cute::_64>;
  using Mainloop = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using Epilogue = cutlass::epilogue::TmaWarpSpecialized;
};
template <>
struct Schedule<CutlassKernel::pingpong_64x256> {
  using TileShape = cute::Shape<cute::_64, cute::_256, cute::_64>;
  using Mainloop = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using Epilogue = cutlass::epilogue::TmaWarpSpecialized;
};

// The GEMM for one 16-bit type and schedule: FP32 accumulation, C = alpha A B + beta C in the
// FP32 epilogue.
template <class Element, CutlassKernel kKernel = CutlassKernel::cooperative_128x256>
struct Sm90Gemm {
  using Layout = cutlass::layout::RowMajor;  // A, B, C and D alike
  // TMA moves 16-byte aligned boxes: 8 elements of 16 bits.
  static constexpr int kAlignment = 128 / cutlass::sizeof_bits<Element>::value;
  using TileShape = typename Schedule<kKernel>::TileShape;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float,  // accumulator, compute
      Element, Layout, kAlignment,                                    // C
      Element, Layout, kAlignment,                                    // D
      typename Schedule<kKernel>::Epilogue>::CollectiveOp;

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, Layout, kAlignment,  // A
      Element, Layout, kAlignment,                                                       // B
      float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      typename Schedule<kKernel>::Mainloop>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>,  // M N K L
                                                      Mainloop, Epilogue>;
  using Device = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

void check_status(cutlass::Status status, const char* what) {
  if (status != cutlass::Status::kSuccess)
    throw std::runtime_error(std::string("cutlass_gemm: ") + what +
                             " failed: " + cutlassGetStatusString(status));
}

}  // namespace

// One kernel's launch: the arguments, CUTLASS's checks, the TMA descriptors, the launch.
template <class T, CutlassKernel kKernel>
void run_kernel(int M, int N, int K, float alpha, const T* A, const T* B, float beta, T* C,
                cudaStream_t stream) {
  using Element = typename CutlassElement<T>::type;
  using Gemm = typename Sm90Gemm<Element, kKernel>::Device;
  using Kernel = typename Gemm::GemmKernel;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  cutlass::KernelHardwareInfo hw;
  hw.device_id = device;
  CUDA_CHECK(cudaDeviceGetAttribute(&hw.sm_count, cudaDevAttrMultiProcessorCount, device));

  // Packed strides: the leading dimension is K for A, N for B, C and D (CUTLASS's B is N x K).
  const auto stride_a = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, {M, K, 1});
  const auto stride_b = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, {N, K, 1});
  const auto stride_c = cutlass::make_cute_packed_stride(typename Kernel::StrideC{}, {M, N, 1});
  const auto stride_d = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, {M, N, 1});
  Element* c = reinterpret_cast<Element*>(C);
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {M, N, K, 1},
      {reinterpret_cast<const Element*>(A), stride_a, reinterpret_cast<const Element*>(B),
       stride_b},
      {{alpha, beta}, c, stride_c, c, stride_d},  // beta == 0: the epilogue does not load C
      hw};

  check_status(Gemm::can_implement(args), "can_implement");
  // The persistent tile scheduler without split-K or stream-K needs no workspace; a CUTLASS
  // release that changed that would need one allocated here.
  if (Gemm::get_workspace_size(args) != 0)
    throw std::logic_error("cutlass_gemm: this CUTLASS asks for a workspace; none is allocated");
  Gemm gemm;
  // initialize() encodes the TMA descriptors on the host (cuTensorMapEncodeTiled) and raises the
  // kernel's dynamic shared-memory limit; run() launches one block per SM at most.
  check_status(gemm.initialize(args, nullptr, stream), "initialize");
  // run() reads cudaGetLastError after the launch (clearing it) and reports kErrorInternal.
  check_status(gemm.run(stream), "run");
}

template <class T>
void run_sm90(int M, int N, int K, float alpha, const T* A, const T* B, float beta, T* C,
              cudaStream_t stream, CutlassKernel kernel) {
  switch (kernel) {
    case CutlassKernel::cooperative_128x256:
      return run_kernel<T, CutlassKernel::cooperative_128x256>(M, N, K, alpha, A, B, beta, C,
                                                               stream);
    case CutlassKernel::pingpong_128x128:
      return run_kernel<T, CutlassKernel::pingpong_128x128>(M, N, K, alpha, A, B, beta, C, stream);
    case CutlassKernel::pingpong_64x256:
      return run_kernel<T, CutlassKernel::pingpong_64x256>(M, N, K, alpha, A, B, beta, C, stream);
  }
  throw std::invalid_argument("cutlass_gemm: unknown CutlassKernel");
}

bool sm90_code_built() {
  cudaFuncAttributes attr{};
  using Kernel = Sm90Gemm<cutlass::half_t>::Kernel;
  return cudaFuncGetAttributes(&attr, cutlass::device_kernel<Kernel>) == cudaSuccess &&
         attr.binaryVersion == 90;
}

template void run_sm90<__half>(int, int, int, float, const __half*, const __half*, float, __half*,
                               cudaStream_t, CutlassKernel);
template void run_sm90<__nv_bfloat16>(int, int, int, float, const __nv_bfloat16*,
                                      const __nv_bfloat16*, float, __nv_bfloat16*, cudaStream_t,
                                      CutlassKernel);

}  // namespace cutlass_baseline
}  // namespace lesson10
