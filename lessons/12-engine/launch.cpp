#include "launch.hpp"

#include <algorithm>
#include <stdexcept>

#include "common/cuda_check.hpp"

#if LESSON12_HAVE_CUDNN
#include <cudnn.h>
#endif

namespace lesson12 {

const void* view_address(const View& v, const EngineGraph& g, const Bindings& b) {
  if (v.buffer == View::kNetworkInput) return b.images;
  const BufferDesc& d = g.buffers.at(static_cast<std::size_t>(v.buffer));
  return static_cast<const char*>(b.arena) + d.offset +
         static_cast<std::size_t>(v.channel_offset) * element_size(b.dtype);
}

int view_stride(const View& v, const EngineGraph& g) {
  if (v.buffer == View::kNetworkInput) return v.channels;
  return g.buffers.at(static_cast<std::size_t>(v.buffer)).channels;
}

ConvArgs conv_args(const FusedOp& op, const EngineGraph& g, const Bindings& b, const OpWeights& w) {
  ConvArgs a{};
  a.x = view_address(op.input, g, b);
  a.w = w.weight;
  a.bias = w.bias;
  a.res = op.has_residual ? view_address(op.residual, g, b) : nullptr;
  a.y = const_cast<void*>(view_address(op.output, g, b));
  a.x_stride = view_stride(op.input, g);
  a.res_stride = op.has_residual ? view_stride(op.residual, g) : 0;
  a.y_stride = view_stride(op.output, g);
  set_conv_geometry(op, b.batch, a);
  return a;
}

PoolArgs pool_args(const FusedOp& op, const EngineGraph& g, const Bindings& b) {
  PoolArgs a{};
  a.x = view_address(op.input, g, b);
  a.y = const_cast<void*>(view_address(op.output, g, b));
  a.x_stride = view_stride(op.input, g);
  a.y_stride = view_stride(op.output, g);
  a.batch = b.batch;
  a.in_h = op.input.h;
  a.in_w = op.input.w;
  a.channels = op.input.channels;
  a.out_h = op.output.h;
  a.out_w = op.output.w;
  a.kernel = op.kernel;
  a.stride = op.stride;
  a.pad = op.pad;
  return a;
}

DetectArgs detect_args(const FusedOp& op, const EngineGraph& g, const Bindings& b) {
  if (op.box.size() != 3 || op.cls.size() != 3 || op.strides.size() != 3) {
    throw std::invalid_argument("detect_args: the detect op must have 3 levels, got " +
                                std::to_string(op.box.size()));
  }
  DetectArgs a{};
  for (int i = 0; i < 3; ++i) {
    a.box[i] = view_address(op.box[i], g, b);
    a.cls[i] = view_address(op.cls[i], g, b);
    a.box_stride[i] = view_stride(op.box[i], g);
    a.cls_stride[i] = view_stride(op.cls[i], g);
    a.h[i] = op.box[i].h;
    a.w[i] = op.box[i].w;
    a.level_stride[i] = op.strides[i];
  }
  a.batch = b.batch;
  a.num_classes = op.num_classes;
  a.reg_max = op.reg_max;
  a.num_candidates = g.num_candidates;
  a.out = b.output;
  return a;
}

EpilogueArgs epilogue_args(const ConvArgs& a) {
  EpilogueArgs e{};
  e.y = a.y;
  e.bias = a.bias;
  e.res = a.res;
  e.y_stride = a.y_stride;
  e.res_stride = a.res_stride;
  e.pixels = a.batch * a.out_h * a.out_w;
  e.channels = a.out_c;
  e.act = a.act;
  return e;
}

// ------------------------------------------------------------------------------------- cuDNN

#if LESSON12_HAVE_CUDNN

#define CUDNN_CHECK(call)                                                                   \
  do {                                                                                      \
    const cudnnStatus_t s_ = (call);                                                        \
    if (s_ != CUDNN_STATUS_SUCCESS) {                                                       \
      throw std::runtime_error(std::string(#call) + " failed: " + cudnnGetErrorString(s_)); \
    }                                                                                       \
  } while (0)

namespace {
// One cuDNN handle per thread (a handle is not thread-safe; the stream is set per call).
cudnnHandle_t thread_handle() {
  struct Handle {
    cudnnHandle_t h = nullptr;
    Handle() { CUDNN_CHECK(cudnnCreate(&h)); }
    ~Handle() { cudnnDestroy(h); }
  };
  thread_local Handle handle;
  return handle.h;
}
}  // namespace

struct CudnnConv::Impl {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  DType dtype = DType::f16;
  ~Impl() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

CudnnConv::CudnnConv(const ConvArgs& a, DType dtype) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.dtype = dtype;
  const cudnnDataType_t t = dtype == DType::f16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&m.x));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&m.y));
  CUDNN_CHECK(cudnnCreateFilterDescriptor(&m.w));
  CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&m.conv));
  // NHWC views inside wider buffers: explicit strides (n, c, h, w) in elements.
  CUDNN_CHECK(cudnnSetTensor4dDescriptorEx(m.x, t, a.batch, a.in_c, a.in_h, a.in_w,
                                           a.in_h * a.in_w * a.x_stride, 1, a.in_w * a.x_stride,
                                           a.x_stride));
  CUDNN_CHECK(cudnnSetTensor4dDescriptorEx(m.y, t, a.batch, a.out_c, a.out_h, a.out_w,
                                           a.out_h * a.out_w * a.y_stride, 1, a.out_w * a.y_stride,
                                           a.y_stride));
  // KRSC weights are cuDNN's NHWC filter format.
  CUDNN_CHECK(
      cudnnSetFilter4dDescriptor(m.w, t, CUDNN_TENSOR_NHWC, a.out_c, a.in_c, a.kernel, a.kernel));
  // FP16 data with FP32 accumulation (cuDNN's "pseudo half" configuration) on tensor cores; FP32
  // without TF32, so that it computes what the course's FP32 kernels compute.
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(m.conv, a.pad, a.pad, a.stride, a.stride, 1, 1,
                                              CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CUDNN_CHECK(cudnnSetConvolutionMathType(
      m.conv, dtype == DType::f16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
}

CudnnConv::~CudnnConv() = default;

std::vector<int> CudnnConv::algorithms() const {
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int n = 0;
  CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(thread_handle(), impl_->x, impl_->w,
                                                     impl_->conv, impl_->y,
                                                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf));
  std::vector<int> algos;
  for (int i = 0; i < n; ++i) {
    // An algorithm is listed once per math type it supports; the descriptor fixes the math type.
    const int algo = static_cast<int>(perf[i].algo);
    if (perf[i].status == CUDNN_STATUS_SUCCESS &&
        std::find(algos.begin(), algos.end(), algo) == algos.end()) {
      algos.push_back(algo);
    }
  }
  return algos;
}

std::string CudnnConv::algorithm_name(int algo) {
  switch (algo) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM:
      return "cudnn IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM:
      return "cudnn IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM:
      return "cudnn GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT:
      return "cudnn DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT:
      return "cudnn FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING:
      return "cudnn FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD:
      return "cudnn WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED:
      return "cudnn WINOGRAD_NONFUSED";
    default:
      return "cudnn algo " + std::to_string(algo);
  }
}

