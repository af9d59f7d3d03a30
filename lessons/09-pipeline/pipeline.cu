// Lesson 09: the detector pipeline (pipeline.cuh). In the order the lesson teaches it:
//   1. the course engine: find each class's box in the letterboxed tensor, write YOLOv8 output,
//      then the stand-in SGEMM chain
//   2. a worker: its device, streams, buffer sets, the per-batch sequence, graphs, results
//   3. the producer and run_pipeline: threads, start barrier, failure -> clean stop
//   4. the serial tutorial loop, and the measurements the bound needs
// and, for the tests, FaultingEngine (a device fault) beside FailingEngine, and StreamGate (a
// kernel that holds a stream until the host opens it) before 4.
#include "pipeline.cuh"

#include <cublas_v2.h>
#include <nvtx3/nvToolsExt.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstring>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "affine_warp.cuh"  // lesson 06
#include "common/cuda_check.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "streams.cuh"  // lesson 04: mix32

namespace lesson09 {

namespace {

// NVTX 3 (header-only, in the toolkit): the lesson's own names on Nsight Systems' timeline.
struct NvtxRange {
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

void check_cublas(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(call) + " failed: cuBLAS status " +
                             std::to_string(static_cast<int>(status)));
  }
}

// -------------------------------------------------------------------- 1. the course engine

struct Palette {
  float rgb[kMaxClasses][3];  // class colours as the tensor holds them (RGB, / 255)
  float tolerance;
  int classes;
};

Palette make_palette(int classes) {
  Palette p{};
  for (int c = 0; c < classes; ++c) {
    const Bgr b = class_colour(c);
    p.rgb[c][0] = b.r / 255.0f;
    p.rgb[c][1] = b.g / 255.0f;
    p.rgb[c][2] = b.b / 255.0f;
  }
  p.tolerance = kColourTolerance / 255.0f;
  p.classes = classes;
  return p;
}

constexpr int kRowThreads = 256;

__global__ void reset_boxes_kernel(int* boxes, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) boxes[i] = (i % 4) < 2 ? INT_MAX : -1;  // min x, min y | max x, max y
}

// One block per (row y, image b). Each thread keeps its own min/max x per class over its
// columns, the block combines them in shared memory, and one thread per class does the four
// global atomics: 4 per class per row instead of one per matching pixel.
// T: float or __half, the engine's input type (widened exactly to float before the compare).
template <class T>
__global__ void find_class_boxes_kernel(const T* __restrict__ input, int width, int height,
                                        Palette palette, int* boxes) {
  const int y = blockIdx.x, b = blockIdx.y;
  const std::size_t plane = static_cast<std::size_t>(width) * height;
  const T* image = input + static_cast<std::size_t>(b) * 3 * plane;
  __shared__ int row_min[kMaxClasses], row_max[kMaxClasses];
  if (threadIdx.x < kMaxClasses) {
    row_min[threadIdx.x] = INT_MAX;
    row_max[threadIdx.x] = -1;
  }
  __syncthreads();
  int lo[kMaxClasses], hi[kMaxClasses];
  for (int c = 0; c < kMaxClasses; ++c) {
    lo[c] = INT_MAX;
    hi[c] = -1;
  }
  for (int x = threadIdx.x; x < width; x += blockDim.x) {
    const std::size_t i = static_cast<std::size_t>(y) * width + x;
    const float r = static_cast<float>(image[i]), g = static_cast<float>(image[plane + i]),
                bl = static_cast<float>(image[2 * plane + i]);
    for (int c = 0; c < palette.classes; ++c) {
      if (fabsf(r - palette.rgb[c][0]) <= palette.tolerance &&
          fabsf(g - palette.rgb[c][1]) <= palette.tolerance &&
          fabsf(bl - palette.rgb[c][2]) <= palette.tolerance) {
        lo[c] = min(lo[c], x);
        hi[c] = max(hi[c], x);
      }
    }
  }
  for (int c = 0; c < palette.classes; ++c) {
    if (hi[c] >= 0) {
      atomicMin(&row_min[c], lo[c]);
      atomicMax(&row_max[c], hi[c]);
    }
  }
  __syncthreads();
  if (threadIdx.x < palette.classes && row_max[threadIdx.x] >= 0) {
    int* box = boxes + (static_cast<std::size_t>(b) * palette.classes + threadIdx.x) * 4;
    atomicMin(box + 0, row_min[threadIdx.x]);
    atomicMin(box + 1, y);
    atomicMax(box + 2, row_max[threadIdx.x]);
    atomicMax(box + 3, y);
  }
}

// The background candidates' pseudo-random positions: lesson 04's integer hash.
using course::streams::mix32;

// One thread per (candidate n, image b): the YOLOv8 layout, channel k of candidate n at
// out[b][k][n] (coalesced: neighbouring threads write neighbouring n).
__global__ void write_output_kernel(const int* __restrict__ boxes, int classes, int candidates,
                                    int width, int height, float* out) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (n >= candidates) return;
  float* o = out + static_cast<std::size_t>(b) * (4 + classes) * candidates;
  float cx, cy, w, h, score = 0.0f;
  int cls = -1;
  const std::uint32_t r = mix32(static_cast<std::uint32_t>(n) * 2654435761U + 12345U);
  if (n < classes * kAnchorsPerClass) {
    cls = n / kAnchorsPerClass;
    const int j = n % kAnchorsPerClass;
    const int* box = boxes + (static_cast<std::size_t>(b) * classes + cls) * 4;
    if (box[2] >= 0) {
      // Pixel i covers [i, i + 1]: the box of pixels lo..hi is [lo, hi + 1].
      const float x1 = box[0], y1 = box[1], x2 = box[2] + 1.0f, y2 = box[3] + 1.0f;
      cx = 0.5f * (x1 + x2);
      cy = 0.5f * (y1 + y2);
      w = x2 - x1;
      h = y2 - y1;
      if (j > 0) {  // a duplicate: shifted by up to 1.5 px, resized by up to 4%
        cx += ((r & 7) - 3.5f) * (1.5f / 3.5f);
        cy += (((r >> 3) & 7) - 3.5f) * (1.5f / 3.5f);
        w *= 1.0f + (((r >> 6) & 7) - 3.5f) * (0.04f / 3.5f);
        h *= 1.0f + (((r >> 9) & 7) - 3.5f) * (0.04f / 3.5f);
      }
      score = 0.95f - 0.05f * j;
    } else {  // the class is absent: an empty anchor
      cls = -1;
      cx = cy = w = h = 0.0f;
    }
  } else {  // background: anywhere, any size, low scores
    cx = (r % 10007) / 10007.0f * width;
    cy = (mix32(r) % 10007) / 10007.0f * height;
    w = 8.0f + (r >> 24);
    h = 8.0f + ((r >> 16) & 127);
  }
  o[0 * candidates + n] = cx;
  o[1 * candidates + n] = cy;
  o[2 * candidates + n] = w;
  o[3 * candidates + n] = h;
  for (int c = 0; c < classes; ++c) {
    float s;
    if (n < classes * kAnchorsPerClass) {
      s = c == cls ? score : 0.0f;
    } else {
      s = (mix32(r + 977U * c) % 1000) * (0.2f / 1000.0f);  // < 0.2
    }
    o[(4 + c) * static_cast<std::size_t>(candidates) + n] = s;
  }
}

// x[i] uniform in [-scale, scale), from a hash of i and seed: the stand-in network's weights and
// input activation. Grid-stride.
__global__ void fill_uniform_kernel(float* x, std::size_t n, std::uint32_t seed, float scale) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::uint32_t h = mix32(static_cast<std::uint32_t>(i) ^ mix32(seed + (i >> 32)));
    x[i] = scale * ((h >> 8) * (2.0f / 16777216.0f) - 1.0f);
  }
}