std::size_t CudnnConv::workspace_bytes(int algo) const {
  std::size_t bytes = 0;
  CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(
      thread_handle(), impl_->x, impl_->w, impl_->conv, impl_->y,
      static_cast<cudnnConvolutionFwdAlgo_t>(algo), &bytes));
  return bytes;
}

void CudnnConv::run(KernelLibrary& lib, int algo, const ConvArgs& a, void* workspace,
                    std::size_t workspace_bytes, cudaStream_t stream) {
  cudnnHandle_t h = thread_handle();
  CUDNN_CHECK(cudnnSetStream(h, stream));
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnConvolutionForward(h, &one, impl_->x, a.x, impl_->w, a.w, impl_->conv,
                                      static_cast<cudnnConvolutionFwdAlgo_t>(algo), workspace,
                                      workspace_bytes, &zero, impl_->y, a.y));
  const EpilogueArgs e = epilogue_args(a);
  const long long total = static_cast<long long>(e.pixels) * e.channels;
  const unsigned blocks = static_cast<unsigned>(
      std::min<long long>((total + kEpilogueThreads - 1) / kEpilogueThreads, 65535LL * 8));
  lib.launch(impl_->dtype == DType::f16 ? "bias_act_nhwc_f16" : "bias_act_nhwc_f32", dim3(blocks),
             dim3(kEpilogueThreads), 0, stream, e);
}