void fill_uniform(course::DeviceBuffer<float>& x, std::uint32_t seed, float scale) {
  fill_uniform_kernel<<<1024, 256>>>(x.data(), x.size(), seed, scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

ColorEngine::ColorEngine(const ColorEngineOptions& o) : options_(o) {
  if (o.input.batch < 1 || o.input.channels != 3 || o.input.height < 1 || o.input.width < 1) {
    throw std::invalid_argument("ColorEngine: expected input [B >= 1, 3, H >= 1, W >= 1]");
  }
  if (o.num_classes < 1 || o.num_classes > kMaxClasses) {
    throw std::invalid_argument("ColorEngine: num_classes must be in [1, " +
                                std::to_string(kMaxClasses) + "], got " +
                                std::to_string(o.num_classes));
  }
  if (o.num_candidates < o.num_classes * kAnchorsPerClass) {
    throw std::invalid_argument("ColorEngine: num_candidates must be >= num_classes x " +
                                std::to_string(kAnchorsPerClass));
  }
  if (o.input_dtype != lesson08::DType::f32 && o.input_dtype != lesson08::DType::f16) {
    throw std::invalid_argument("ColorEngine: input_dtype must be f32 or f16");
  }
  if (!(std::isfinite(o.gflop_per_frame) && o.gflop_per_frame >= 0)) {
    throw std::invalid_argument("ColorEngine: gflop_per_frame must be finite and >= 0");
  }
  const double gemm_gflop = 2.0 * kGemmSide * kGemmSide * kGemmSide * 1e-9;
  gemms_ = static_cast<int>(std::lround(o.gflop_per_frame / gemm_gflop));
  if (o.gflop_per_frame > 0 && gemms_ == 0) gemms_ = 1;
  boxes_ = course::DeviceBuffer<int>(static_cast<std::size_t>(o.input.batch) * o.num_classes * 4);
  if (gemms_ > 0) {
    const std::size_t act = static_cast<std::size_t>(kGemmSide) * kGemmSide * o.input.batch;
    weights_ = course::DeviceBuffer<float>(static_cast<std::size_t>(kGemmSide) * kGemmSide);
    act0_ = course::DeviceBuffer<float>(act);
    act1_ = course::DeviceBuffer<float>(act);
    act2_ = course::DeviceBuffer<float>(act);
    // Random values, not zeros: an SGEMM on zeros toggles fewer transistors, draws less power
    // and so runs at a higher clock under the power cap than a network does. Weights uniform in
    // +-sqrt(3 / 1024) keep an activation's variance through one GEMM; every enqueue starts the
    // chain from the same input (act0_, never written), so nothing grows without bound.
    fill_uniform(weights_, 1, static_cast<float>(std::sqrt(3.0 / kGemmSide)));
    fill_uniform(act0_, 2, 1.0f);
    CUDA_CHECK(cudaMemset(act1_.data(), 0, act1_.bytes()));
    CUDA_CHECK(cudaMemset(act2_.data(), 0, act2_.bytes()));
    cublasHandle_t handle = nullptr;
    check_cublas(cublasCreate(&handle), "cublasCreate");
    cublas_ = handle;
    // A workspace of our own, so that cuBLAS allocates nothing while a CUDA graph is being
    // captured (cuBLAS documentation, "CUDA Graphs Support"); 32 MiB is its Hopper advice.
    cublas_workspace_ = course::DeviceBuffer<std::uint8_t>(32u << 20);
    check_cublas(cublasSetWorkspace(handle, cublas_workspace_.data(), cublas_workspace_.bytes()),
                 "cublasSetWorkspace");
  }
  CUDA_CHECK(cudaDeviceSynchronize());  // the memsets ran on the legacy stream
}

ColorEngine::~ColorEngine() {
  if (cublas_ != nullptr) cublasDestroy(static_cast<cublasHandle_t>(cublas_));
}

lesson08::OutputSpec ColorEngine::output_spec() const {
  lesson08::OutputSpec spec;
  spec.layout = lesson08::Layout::yolov8;
  spec.num_candidates = options_.num_candidates;
  spec.num_classes = options_.num_classes;
  return spec;
}

void ColorEngine::set_batch(int batch) {
  if (batch < 1 || batch > options_.input.batch) {
    throw std::invalid_argument("ColorEngine::set_batch: batch must be in [1, " +
                                std::to_string(options_.input.batch) + "], got " +
                                std::to_string(batch));
  }
  batch_ = batch;
}

double ColorEngine::real_gflop_per_frame() const {
  return gemms_ * 2.0 * kGemmSide * kGemmSide * kGemmSide * 1e-9;
}

bool ColorEngine::enqueue(cudaStream_t stream) {
  if (input_ == nullptr || output_ == nullptr) return false;  // enqueueV3 without addresses
  const int classes = options_.num_classes;
  const int count = batch_ * classes * 4;
  reset_boxes_kernel<<<(count + 255) / 256, 256, 0, stream>>>(boxes_.data(), count);
  CUDA_CHECK_LAUNCH();
  const dim3 rows(static_cast<unsigned>(options_.input.height), static_cast<unsigned>(batch_));
  if (options_.input_dtype == lesson08::DType::f16) {
    find_class_boxes_kernel<<<rows, kRowThreads, 0, stream>>>(
        static_cast<const __half*>(input_), options_.input.width, options_.input.height,
        make_palette(classes), boxes_.data());
  } else {
    find_class_boxes_kernel<<<rows, kRowThreads, 0, stream>>>(
        static_cast<const float*>(input_), options_.input.width, options_.input.height,
        make_palette(classes), boxes_.data());
  }
  CUDA_CHECK_LAUNCH();
  const int n = options_.num_candidates;
  write_output_kernel<<<dim3((n + 255) / 256, batch_), 256, 0, stream>>>(
      boxes_.data(), classes, n, options_.input.width, options_.input.height, output_);
  CUDA_CHECK_LAUNCH();
  if (gemms_ > 0) {
    cublasHandle_t handle = static_cast<cublasHandle_t>(cublas_);
    check_cublas(cublasSetStream(handle, stream), "cublasSetStream");
    // cublasSetStream puts the handle back on cuBLAS's default workspace pool (cuBLAS
    // documentation, cublasSetStream): give it ours again, or a graph capture could allocate.
    check_cublas(cublasSetWorkspace(handle, cublas_workspace_.data(), cublas_workspace_.bytes()),
                 "cublasSetWorkspace");
    const float one = 1.0f, zero = 0.0f;
    const float* a = act0_.data();  // the input of the chain, read only
    float* c = act1_.data();
    float* spare = act2_.data();
    for (int g = 0; g < gemms_; ++g) {  // act_{g+1} = W act_g, [1024 x 1024] x [1024 x 1024 b]
      check_cublas(
          cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, kGemmSide, kGemmSide * batch_, kGemmSide,
                      &one, weights_.data(), kGemmSide, a, kGemmSide, &zero, c, kGemmSide),
          "cublasSgemm");
      a = c;
      std::swap(c, spare);
    }
  }
  return true;
}

void FailingEngine::set_batch_frames(const std::int64_t* frames, int count) {
  fail_next_ = std::find(frames, frames + count, fail_frame_) != frames + count;
}

bool FailingEngine::enqueue(cudaStream_t stream) {
  if (fail_next_) return false;
  return ColorEngine::enqueue(stream);
}

namespace {
// One thread: counts the engine's runs in stream order and, on run `fault_on_run`, writes
// through `bad` (nullptr): an illegal address, the device fault the test provokes.
__global__ void fault_on_run_kernel(unsigned* runs, unsigned fault_on_run, int* bad) {
  const unsigned run = ++*runs;
  if (run == fault_on_run) *bad = 1;
}
}  // namespace

FaultingEngine::FaultingEngine(const ColorEngineOptions& options, int fault_on_run)
    : ColorEngine(options), runs_(1), fault_on_run_(fault_on_run) {
  if (fault_on_run < 1) {
    throw std::invalid_argument("FaultingEngine: fault_on_run must be >= 1, got " +
                                std::to_string(fault_on_run));
  }
  CUDA_CHECK(cudaMemset(runs_.data(), 0, runs_.bytes()));
  CUDA_CHECK(cudaDeviceSynchronize());  // the memset ran on the legacy stream
}

bool FaultingEngine::enqueue(cudaStream_t stream) {
  if (!ColorEngine::enqueue(stream)) return false;
  fault_on_run_kernel<<<1, 1, 0, stream>>>(runs_.data(), static_cast<unsigned>(fault_on_run_),
                                           nullptr);
  CUDA_CHECK_LAUNCH();
  return true;
}

EngineSpec color_engine_spec(const PipelineConfig& config, double gflop_per_frame) {
  EngineSpec spec;
  spec.shape = {config.batch, 3, config.input_height, config.input_width};
  ColorEngineOptions options;
  spec.input_dtype = config.input_dtype;
  options.input = spec.shape;
  options.input_dtype = config.input_dtype;
  options.num_classes = config.num_classes;
  options.gflop_per_frame = gflop_per_frame;
  spec.make = [options](int) { return std::make_unique<ColorEngine>(options); };
  return spec;
}

EngineSpec failing_engine_spec(const PipelineConfig& config, std::int64_t fail_frame) {
  EngineSpec spec = color_engine_spec(config, 0.0);
  ColorEngineOptions options;
  options.input = spec.shape;
  options.input_dtype = config.input_dtype;
  options.num_classes = config.num_classes;
  options.gflop_per_frame = 0.0;
  spec.make = [options, fail_frame](int) {
    return std::make_unique<FailingEngine>(options, fail_frame);
  };
  return spec;
}

EngineSpec faulting_engine_spec(const PipelineConfig& config, int fault_on_run) {
  EngineSpec spec = color_engine_spec(config, 0.0);
  ColorEngineOptions options;
  options.input = spec.shape;
  options.input_dtype = config.input_dtype;
  options.num_classes = config.num_classes;
  options.gflop_per_frame = 0.0;
  spec.make = [options, fault_on_run](int) {
    return std::make_unique<FaultingEngine>(options, fault_on_run);
  };
  return spec;
}

// ------------------------------------------------------------------------ 2. a worker

LatencySummary RunReport::latency() const {
  std::vector<double> v;
  v.reserve(results.size());
  for (const FrameResult& r : results) v.push_back(r.latency_us);
  return summarize(std::move(v));
}

double RunReport::first_latency_us() const {
  const FrameResult* first = nullptr;
  for (const FrameResult& r : results) {
    if (first == nullptr || r.frame < first->frame) first = &r;
  }
  return first == nullptr ? 0.0 : first->latency_us;
}

namespace {

double us_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// What the threads share: the first failure, the start barrier, the results.
struct Shared {
  std::mutex mutex;
  std::condition_variable cv;
  int ready = 0;
  bool failed = false;
  std::string error;
  std::int64_t error_frame = -1;
  std::string error_stage;
  std::vector<FrameResult> results;
  std::vector<TraceEvent> trace;
  Clock::time_point start{};
  int graph_captures = 0, graph_updates = 0, graph_reinstantiations = 0;

  void fail(const std::string& what, std::int64_t frame, const std::string& stage, SlotRing& ring) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!failed) {
        failed = true;
        error = what;
        error_frame = frame;
        error_stage = stage;
      }
    }
    cv.notify_all();
    ring.abort();
  }
};