bool cudnn_available() {
  return true;
}
void cudnn_prepare_thread() {
  (void)thread_handle();
}

#else  // no cuDNN in this build

struct CudnnConv::Impl {};
CudnnConv::CudnnConv(const ConvArgs&, DType) {
  throw std::runtime_error("this build has no cuDNN (configure with cuDNN installed)");
}
CudnnConv::~CudnnConv() = default;
std::vector<int> CudnnConv::algorithms() const {
  return {};
}
std::string CudnnConv::algorithm_name(int algo) {
  return "cudnn algo " + std::to_string(algo);
}
std::size_t CudnnConv::workspace_bytes(int) const {
  return 0;
}
void CudnnConv::run(KernelLibrary&, int, const ConvArgs&, void*, std::size_t, cudaStream_t) {}
bool cudnn_available() {
  return false;
}
void cudnn_prepare_thread() {}

#endif

// ------------------------------------------------------------------------------------ launch

const ConvKernelInfo& conv_kernel_by_symbol(const std::string& symbol) {
  int count = 0;
  const ConvKernelInfo* table = conv_kernels(&count);
  for (int i = 0; i < count; ++i) {
    if (symbol == table[i].symbol) return table[i];
  }
  throw PlanError("the plan names kernel '" + symbol + "', which this build does not have");
}

void launch_conv_kernel(KernelLibrary& lib, const ConvKernelInfo& k, const ConvArgs& a,
                        cudaStream_t stream, bool programmatic) {
  lib.launch(k.symbol, conv_grid(k, a), dim3(k.threads), conv_smem_bytes(k, a), stream, a,
             programmatic, static_cast<unsigned>(k.split_k > 1 ? k.split_k : 1));
}

void launch(KernelLibrary& lib, const LaunchOp& op, cudaStream_t stream, void* workspace,
            std::size_t workspace_bytes, bool programmatic) {
  switch (op.kind) {
    case OpKind::conv:
      if (op.tactic.kind == PlanTactic::Kind::cudnn) {
        op.cudnn->run(lib, op.tactic.cudnn_algo, op.conv, workspace, workspace_bytes, stream);
      } else {
        launch_conv_kernel(lib, *op.kernel, op.conv, stream, programmatic);
      }
      break;
    case OpKind::max_pool:
    case OpKind::upsample:
      lib.launch(op.tactic.symbol, pool_grid(op.pool), dim3(kPoolThreads), 0, stream, op.pool,
                 programmatic);
      break;
    case OpKind::detect:
      lib.launch(op.tactic.symbol, detect_grid(op.detect), dim3(kDetectThreads), 0, stream,
                 op.detect, programmatic);
      break;
    case OpKind::copy: {
      // A concatenation input that could not be written in place: a strided 2-D copy, one row
      // per pixel (the copy engine's job; capturable into a graph like a kernel).
      const std::size_t es = element_size(op.dtype);
      const PoolArgs& a = op.pool;
      CUDA_CHECK(cudaMemcpy2DAsync(a.y, a.y_stride * es, a.x, a.x_stride * es, a.channels * es,
                                   static_cast<std::size_t>(a.batch) * a.in_h * a.in_w,
                                   cudaMemcpyDeviceToDevice, stream));
      break;
    }
  }
}

}  // namespace lesson12