// Serialises, per device, what must not meet another thread's graph capture on that device:
// setup and warm-up (their constructors use the legacy stream: cudaMemset +
// cudaDeviceSynchronize), a postprocessor made mid-run for a new frame size, and the captures
// themselves. Per device: the legacy stream and cudaDeviceSynchronize are per device, and the
// captures are thread-local (lesson 08's GraphExec, cudaStreamCaptureModeThreadLocal), so
// workers on different GPUs (lesson 11's replicas) set up at the same time.
std::mutex& legacy_work_mutex(int device) {
  static std::mutex guard;
  static std::map<int, std::mutex> per_device;  // map nodes never move: references stay valid
  std::lock_guard<std::mutex> lock(guard);
  return per_device[device];
}

// Which letterbox geometry a frame size is: 0 the run's first size, 1 the size after resize_at.
int geometry_of(const PipelineConfig& c, const FrameSize& size) {
  return size == FrameSize{c.frame_width, c.frame_height, c.format} ? 0 : 1;
}

std::size_t dtype_bytes(lesson08::DType t) {
  return t == lesson08::DType::f16 ? sizeof(__half) : sizeof(float);
}

// The device side of one batch: what one worker's buffer set holds.
struct BufferSet {
  course::DeviceBuffer<std::uint8_t> frames;  // [B] frames of max_frame_bytes, uint8 BGR rows
  course::DeviceBuffer<std::uint8_t> input;   // [B, 3, in_h, in_w] of input_dtype
  course::DeviceBuffer<float> output;         // [B, 4 + C, N]
  std::size_t frame_stride = 0;               // bytes from one image of `frames` to the next
  lesson08::DType input_dtype = lesson08::DType::f16;
  // Lesson 08's batched postprocess: one launch sequence for the whole batch, its results in
  // EfficientNMS_TRT's four tensors (what an engine that ends in that plugin leaves in device
  // memory), copied to pinned host memory.
  std::unique_ptr<lesson08::BatchedPostprocessor> post;
  // The letterboxes that map each image's boxes back to its frame: (B + 1) rows of B, row k =
  // k frames of the first size, then B - k of the resize size. A batch's frames are consecutive
  // (the ring hands out slots in frame order), so a batch that straddles the resize is row k's
  // prefix. Made at setup from the config: nothing is allocated when the size changes.
  course::DeviceBuffer<Letterbox> letterboxes;
  int max_detections = 0;                     // K
  course::DeviceBuffer<int> num_detections;   // [B]
  course::DeviceBuffer<float> boxes, scores;  // [B, K, 4], [B, K]
  course::DeviceBuffer<int> classes;          // [B, K]
  course::PinnedBuffer<int> host_num, host_classes;
  course::PinnedBuffer<float> host_boxes, host_scores;
  std::unique_ptr<course::Event> start, copied, letterboxed, engined, done;
  std::vector<lesson08::GraphExec> graphs;          // [b]: the graph for a batch of b
  std::vector<std::vector<FrameSize>> graph_sizes;  // [b]: the frame sizes graphs[b] replays
  std::vector<SlotRing::Taken> taken;               // the batch in flight
  std::vector<FrameSize> sizes;                     // their frame sizes
  bool busy = false;
};

// Allocates a buffer set for batches of up to config.batch frames (on the current device; the
// constructors use the legacy stream, so hold legacy_work_mutex).
void allocate_buffer_set(BufferSet& set, const PipelineConfig& c, const lesson08::OutputSpec& out,
                         lesson08::DType input_dtype) {
  const std::size_t batch = static_cast<std::size_t>(c.batch);
  set.frame_stride = max_frame_bytes(c);
  set.frames = course::DeviceBuffer<std::uint8_t>(set.frame_stride * batch);
  set.input_dtype = input_dtype;
  set.input = course::DeviceBuffer<std::uint8_t>(3 * static_cast<std::size_t>(c.input_height) *
                                                 c.input_width * dtype_bytes(input_dtype) * batch);
  set.output = course::DeviceBuffer<float>(out.elements() * batch);
  const Letterbox first =
      course::make_letterbox(c.frame_width, c.frame_height, c.input_width, c.input_height);
  const Letterbox second =
      c.resize_at >= 0
          ? course::make_letterbox(c.resize_width, c.resize_height, c.input_width, c.input_height)
          : first;
  std::vector<Letterbox> table;
  for (int k = 0; k <= c.batch; ++k) {
    for (int i = 0; i < c.batch; ++i) table.push_back(i < k ? first : second);
  }
  set.letterboxes = course::to_device(table);
  set.post = std::make_unique<lesson08::BatchedPostprocessor>(
      lesson08::BatchSpec{out, c.batch}, std::vector<Letterbox>{first}, c.post);
  const std::size_t k = static_cast<std::size_t>(c.post.max_detections);
  set.max_detections = c.post.max_detections;
  set.num_detections = course::DeviceBuffer<int>(batch);
  set.boxes = course::DeviceBuffer<float>(batch * k * 4);
  set.scores = course::DeviceBuffer<float>(batch * k);
  set.classes = course::DeviceBuffer<int>(batch * k);
  set.host_num = course::PinnedBuffer<int>(batch);
  set.host_boxes = course::PinnedBuffer<float>(batch * k * 4);
  set.host_scores = course::PinnedBuffer<float>(batch * k);
  set.host_classes = course::PinnedBuffer<int>(batch * k);
}

// The row of BufferSet::letterboxes for a batch of these sizes: how many lead with the first
// size. Throws std::logic_error if a frame of the first size follows one of the resize size
// (the ring's frame order makes that impossible).
int letterbox_row(const PipelineConfig& c, const std::vector<FrameSize>& sizes) {
  int k = 0;
  while (k < static_cast<int>(sizes.size()) && geometry_of(c, sizes[k]) == 0) ++k;
  for (std::size_t i = static_cast<std::size_t>(k); i < sizes.size(); ++i) {
    if (geometry_of(c, sizes[i]) == 0) {
      throw std::logic_error("a batch holds a frame of the first size after a resized one");
    }
  }
  return k;
}

// A packed NV12 frame at `frame` (device memory): its Y plane, then its U V plane.
lesson06::Nv12View nv12_view_of(const std::uint8_t* frame, const FrameSize& size) {
  const std::size_t w = static_cast<std::size_t>(size.width);
  return {frame, frame + w * size.height, size.width, size.height, w, w};
}

// The per-frame device sequence of a batch of sizes.size() frames already in set.frames:
// letterbox (lesson 06, v6 batched: one launch), the engine, the batched postprocess (lesson 08:
// one launch sequence) into the EfficientNMS tensors, and their copy to the pinned host buffers.
void enqueue_device_work(BufferSet& set, Engine& engine, const PipelineConfig& c,
                         const std::vector<FrameSize>& sizes, std::size_t out_elems,
                         cudaStream_t stream, bool mark) {
  const int b = static_cast<int>(sizes.size());
  const bool half = set.input_dtype == lesson08::DType::f16;
  __half* in16 = reinterpret_cast<__half*>(set.input.data());
  float* in32 = reinterpret_cast<float*>(set.input.data());
  if (c.format == FrameFormat::nv12) {  // lesson 06's NV12 letterbox: colours converted on the GPU
    std::vector<lesson06::Nv12View> views;
    for (int i = 0; i < b; ++i) {
      views.push_back(nv12_view_of(set.frames.data() + i * set.frame_stride, sizes[i]));
    }
    if (half) {
      lesson06::letterbox_nv12_v6_batched(views, in16, c.input_width, c.input_height,
                                          lesson06::YuvMatrix::bt601, {}, stream);
    } else {
      lesson06::letterbox_nv12_v6_batched(views, in32, c.input_width, c.input_height,
                                          lesson06::YuvMatrix::bt601, {}, stream);
    }
  } else {
    std::vector<lesson06::ImageView> views;
    for (int i = 0; i < b; ++i) {
      views.push_back({set.frames.data() + i * set.frame_stride, sizes[i].width, sizes[i].height, 3,
                       static_cast<std::size_t>(sizes[i].width) * 3});
    }
    if (half) {
      lesson06::letterbox_v6_batched(views, in16, c.input_width, c.input_height, {}, stream);
    } else {
      lesson06::letterbox_v4_batched(views, in32, c.input_width, c.input_height, {}, stream);
    }
  }
  if (mark) set.letterboxed->record(stream);
  engine.set_batch(b);
  engine.set_input(set.input.data());
  engine.set_output(set.output.data());
  if (!engine.enqueue(stream)) {
    throw PipelineError("Engine::enqueue returned false", -1, "engine");
  }
  if (mark) set.engined->record(stream);
  lesson08::BatchRun run;
  run.images = b;
  run.letterboxes = set.letterboxes.data() + static_cast<std::size_t>(letterbox_row(c, sizes)) *
                                                 static_cast<std::size_t>(c.batch);
  run.copy_results = false;  // the host reads the four tensors below instead
  set.post->enqueue(set.output.data(), static_cast<std::size_t>(b) * out_elems, stream, run);
  set.post->write_efficient_nms(
      {set.num_detections.data(), set.boxes.data(), set.scores.data(), set.classes.data()}, stream);
  const std::size_t n = static_cast<std::size_t>(b),
                    k = static_cast<std::size_t>(set.max_detections);
  CUDA_CHECK(cudaMemcpyAsync(set.host_num.data(), set.num_detections.data(), n * sizeof(int),
                             cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaMemcpyAsync(set.host_boxes.data(), set.boxes.data(), n * k * 4 * sizeof(float),
                             cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaMemcpyAsync(set.host_scores.data(), set.scores.data(), n * k * sizeof(float),
                             cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaMemcpyAsync(set.host_classes.data(), set.classes.data(), n * k * sizeof(int),
                             cudaMemcpyDeviceToHost, stream));
}

// Image i's detections from the copied EfficientNMS tensors (call once `done` has completed).
std::vector<lesson08::Detection> detections_of(const BufferSet& set, int i) {
  return lesson08::detections_of({set.max_detections, set.host_num.data(), set.host_boxes.data(),
                                  set.host_scores.data(), set.host_classes.data()},
                                 i);
}

class Worker {
 public:
  Worker(int index, const PipelineConfig& config, const EngineSpec& spec, SlotRing& ring,
         std::vector<course::PinnedBuffer<std::uint8_t>>& slots, Shared& shared)
      : index_(index), c_(config), spec_(spec), ring_(ring), slots_(slots), shared_(shared) {}

  void operator()() noexcept {
    try {
      {
        // One worker at a time sets up and warms up: constructors that use the legacy stream
        // (cudaMemset + cudaDeviceSynchronize) never meet another worker's graph capture, and
        // the warm-up's timings are not disturbed. Serving starts for all at the barrier.
        std::lock_guard<std::mutex> one_at_a_time(legacy_work_mutex(device()));
        stage_ = "setup";
        setup();
        if (c_.warmup) warm_up();
      }
      {
        std::lock_guard<std::mutex> lock(shared_.mutex);
        ++shared_.ready;
      }
      shared_.cv.notify_all();
      serve();
    } catch (const PipelineError& e) {
      report(e.what(), e.stage().empty() ? stage_ : e.stage());
    } catch (const std::exception& e) {
      report(e.what(), stage_);
    }
    // Whatever happened, let the GPU finish with our buffers before they are freed (the
    // destructors of the sets and streams run after this). Errors here were already reported.
    if (compute_) cudaStreamSynchronize(*compute_);
    if (copy_) cudaStreamSynchronize(*copy_);
    // Free on this thread, whose device is the one they were made on (and where lesson 06's
    // per-thread table cache lives): buffers and graphs, then the engine, then the streams.
    sets_.clear();
    epoch_.reset();
    engine_.reset();
    copy_.reset();
    compute_.reset();
    {
      std::lock_guard<std::mutex> lock(shared_.mutex);
      ++shared_.ready;  // a worker that failed before the barrier must not hold the others
    }
    shared_.cv.notify_all();
  }

 private:
  void report(const std::string& what, const std::string& stage) {
    std::string frames = "no frame";
    if (frame_lo_ >= 0) {
      frames = frame_hi_ > frame_lo_
                   ? "frames " + std::to_string(frame_lo_) + ".." + std::to_string(frame_hi_)
                   : "frame " + std::to_string(frame_lo_);
    }
    shared_.fail(
        "worker " + std::to_string(index_) + ", " + frames + ", stage " + stage + ": " + what,
        frame_lo_, stage, ring_);
  }

  void setup() {
    // Exercise 2: before anything is created, this thread binds its device.
    bind_worker_device(device());
    compute_ = std::make_unique<course::Stream>();
    if (c_.copy_stream) copy_ = std::make_unique<course::Stream>();
    stage_ = "engine creation";
    engine_ = spec_.make(index_);
    const TensorShape s = engine_->input_shape();
    if (s.batch != spec_.shape.batch || s.channels != spec_.shape.channels ||
        s.height != spec_.shape.height || s.width != spec_.shape.width) {
      throw std::invalid_argument(engine_->name() +
                                  ": the engine's input shape is not the one its spec announced");
    }
    if (engine_->input_dtype() != spec_.input_dtype) {
      throw std::invalid_argument(engine_->name() +
                                  ": the engine's input type is not the one its spec announced");
    }
    const lesson08::OutputSpec out = engine_->output_spec();
    out_elems_ = out.elements();
    out_ = out;
    stage_ = "allocation";
    const unsigned flags = c_.trace ? cudaEventDefault : cudaEventDisableTiming;
    // The two events this thread waits on: with blocking_sync, a wait yields the CPU (the
    // thread sleeps until the driver wakes it) instead of spinning on the event.
    const unsigned wait_flags = flags | (c_.blocking_sync ? cudaEventBlockingSync : 0u);
    sets_.resize(static_cast<std::size_t>(c_.inflight));
    for (BufferSet& set : sets_) {
      allocate_buffer_set(set, c_, out_, spec_.input_dtype);
      set.start = std::make_unique<course::Event>(flags);
      set.copied = std::make_unique<course::Event>(wait_flags);
      set.letterboxed = std::make_unique<course::Event>(flags);
      set.engined = std::make_unique<course::Event>(flags);
      set.done = std::make_unique<course::Event>(wait_flags);
      set.graphs.resize(static_cast<std::size_t>(c_.batch) + 1);
      set.graph_sizes.resize(static_cast<std::size_t>(c_.batch) + 1);
    }
    if (c_.trace) {  // the GPU's clock against the host's, once
      epoch_ = std::make_unique<course::Event>(cudaEventDefault);
      epoch_->record(*compute_);
      epoch_->synchronize();
      epoch_host_ = Clock::now();
    }
  }

  // Lesson 01: the first launch of each kernel loads its module, cuBLAS picks its kernels, the
  // table cache uploads lesson 06's warp tables. Pay for all of it before the first real frame:
  // every batch size through every set, and each set's graphs captured.
  // Every batch size at the run's first frame size: a worker cannot know a later size.
  void warm_up() {
    stage_ = "warm-up";
    NvtxRange range("warm-up");
    const FrameSize first{c_.frame_width, c_.frame_height, c_.format};
    for (BufferSet& set : sets_) {
      CUDA_CHECK(cudaMemsetAsync(set.frames.data(), 0, set.frames.bytes(), *compute_));
      for (int b = 1; b <= c_.batch; ++b) {
        if (!c_.graphs && b != 1 && b != c_.batch) continue;
        const std::vector<FrameSize> sizes(static_cast<std::size_t>(b), first);
        enqueue_device_work(set, *engine_, c_, sizes, out_elems_, *compute_, false);
        compute_->synchronize();
        if (c_.graphs) capture(set, sizes, false);
      }
    }
    compute_->synchronize();
  }

  // The graph of a batch of sizes.size() frames of these sizes. If one was captured for other
  // sizes: capture again and update it in place (cudaGraphExecUpdate), or re-instantiate if
  // the update is refused. `serving`: called while other workers run, so hold
  // legacy_work_mutex (the warm-up already holds it) and run the sequence once eagerly first:
  // the first enqueue for a new geometry uploads its warp table and may allocate (lesson 06's
  // table cache), no allocation is permitted while a stream captures
  // (cudaErrorStreamCaptureUnsupported, seen on the H200), and the cache refuses a miss while
  // capturing (std::logic_error). The warm-up has just run it. The capture pins the tables it
  // finds to the graph (lesson 06, DeviceTable): they stay cached while any graph replays them,
  // whatever other geometries this worker sees, which is why the graphs are destroyed on this
  // thread before it ends, and launched on the stream that uploaded the tables (compute_).
  void capture(BufferSet& set, const std::vector<FrameSize>& sizes, bool serving) {
    NvtxRange range("graph capture");
    const int b = static_cast<int>(sizes.size());
    const bool recapture = static_cast<bool>(set.graphs[b]);
    std::unique_lock<std::mutex> lock(legacy_work_mutex(device()), std::defer_lock);
    if (serving) {
      lock.lock();
      enqueue_device_work(set, *engine_, c_, sizes, out_elems_, *compute_, false);
    }
    const auto work = [&] {
      enqueue_device_work(set, *engine_, c_, sizes, out_elems_, *compute_, false);
    };
    bool updated = false;
    if (recapture) {
      updated = set.graphs[b].recapture(*compute_, work);
    } else {
      set.graphs[b].capture(*compute_, work);
    }
    set.graph_sizes[b] = sizes;
    std::lock_guard<std::mutex> count(shared_.mutex);
    ++(!recapture ? shared_.graph_captures
       : updated  ? shared_.graph_updates
                  : shared_.graph_reinstantiations);
  }

  void serve() {
    int next = 0;
    const auto poll = std::chrono::microseconds(200);
    for (;;) {
      // Deliver whatever has finished, so that a result does not wait for its set's reuse.
      for (BufferSet& set : sets_) {
        if (!set.busy) continue;
        const cudaError_t q = cudaEventQuery(*set.done);
        if (q == cudaErrorNotReady) {
          // "Not ready" is an answer, not an error: do not let a later CUDA_CHECK_LAUNCH
          // (cudaGetLastError) report it.
          if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
        } else {
          // Done, or an error (a device fault in the batch's work, say): finish's wait reports
          // it as this batch's, and the worker stops.
          finish(set);
        }
      }
      stage_ = "waiting for frames";
      frame_lo_ = frame_hi_ = -1;
      std::vector<SlotRing::Taken> taken = ring_.take(c_.batch, c_.max_wait_us, poll);
      if (taken.empty()) {
        if (ring_.aborted()) return;
        BufferSet* oldest = nullptr;  // nothing new: finish the oldest batch in flight
        for (BufferSet& set : sets_) {
          if (set.busy) oldest = &set;  // with at most 2 sets, `next` points at the older one
        }
        if (sets_[next].busy) oldest = &sets_[next];
        if (oldest != nullptr) {
          finish(*oldest);
          continue;
        }
        if (ring_.finished()) return;
        continue;
      }
      BufferSet& set = sets_[next];
      next = (next + 1) % static_cast<int>(sets_.size());
      if (set.busy) finish(set);
      launch(set, std::move(taken));
    }
  }

  void launch(BufferSet& set, std::vector<SlotRing::Taken> taken) {
    NvtxRange range("batch");
    const int b = static_cast<int>(taken.size());
    frame_lo_ = frame_hi_ = taken.front().frame;
    std::vector<std::int64_t> ids;
    std::vector<int> slot_ids;
    for (const SlotRing::Taken& t : taken) {
      ids.push_back(t.frame);
      slot_ids.push_back(t.slot);
      frame_lo_ = std::min(frame_lo_, t.frame);
      frame_hi_ = std::max(frame_hi_, t.frame);
    }
    set.taken = std::move(taken);
    set.busy = true;  // from here on the slots are ours until released
    // Each frame's size, from the frame (a camera may change resolution mid-stream).
    set.sizes.clear();
    for (const SlotRing::Taken& t : set.taken) set.sizes.push_back(frame_size(c_, t.frame));
    engine_->set_batch_frames(ids.data(), b);
    cudaStream_t copy = copy_ ? copy_->get() : compute_->get();
    stage_ = "H2D";
    {
      NvtxRange r("H2D");
      if (c_.trace) set.start->record(copy);
      for (int i = 0; i < b; ++i) {
        CUDA_CHECK(cudaMemcpyAsync(set.frames.data() + i * set.frame_stride,
                                   slots_[set.taken[i].slot].data(), set.sizes[i].bytes(),
                                   cudaMemcpyHostToDevice, copy));
      }
    }
    // The device work of the batch, on the stream enqueue_after_copy gives it.
    const auto work = [&](cudaStream_t stream) {
      if (stream != compute_->get()) {
        // The graphs were captured, and lesson 06's tables uploaded, on the compute stream.
        throw std::logic_error("enqueue_after_copy: work must be given the compute stream");
      }
      stage_ = c_.graphs ? "graph launch" : "letterbox + engine + postprocess";
      NvtxRange r("letterbox + engine + postprocess");
      if (c_.graphs) {
        if (!set.graphs[b] || set.graph_sizes[b] != set.sizes) {
          // Captured on first use (no warm-up), or re-captured for new frame sizes: the graph
          // bakes in the letterbox's geometry and the postprocessors' addresses. That batch
          // pays for an eager run and the capture (and, without an in-place update, an
          // instantiation), which is what the warm-up moves out of the way for the first size.
          stage_ = set.graphs[b] ? "graph re-capture (new frame size)" : "graph capture";
          capture(set, set.sizes, true);
          stage_ = "graph launch";
        }
        const bool fail = std::any_of(
            set.taken.begin(), set.taken.end(),
            [&](const SlotRing::Taken& t) { return t.frame == c_.test_fail_graph_launch_at; });
        if (fail) CUDA_CHECK(cudaGraphLaunch(nullptr, stream));  // refused (tests only)
        set.graphs[b].launch(stream);
      } else {
        enqueue_device_work(set, *engine_, c_, set.sizes, out_elems_, stream, c_.trace);
      }
    };
    // Exercise 4: `copied` after the copies, the work after them on the GPU (this thread goes
    // on), `done` after the work.
    enqueue_after_copy(copy, *compute_, *set.copied, *set.done, work);
    // Exercise 3: the slots go back to the producer only once the copy engine has read them.
    stage_ = "slot release";
    if (c_.test_skip_slot_wait) {
      for (int s : slot_ids) ring_.release(s);  // THE RACE, on purpose (tests only)
    } else if (c_.release_by_callback) {
      // The other way: the copy stream itself hands the slots back once the copies are done,
      // through a host function the driver runs on its own thread in stream order
      // (cudaLaunchHostFunc), and this thread goes on at once. Without a copy stream the copy
      // stream is the compute stream, which holds the batch's work by now, so the slots come
      // back only after it. The function calls no CUDA API (it must not) and cannot throw out
      // (the driver could not report it): a slot that is not in flight fails the run instead
      // (Shared::fail only takes mutexes). On the normal path the worker's final stream
      // synchronisation waits for it, so it never outlives the ring; after a device fault the
      // driver may never run it, and its payload leaks with the process that must restart.
      struct Release {
        SlotRing* ring;
        Shared* shared;
        std::vector<int> slots;
        static void CUDART_CB run(void* p) {
          std::unique_ptr<Release> r(static_cast<Release*>(p));
          try {
            for (int s : r->slots) r->ring->release(s);
          } catch (const std::exception& e) {
            r->shared->fail(std::string("slot release (host function): ") + e.what(), -1,
                            "slot release", *r->ring);
          }
        }
      };
      auto payload = std::make_unique<Release>(Release{&ring_, &shared_, slot_ids});
      CUDA_CHECK(cudaLaunchHostFunc(copy, &Release::run, payload.get()));
      payload.release();  // the host function owns it now
    } else {
      NvtxRange r("wait for copy");
      release_after_copy(ring_, slot_ids, *set.copied);
    }
  }

  void finish(BufferSet& set) {
    NvtxRange range("results");
    frame_lo_ = frame_hi_ = set.taken.front().frame;
    for (const SlotRing::Taken& t : set.taken) {
      frame_lo_ = std::min(frame_lo_, t.frame);
      frame_hi_ = std::max(frame_hi_, t.frame);
    }
    stage_ = "GPU work (reported at the batch's completion)";
    set.done->synchronize();
    const Clock::time_point now = Clock::now();
    std::vector<FrameResult> results;
    const int b = static_cast<int>(set.taken.size());
    for (int i = 0; i < b; ++i) {
      FrameResult r;
      r.frame = set.taken[i].frame;
      r.worker = index_;
      r.batch = b;
      r.detections = detections_of(set, i);
      r.latency_us = us_between(set.taken[i].captured, now);
      results.push_back(std::move(r));
    }
    std::vector<TraceEvent> trace;
    if (c_.trace) {
      const double base = us_between(shared_.start, epoch_host_);
      auto at = [&](const course::Event& e) { return base + 1e3 * course::elapsed_ms(*epoch_, e); };
      const std::int64_t first = set.taken.front().frame;
      auto add = [&](const char* name, double t0, double t1) {
        trace.push_back({name, index_, t0, std::max(0.0, t1 - t0), first, b});
      };
      const double t_start = at(*set.start), t_copied = at(*set.copied), t_done = at(*set.done);
      add("H2D", t_start, t_copied);
      if (c_.graphs) {
        add("graph: letterbox + engine + postprocess + D2H", t_copied, t_done);
      } else {
        const double t_lb = at(*set.letterboxed), t_en = at(*set.engined);
        add("letterbox", t_copied, t_lb);
        add("engine", t_lb, t_en);
        add("decode + NMS + D2H", t_en, t_done);
      }
    }
    set.busy = false;
    set.taken.clear();
    std::lock_guard<std::mutex> lock(shared_.mutex);
    for (FrameResult& r : results) shared_.results.push_back(std::move(r));
    for (TraceEvent& e : trace) shared_.trace.push_back(std::move(e));
  }

  int device() const { return c_.devices[static_cast<std::size_t>(index_) % c_.devices.size()]; }

  int index_;
  const PipelineConfig& c_;
  const EngineSpec& spec_;
  SlotRing& ring_;
  std::vector<course::PinnedBuffer<std::uint8_t>>& slots_;
  Shared& shared_;
  // Declared in destruction order's reverse: sets (buffers, graphs) go before the engine and
  // the streams.
  std::unique_ptr<course::Stream> compute_, copy_;
  std::unique_ptr<Engine> engine_;
  std::vector<BufferSet> sets_;
  std::unique_ptr<course::Event> epoch_;
  Clock::time_point epoch_host_{};
  std::size_t out_elems_ = 0;
  lesson08::OutputSpec out_{};
  std::string stage_ = "start";
  std::int64_t frame_lo_ = -1, frame_hi_ = -1;
};

double process_cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

}  // namespace

// ------------------------------------------------------------ 3. the producer, run_pipeline

namespace {
// config.devices against the devices there are, after validate() (which makes no CUDA call):
// an ordinal past the last device is refused here, naming the valid range, before any thread
// starts or anything is allocated.
void check_device_ordinals(const PipelineConfig& config) {
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  validate_devices(config, count);
}

// The engine spec against the config: its input shape (validate_engine_shape) and type.
void validate_engine(const PipelineConfig& config, const EngineSpec& engine) {
  validate_engine_shape(config, engine.shape);
  if (engine.input_dtype != config.input_dtype) {
    throw std::invalid_argument(
        std::string("the engine's input tensor is ") + lesson08::to_string(engine.input_dtype) +
        ", the pipeline's letterbox writes " + lesson08::to_string(config.input_dtype) +
        ": set PipelineConfig::input_dtype to the engine's");
  }
}
}  // namespace

RunReport run_pipeline(const PipelineConfig& config, const EngineSpec& engine) {
  validate(config);
  validate_engine(config, engine);
  if (!engine.make) throw std::invalid_argument("run_pipeline: the EngineSpec has no factory");
  check_device_ordinals(config);

  const Camera camera(config);
  SlotRing ring(config.queue_depth, config.backpressure);
  // The pinned slots: allocated on the first device, before any thread (pinned memory is
  // usable from every device of a process with unified addressing).
  CUDA_CHECK(cudaSetDevice(config.devices.front()));
  std::vector<course::PinnedBuffer<std::uint8_t>> slots;
  // Portable: pinned for every device's context, not only the current one (workers may run on
  // other GPUs).
  for (int i = 0; i < config.queue_depth; ++i) {
    slots.emplace_back(max_frame_bytes(config), cudaHostAllocPortable);
  }

  // Each slot holds the frame it was last given (a worker only reads it), so the producer
  // updates it in place: the previous frame's boxes back to background, the new boxes drawn
  // (SyntheticVideo::update). `held`: which video and frame each slot holds. The camera's
  // buffers hold a frame before serving starts (frame 0 here), as a capture device's do: a
  // first round of whole-frame draws inside the timed run would make the first frames late.
  std::vector<std::pair<const SyntheticVideo*, std::int64_t>> held(slots.size());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const SyntheticVideo& first = camera.video(0);
    first.render(0, slots[i].data(), first.row_bytes());
    held[i] = {&first, 0};
  }

  Shared shared;
  std::int64_t produced = 0;
  std::vector<double> draw_us, acquire_us, late_us;  // the producer's (read after it is joined)
  double cpu0 = 0;
  std::vector<std::thread> threads;
  // Every thread is joined on every path, also when creating one throws.
  struct Joiner {
    std::vector<std::thread>& threads;
    SlotRing& ring;
    ~Joiner() {
      ring.abort();
      for (std::thread& t : threads) {
        if (t.joinable()) t.join();
      }
    }
  };
  std::vector<std::unique_ptr<Worker>> workers;  // outlive the threads (Joiner below)
  {
    Joiner joiner{threads, ring};
    for (int w = 0; w < config.workers; ++w) {
      workers.push_back(std::make_unique<Worker>(w, config, engine, ring, slots, shared));
    }
    for (auto& w : workers) threads.emplace_back(std::ref(*w));
    {  // the start barrier: every worker warmed up (or failed)
      std::unique_lock<std::mutex> lock(shared.mutex);
      shared.cv.wait(lock, [&] { return shared.ready >= config.workers || shared.failed; });
    }
    // Another pipeline's start line (lesson 11's replicas); an exception from it stops this run
    // (the joiner aborts the ring and joins the workers).
    if (!shared.failed && config.before_serving) config.before_serving();
    {
      std::lock_guard<std::mutex> lock(shared.mutex);
      shared.start = Clock::now();
    }
    cpu0 = process_cpu_s();
    threads.emplace_back([&] {
      try {
        NvtxRange range("producer");
        for (std::int64_t k = 0; k < config.frames; ++k) {
          Clock::time_point due{};
          if (config.rate_fps > 0) {  // open loop: the camera does not wait for us
            due = shared.start + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(k / config.rate_fps));
            std::this_thread::sleep_until(due);
          }
          const Clock::time_point acquire_start = Clock::now();
          const std::optional<int> slot = ring.acquire();
          if (!slot) return;  // aborted
          const Clock::time_point draw_start = Clock::now();
          {
            NvtxRange r("draw frame");
            const SyntheticVideo& video = camera.video(k);
            auto& [held_video, held_frame] = held[static_cast<std::size_t>(*slot)];
            video.update(k, held_video == &video ? held_frame : -1, slots[*slot].data(),
                         video.row_bytes());
            held_video = &video;
            held_frame = k;
          }
          const Clock::time_point drawn = Clock::now();
          // A frame is captured when it is complete, as a camera or a decoder stamps it, so the
          // drawing is not latency. Closed loop: now. Open loop: when it would have been
          // complete had its drawing started when it was due; a producer that starts late (a
          // full ring under the block policy, or the previous draw overrunning) makes it late,
          // and that lateness counts, as queueing in front of the pipeline does.
          const Clock::time_point captured =
              config.rate_fps > 0 ? due + (drawn - draw_start) : drawn;
          draw_us.push_back(us_between(draw_start, drawn));
          acquire_us.push_back(us_between(acquire_start, draw_start));
          if (config.rate_fps > 0) late_us.push_back(us_between(due, draw_start));
          ring.publish(*slot, k, captured);
          ++produced;
        }
        ring.close();
      } catch (const std::exception& e) {
        shared.fail(std::string("producer: ") + e.what(), produced, "produce", ring);
      }
    });
    // Wait for the end: every worker leaves when the ring is finished or aborted.
    for (std::size_t i = 0; i < threads.size(); ++i) threads[i].join();
    // Joiner's destructor finds nothing left to join.
  }
  RunReport report;
  report.cpu_s = process_cpu_s() - cpu0;
  if (shared.failed) {
    throw PipelineError(shared.error, shared.error_frame, shared.error_stage);
  }
  report.results = std::move(shared.results);
  report.trace = std::move(shared.trace);
  report.dropped = ring.dropped();
  report.produced = produced;
  report.draw_us = std::move(draw_us);
  report.acquire_us = std::move(acquire_us);
  report.late_us = std::move(late_us);
  report.graph_captures = shared.graph_captures;
  report.graph_updates = shared.graph_updates;
  report.graph_reinstantiations = shared.graph_reinstantiations;
  // Wall time: the start barrier (warm-up done) to the last thread's exit (the last result).
  report.wall_s = 1e-6 * us_between(shared.start, Clock::now());
  return report;
}

// ------------------------------------------------------------------------------ test gates

namespace {
// One thread: announces that it holds the stream, then polls the host's flag (mapped pinned
// memory: volatile, so every read goes to the host's memory) until it is set or the guard's
// cycles have passed, and writes which. __threadfence_system makes each write visible to the
// host before the next step.
__global__ void stream_gate_kernel(int* shared, long long guard_cycles) {
  volatile int* flag = shared;
  volatile int* state = shared + 1;
  *state = static_cast<int>(StreamGate::State::holding);
  __threadfence_system();
  const long long start = clock64();
  int outcome = static_cast<int>(StreamGate::State::timed_out);
  while (clock64() - start < guard_cycles) {
    if (*flag != 0) {
      outcome = static_cast<int>(StreamGate::State::opened);
      break;
    }
  }
  *state = outcome;
  __threadfence_system();
}
}  // namespace

StreamGate::StreamGate(double guard_s) {
  if (!(std::isfinite(guard_s) && guard_s > 0)) {
    throw std::invalid_argument("StreamGate: guard_s must be finite and > 0 seconds");
  }
  int device = 0, clock_khz = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device));  // peak, kHz
  guard_cycles_ = static_cast<long long>(guard_s * clock_khz * 1e3);
  shared_ = course::PinnedBuffer<int>(2, cudaHostAllocMapped);
  shared_[0] = 0;
  shared_[1] = static_cast<int>(State::not_started);
  CUDA_CHECK(
      cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_shared_), shared_.data(), 0));
}

void StreamGate::hold(cudaStream_t stream) {
  if (held_) throw std::logic_error("StreamGate::hold: a gate holds one stream once");
  held_ = true;
  stream_gate_kernel<<<1, 1, 0, stream>>>(device_shared_, guard_cycles_);
  CUDA_CHECK_LAUNCH();
}

void StreamGate::open() {
  volatile int* flag = shared_.data();
  *flag = 1;
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

StreamGate::State StreamGate::state() const {
  const volatile int* state = shared_.data() + 1;
  return static_cast<State>(*state);
}

const char* to_string(StreamGate::State state) {
  switch (state) {
    case StreamGate::State::not_started:
      return "not started";
    case StreamGate::State::holding:
      return "holding";
    case StreamGate::State::opened:
      return "opened";
    case StreamGate::State::timed_out:
      return "timed out (its guard fired: nobody opened it in time)";
  }
  return "unknown";
}

// ------------------------------------------------- 4. the serial tutorial loop, measurements

RunReport run_serial_tutorial(const PipelineConfig& config, const EngineSpec& spec) {
  PipelineConfig c = config;
  c.batch = 1;
  c.workers = 1;
  c.resize_at = -1;  // one frame size: the tutorial loop is the baseline, not the resize study
  validate(c);
  validate_engine(c, spec);
  check_device_ordinals(c);
  bind_worker_device(c.devices.front());
  const SyntheticVideo video(c.frame_width, c.frame_height, c.num_classes, c.format);
  std::vector<std::uint8_t> frame(video.frame_bytes());  // pageable, as in most tutorials
  course::Stream stream;
  std::unique_ptr<Engine> engine = spec.make(0);
  const lesson08::OutputSpec out = engine->output_spec();
  const Letterbox lb =
      course::make_letterbox(c.frame_width, c.frame_height, c.input_width, c.input_height);
  course::DeviceBuffer<std::uint8_t> d_frame(video.frame_bytes());
  const bool half = c.input_dtype == lesson08::DType::f16;
  course::DeviceBuffer<std::uint8_t> input(static_cast<std::size_t>(3) * c.input_height *
                                           c.input_width * dtype_bytes(c.input_dtype));
  __half* in16 = reinterpret_cast<__half*>(input.data());
  float* in32 = reinterpret_cast<float*>(input.data());
  course::DeviceBuffer<float> output(out.elements());
  lesson08::GpuPostprocessor post(out, lb, c.post);
  const lesson06::ImageView view{d_frame.data(), c.frame_width, c.frame_height, 3,
                                 static_cast<std::size_t>(c.frame_width) * 3};
  const lesson06::Nv12View nv12_view =
      nv12_view_of(d_frame.data(), FrameSize{c.frame_width, c.frame_height, c.format});
  RunReport report;
  const Clock::time_point start = Clock::now();
  const double cpu0 = process_cpu_s();
  for (std::int64_t k = 0; k < c.frames; ++k) {
    NvtxRange range("serial frame");
    const Clock::time_point draw_start = Clock::now();
    // The buffer holds frame k - 1: updated in place, as the pipeline's producer does.
    video.update(k, k - 1, frame.data(), video.row_bytes());
    const Clock::time_point captured = Clock::now();  // complete: the camera's timestamp
    report.draw_us.push_back(us_between(draw_start, captured));
    // Pageable: the driver stages the copy through its own pinned buffer. On the copy's stream,
    // not with cudaMemcpy: for pageable -> device, cudaMemcpy may return once the source is
    // staged, before the DMA has landed (Runtime API, "API synchronization behavior"), and it
    // runs on the legacy default stream, which does not order work on a non-blocking stream such
    // as `stream`. Written with cudaMemcpy, this loop's letterbox read 7 of 400 frames before
    // they had arrived on the H200 (wrong boxes, the tutorial bug this lesson exists to show).
    CUDA_CHECK(cudaMemcpyAsync(d_frame.data(), frame.data(), frame.size(), cudaMemcpyHostToDevice,
                               stream));
    if (c.format == FrameFormat::nv12 && half) {
      lesson06::letterbox_nv12_v5(nv12_view, in16, c.input_width, c.input_height,
                                  lesson06::YuvMatrix::bt601, {}, stream);
    } else if (c.format == FrameFormat::nv12) {
      lesson06::letterbox_nv12_v5(nv12_view, in32, c.input_width, c.input_height,
                                  lesson06::YuvMatrix::bt601, {}, stream);
    } else if (half) {  // lesson 06's FP16 output is its batched v6 (here a batch of one)
      lesson06::letterbox_v6_batched({view}, in16, c.input_width, c.input_height, {}, stream);
    } else {
      lesson06::letterbox_v3_vec4(view, in32, c.input_width, c.input_height, {}, stream);
    }
    engine->set_batch(1);
    engine->set_input(input.data());
    engine->set_output(output.data());
    engine->set_batch_frames(&k, 1);
    if (!engine->enqueue(stream)) {
      throw PipelineError("serial loop, frame " + std::to_string(k) +
                              ", stage engine: Engine::enqueue returned false",
                          k, "engine");
    }
    post.enqueue(output.data(), out.elements(), stream);
    stream.synchronize();
    FrameResult r;
    r.frame = k;
    r.worker = 0;
    r.batch = 1;
    r.detections = post.result().detections;
    r.latency_us = us_between(captured, Clock::now());
    report.results.push_back(std::move(r));
  }
  report.produced = c.frames;
  report.cpu_s = process_cpu_s() - cpu0;
  report.wall_s = 1e-6 * us_between(start, Clock::now());
  return report;
}

double measure_pinned_h2d_gbps(std::size_t bytes, int reps) {
  if (bytes == 0 || reps < 1) {
    throw std::invalid_argument("measure_pinned_h2d_gbps: expected bytes >= 1 and reps >= 1");
  }
  course::PinnedBuffer<std::uint8_t> host(bytes);
  course::DeviceBuffer<std::uint8_t> device(bytes);
  std::memset(host.data(), 1, bytes);
  course::Stream stream;
  std::vector<double> gbps;
  for (int r = 0; r < reps + 1; ++r) {  // the first is a warm-up
    const float ms = course::time_on_stream_ms(stream, [&] {
      CUDA_CHECK(
          cudaMemcpyAsync(device.data(), host.data(), bytes, cudaMemcpyHostToDevice, stream));
    });
    if (r > 0) gbps.push_back(static_cast<double>(bytes) / (ms * 1e-3) * 1e-9);
  }
  return percentile(gbps, 50);
}

double measure_gpu_us_per_frame(const PipelineConfig& config, const EngineSpec& spec, int batch,
                                int reps, int streams) {
  PipelineConfig c = config;
  c.batch = batch;
  c.queue_depth = std::max(c.queue_depth, batch);
  c.resize_at = -1;  // the first frame size
  validate(c);
  validate_engine(c, spec);
  if (reps < 1) throw std::invalid_argument("measure_gpu_us_per_frame: reps must be >= 1");
  if (streams < 1 || streams > 64) {
    throw std::invalid_argument("measure_gpu_us_per_frame: streams must be in [1, 64], got " +
                                std::to_string(streams));
  }
  check_device_ordinals(c);
  bind_worker_device(c.devices.front());
  const SyntheticVideo video(c.frame_width, c.frame_height, c.num_classes, c.format);
  // One lane per stream, as one worker's compute side: its stream, engine and buffers.
  struct Lane {
    course::Stream stream;
    std::unique_ptr<Engine> engine;
    BufferSet set;
    course::Event joined{cudaEventDisableTiming};
  };
  std::vector<std::unique_ptr<Lane>> lanes;
  std::vector<std::uint8_t> host(video.frame_bytes());
  const std::vector<FrameSize> sizes(static_cast<std::size_t>(batch),
                                     FrameSize{c.frame_width, c.frame_height, c.format});
  for (int l = 0; l < streams; ++l) {
    auto lane = std::make_unique<Lane>();
    lane->engine = spec.make(l);
    const lesson08::OutputSpec out = lane->engine->output_spec();
    BufferSet& set = lane->set;
    allocate_buffer_set(set, c, out, spec.input_dtype);
    set.graphs.resize(static_cast<std::size_t>(batch) + 1);
    for (int i = 0; i < batch; ++i) {  // real frames, so that the engine and NMS do real work
      video.render(i, host.data(), video.row_bytes());
      CUDA_CHECK(cudaMemcpy(set.frames.data() + i * set.frame_stride, host.data(), host.size(),
                            cudaMemcpyHostToDevice));
    }
    const std::size_t out_elems = out.elements();
    Engine& engine = *lane->engine;
    cudaStream_t stream = lane->stream;
    enqueue_device_work(set, engine, c, sizes, out_elems, stream, false);  // warm-up
    lane->stream.synchronize();
    if (c.graphs) {
      set.graphs[batch].capture(
          stream, [&] { enqueue_device_work(set, engine, c, sizes, out_elems, stream, false); });
    }
    lanes.push_back(std::move(lane));
  }
  const std::size_t out_elems = lanes.front()->engine->output_spec().elements();
  // Back to back: no stream idles between batches, so the interval is GPU busy time (plus the
  // gaps the host's launches cannot hide, which the pipeline pays too). With several streams
  // they start together (they wait for an event of the first) and the first waits for all.
  course::Event fork(cudaEventDisableTiming);
  cudaStream_t first = lanes.front()->stream;
  const float ms = course::time_on_stream_ms(first, [&] {
    CUDA_CHECK(cudaEventRecord(fork, first));
    for (auto& lane : lanes) {
      cudaStream_t s = lane->stream;
      if (s != first) CUDA_CHECK(cudaStreamWaitEvent(s, fork, 0));
    }
    for (int r = 0; r < reps; ++r) {  // round robin, as N workers' launches interleave
      for (auto& lane : lanes) {
        cudaStream_t s = lane->stream;
        if (c.graphs) {
          lane->set.graphs[batch].launch(s);
        } else {
          enqueue_device_work(lane->set, *lane->engine, c, sizes, out_elems, s, false);
        }
      }
    }
    for (auto& lane : lanes) {
      cudaStream_t s = lane->stream;
      if (s == first) continue;
      CUDA_CHECK(cudaEventRecord(lane->joined, s));
      CUDA_CHECK(cudaStreamWaitEvent(first, lane->joined, 0));
    }
  });
  return 1e3 * ms / (static_cast<double>(reps) * batch * streams);
}

double measure_host_us_per_frame(const PipelineConfig& config, int reps) {
  if (reps < 1) throw std::invalid_argument("measure_host_us_per_frame: reps must be >= 1");
  const SyntheticVideo video(config.frame_width, config.frame_height, config.num_classes,
                             config.format);
  // A ring of queue_depth pinned slots, filled in turn as the producer fills them: each update
  // finds the frame queue_depth before it (the first round draws whole frames and is not
  // counted). Sustained, as a bound must be: the time of reps x 10 updates back to back,
  // divided, not a median of single calls.
  const int depth = std::max(1, config.queue_depth);
  std::vector<course::PinnedBuffer<std::uint8_t>> slots;
  for (int i = 0; i < depth; ++i) slots.emplace_back(video.frame_bytes());
  const std::size_t pitch = video.row_bytes();
  for (int r = 0; r < depth; ++r) video.update(r, -1, slots[r].data(), pitch);
  const int n = 10 * reps;
  const Clock::time_point t0 = Clock::now();
  for (int r = depth; r < depth + n; ++r)
    video.update(r, r - depth, slots[r % depth].data(), pitch);
  return us_between(t0, Clock::now()) / n;
}

}  // namespace lesson09
