// Lesson 08: detector postprocessing on the GPU, and the classification head.
//
// The engine's raw output (8.6 MB for YOLOv5 at 640x640) becomes a short list of boxes in the
// source image without leaving the GPU; only the list (a few KB) is copied to the host.
//
//   output tensor --decode--> candidates --top-K--> sorted --NMS--> detections --D2H--> host
//   (N candidates)  1 thread    (bounded     (only on  (score desc,  (greedy,       (pinned,
//                   each        buffer,       overflow) index asc)    class-aware)   one copy)
//                               atomic)
//
// Kernels, in the order postprocess.cu teaches them:
//   decode_kernel              one thread per candidate: confidence filter, argmax, corners,
//                              letterbox inverse; warp-aggregated atomic compaction into a
//                              bounded buffer, plus a dense array of score keys
//   select_top_k_kernel        only when more candidates passed than the buffer holds: radix
//                              select of the K best (score desc, index asc) so that the
//                              survivors do not depend on thread order
//   rank_sort_kernel           sort by (score desc, index asc): each element counts how many
//                              keys beat it
//   nms_v1_fast_kernel         NMS v1, "Fast NMS": a box is dropped if ANY higher-scoring box
//                              of its class overlaps it; one pass, fully parallel, NOT greedy
//   nms_v2_mask_kernel         NMS v2, exact greedy: IoU of 64x64 tiles into 64-bit masks...
//   nms_v2_reduce_kernel       ...then one block walks the masks in score order on the GPU
//   softmax_kernel, topk       the classification head
//
// Semantics (README.md explains them; the tests pin them): IoU in continuous coordinates, no
// "+1"; a candidate is kept when score > conf_threshold; NMS is greedy, class-aware by default, in
// order of (score desc, index asc), and suppresses when IoU > iou_threshold (strictly). GPU results
// equal the CPU reference (reference.cpp) exactly: the per-element functions below are shared
// by both, and written so that the device rounds exactly like the host (no FMA contraction).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/memory.hpp"
#include "letterbox_map.cuh"

namespace lesson08 {

// ---------------------------------------------------------------- tensors and detections

// The two output layouts of YOLO-style detectors. The caller says which; a tensor does not.
//   yolov5: [N, 5 + C] row-major; row n = cx, cy, w, h, objectness, C class scores.
//           score = objectness x class score. N = 25200 for a 640x640 input.
//   yolov8: [4 + C, N] channel-major; channel k holds attribute k of every candidate
//           (cx, cy, w, h, C class scores); no objectness: score = class score. N = 8400.
// Boxes are centre/size in network-input pixels; scores are probabilities in [0, 1] (the
// exported models apply the sigmoid).
enum class Layout { yolov5, yolov8 };
const char* to_string(Layout layout);

struct OutputSpec {
  Layout layout = Layout::yolov8;
  int num_candidates = 0;  // N >= 0
  int num_classes = 0;     // C >= 1

  // Values per candidate: 5 + C (yolov5) or 4 + C (yolov8).
  __host__ __device__ int attributes() const {
    return (layout == Layout::yolov5 ? 5 : 4) + num_classes;
  }
  std::size_t elements() const {
    return static_cast<std::size_t>(num_candidates) * static_cast<std::size_t>(attributes());
  }
};

// Throws std::invalid_argument unless N >= 0, C >= 1 and N x attributes < 2^31 (the kernels
// index the tensor with 32-bit offsets per candidate).
void validate(const OutputSpec& spec);

// One detection: a box in source-image pixels (continuous coordinates), its score and class,
// and `index`, the candidate's position in the output tensor (ties in score are broken by it,
// lower first, so it must be unique within one NMS call).
struct Detection {
  Box box;
  float score;
  int class_id;
  int index;
};

// The header of the result the GPU writes and the host copies back (with the detections after
// it, in one copy).
struct ResultHeader {
  int num_above_threshold;  // candidates with score > conf_threshold (decode) / boxes given (NMS)
  int num_dropped;          // above threshold but beyond max_candidates (the K best were kept)
  int num_detections;       // detections written, <= max_detections
  int reserved;
};

// ---------------------------------------------------- per-element math (host and device)

// x * y rounded once, never fused with a following add. On the device nvcc contracts a * b + c
// into one FMA (one rounding instead of two); __fmul_rn is never contracted. On the host GCC
// contracts too whenever the target has FMA (aarch64, -march=haswell); the plain x * y below
// stays unfused because the build sets -ffp-contract=off for host code (top-level CMakeLists.txt;
// a project of your own that includes this header needs it as well). Then the device rounds
// like the host and GPU results equal the CPU reference bit for bit.
__host__ __device__ inline float mul_rn(float x, float y) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(x, y);
#else
  return x * y;
#endif
}

// Is x a number other than +-inf? (std::isfinite is not a device function.)
__host__ __device__ inline bool is_finite(float x) {
#ifdef __CUDA_ARCH__
  return isfinite(x);
#else
  return std::isfinite(x);
#endif
}

// The bits of a float (for keys and radix select).
__host__ __device__ inline std::uint32_t float_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

// The sort key of a detection: a larger key comes first. Ordering (score desc, index asc) as
// one unsigned 64-bit comparison: the high word is the score's bits made monotonic (negative
// floats have their bits flipped, positive ones get the sign bit set; -0 counts as +0), the low
// word is ~index. Unique when indices are unique, so any sort gives the same order.
__host__ __device__ inline std::uint64_t sort_key(float score, int index) {
  const std::uint32_t bits = float_bits(score == 0.0f ? 0.0f : score);
  const std::uint32_t ordered = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (static_cast<std::uint64_t>(ordered) << 32) |
         static_cast<std::uint32_t>(~static_cast<std::uint32_t>(index));
}

// Does a come before b in NMS order (score desc, index asc)?
__host__ __device__ inline bool nms_before(const Detection& a, const Detection& b) {
  return sort_key(a.score, a.index) > sort_key(b.score, b.index);
}

// EXERCISE 1. Intersection over union of two boxes in continuous coordinates (no "+1"):
// intersection area / (area_a + area_b - intersection). Boxes that only touch have IoU 0; a
// union of zero area (two degenerate boxes) gives 0. Symmetric: iou(a, b) == iou(b, a) exactly.
// Products through mul_rn, so that host and device round the same way.
__host__ __device__ float iou(const Box& a, const Box& b);

// EXERCISE 2. Decodes candidate `i` (0 <= i < N) of a detector output laid out as `spec` says.
// Returns false when its score is not above conf_threshold, or when its score or any of cx, cy,
// w, h is NaN or +-inf (a broken engine output: no clamp can place a NaN box in the image).
// Otherwise fills *out:
//   - class_id: argmax over the C class scores (the lower class on a tie). A NaN class score
//     never wins, wherever it sits: it is skipped (when all C are NaN the score is NaN, and the
//     candidate is rejected);
//   - score: objectness x best class score (yolov5) or the best class score (yolov8);
//   - box: (cx - w/2, cy - h/2, cx + w/2, cy + h/2) in network-input pixels, mapped back to the
//     source image with unletterbox_box (clamped to the image);
//   - index: i.
// yolov5 shortcut: when objectness <= conf_threshold the class scores are not read at all: with
// class scores in [0, 1], objectness x class <= objectness, so the candidate cannot pass (this is
// what YOLOv5's own NMS does first, and it saves reading 80 of every 85 floats).
// Preconditions, not checked (it runs per thread; validate(spec) and validate(lb) do it once):
// spec.num_classes >= 1, output holds all spec.elements() = N x (5 + C) or (4 + C) x N floats
// of the layout, lb from make_letterbox, out non-null.
__host__ __device__ bool decode_candidate(const float* output, const OutputSpec& spec, int i,
                                          float conf_threshold, const Letterbox& lb,
                                          Detection* out);

// EXERCISE 3. One word of the NMS v2 bit mask: bit k is set when box `row` (the row_box, at
// position `row` in score order) suppresses the column box cols[k], at position col_start + k:
//   col_start + k > row  (only a higher-scoring box can suppress a lower one), and
//   the two have the same class_id (unless class_agnostic), and
//   iou(row_box.box, cols[k].box) > iou_threshold.
// cols holds col_count <= 64 boxes; bits k >= col_count are 0.
__host__ __device__ std::uint64_t nms_mask_word(const Detection& row_box, int row,
                                                const Detection* cols, int col_start, int col_count,
                                                float iou_threshold, bool class_agnostic);

// ------------------------------------------------------------------ the GPU postprocess

enum class NmsVersion {
  v1_fast_parallel,   // Fast NMS: parallel, removes a superset of what greedy NMS removes
  v2_bitmask_greedy,  // exact greedy NMS: 64x64 IoU bit masks, one pass over them on the GPU
  v3_bitmask_smem,    // v2, with the whole mask staged in shared memory for the greedy pass when
                      // it fits (about 1280 boxes on an H200): the pass's serial chain of global
                      // loads becomes shared-memory loads; v2's pass otherwise. Same result as v2
};
const char* to_string(NmsVersion version);

struct PostprocessConfig {
  float conf_threshold = 0.25f;  // keep a candidate when score > conf_threshold; in [0, 1]
  float iou_threshold = 0.45f;   // suppress when IoU > iou_threshold; in [0, 1]
  bool class_agnostic = false;   // false: boxes of different classes never suppress each other
  int max_candidates = 4096;     // capacity of the candidate buffer (the top-K by score go in)
  int max_detections = 300;      // at most this many detections (the best, in NMS order)
  NmsVersion nms = NmsVersion::v2_bitmask_greedy;
};

// Largest max_candidates (and largest box count for NMS): the v2 bit mask takes n x n / 8 bytes
// (512 MiB at this size), and the v2 pass keeps one bit per box in shared memory.
constexpr int kMaxNmsBoxes = 1 << 16;

// Throws std::invalid_argument unless both thresholds are in [0, 1] (NaN is not) and
// max_candidates and max_detections are in [1, kMaxNmsBoxes].
void validate(const PostprocessConfig& config);

// Throws std::invalid_argument("<name> must be in [0, 1], got ...") unless 0 <= t <= 1.
void validate_threshold(float t, const char* name);

// Throws std::invalid_argument unless the letterbox has a source size >= 1x1, a positive finite
// scale and finite padding: what make_letterbox returns (a default Letterbox{} has scale 0).
void validate(const Letterbox& letterbox);

// The input every NMS entry point (CPU and GPU) checks: throws std::invalid_argument, the
// message prefixed with `who`, if a score is NaN (it would compare false with every score and
// break the order) or an index is negative or repeats (ties in score are broken by it, so a
// repeat would make the result depend on the input order).
void validate_nms_input(const std::vector<Detection>& boxes, const char* who);

// What the postprocess returns to the host.
struct PostprocessResult {
  std::vector<Detection> detections;  // in NMS order: score desc, index asc
  int num_above_threshold = 0;        // candidates with score > conf_threshold
  int num_dropped = 0;                // of those, how many did not fit in max_candidates
};

// A move-only owner of an instantiated CUDA graph (cudaGraphExec_t).
class GraphExec {
 public:
  GraphExec() = default;
  ~GraphExec() { reset(); }
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  GraphExec(GraphExec&& other) noexcept : exec_(other.exec_) { other.exec_ = nullptr; }
  GraphExec& operator=(GraphExec&& other) noexcept {
    if (this != &other) {
      reset();
      exec_ = other.exec_;
      other.exec_ = nullptr;
    }
    return *this;
  }
  cudaGraphExec_t get() const noexcept { return exec_; }
  explicit operator bool() const noexcept { return exec_ != nullptr; }
  // Captures what enqueue() puts on `stream` and instantiates it (replaces any previous graph).
  // If enqueue() throws, or the capture fails (cudaStreamEndCapture reports an error, thrown as
  // CudaError), the capture is ended first (the stream is usable again, and no error is left for
  // cudaGetLastError) and the graph already installed is kept. The same for recapture().
  template <class F>
  void capture(cudaStream_t stream, F&& enqueue);
  // Captures again (new addresses, new kernel arguments, e.g. for a new input size) and
  // installs the result with cudaGraphExecUpdate into the executable graph already there: no
  // new instantiation, which is what the update exists for (Programming Guide, "CUDA Graphs",
  // "Updating Instantiated Graphs"). The update is refused when the topology changed (other
  // nodes, other edges) or a node breaks one of the API's limits (a kernel node's function may
  // change, since CUDA 11.2, but not its owning context/device); then, or with nothing
  // instantiated yet, it instantiates anew. Returns true when the executable graph was updated
  // in place.
  template <class F>
  bool recapture(cudaStream_t stream, F&& enqueue);
  void launch(cudaStream_t stream) const;

 private:
  void reset() noexcept;
  template <class F>
  static cudaGraph_t record(cudaStream_t stream, F&& enqueue);
  // Takes ownership of `graph`: updates exec_ from it (when try_update and there is one) or
  // instantiates it. Returns true when updated in place.
  bool install(cudaGraph_t graph, bool try_update);
  cudaGraphExec_t exec_ = nullptr;
};

// The whole detector postprocess for one output tensor, with every buffer allocated once (in
// the constructor), so that per frame there is no allocation, no host synchronisation between
// the steps, and one small device-to-host copy at the end into pinned memory:
//
//   GpuPostprocessor post(spec, letterbox, config);     // allocates; validates (may throw)
//   post.enqueue(d_output, spec.elements(), stream);    // memset, 4-5 kernels, one copy
//   CUDA_CHECK(cudaStreamSynchronize(stream));
//   PostprocessResult r = post.result();
//
// Or capture the same work once as a CUDA graph and replay it for each frame (the input pointer
// is baked into the graph: write each frame's output to the same device buffer):
//   post.capture_graph(d_output, spec.elements(), stream);  then per frame:
//   post.launch_graph(stream)
//
// Throws std::invalid_argument for a bad spec, letterbox or config (before allocating anything).
class GpuPostprocessor {
 public:
  GpuPostprocessor(const OutputSpec& spec, const Letterbox& letterbox,
                   const PostprocessConfig& config);

  // output: device pointer to the tensor, `elements` floats. Throws std::invalid_argument if
  // elements != spec.elements() or output is null (with N > 0). Asynchronous on `stream`.
  void enqueue(const float* output, std::size_t elements, cudaStream_t stream);
  void capture_graph(const float* output, std::size_t elements, cudaStream_t stream);
  void launch_graph(cudaStream_t stream) const;  // throws std::logic_error before capture_graph

  // The result of the last enqueue/launch_graph. Call after the stream has finished it.
  PostprocessResult result() const;
  // enqueue + cudaStreamSynchronize + result.
  PostprocessResult run(const float* output, std::size_t elements, cudaStream_t stream);

  const OutputSpec& spec() const { return spec_; }
  const PostprocessConfig& config() const { return config_; }

 private:
  OutputSpec spec_;
  Letterbox letterbox_;
  PostprocessConfig config_;
  int mask_stride_ = 0;                             // 64-bit words per mask row
  int staged_words_ = 0;                            // v3: mask words shared memory holds
  course::DeviceBuffer<std::uint32_t> keys_;        // [N] score bits, 0 = below threshold
  course::DeviceBuffer<Detection> candidates_;      // [max_candidates], compaction order
  course::DeviceBuffer<Detection> sorted_;          // [max_candidates], NMS order
  course::DeviceBuffer<std::uint64_t> mask_;        // v2: [max_candidates][mask_stride_]
  course::DeviceBuffer<std::uint8_t> keep_;         // v1: [max_candidates] keep flags
  course::DeviceBuffer<std::uint8_t> result_;       // ResultHeader + Detection[max_detections]
  course::PinnedBuffer<std::uint8_t> host_result_;  // its pinned mirror
  GraphExec graph_;
};

// NMS alone, on boxes already in device memory (the benchmark's "NMS of 10,000 boxes"):
// sort by (score desc, index asc), then v1 or v2. The result stays on the device until
// download() (one synchronising copy of the header, one of the kept boxes).
class GpuNms {
 public:
  // capacity: the most boxes one call takes, in [1, kMaxNmsBoxes]; throws std::invalid_argument.
  GpuNms(int capacity, NmsVersion version);
  // boxes: device array of n Detection in any order with unique `index` values, 0 <= n <=
  // capacity. Throws std::invalid_argument for a bad n or threshold. Asynchronous.
  void enqueue(const Detection* boxes, int n, float iou_threshold, bool class_agnostic,
               cudaStream_t stream);
  // The kept boxes in NMS order, host memory (synchronises `stream`: pass the stream of the last
  // enqueue). Empty before the first enqueue. Throws CudaError if a copy or the NMS failed.
  std::vector<Detection> download(cudaStream_t stream) const;

 private:
  int capacity_;
  NmsVersion version_;
  int mask_stride_;
  int staged_words_ = 0;  // v3
  course::DeviceBuffer<Detection> sorted_;
  course::DeviceBuffer<std::uint64_t> mask_;
  course::DeviceBuffer<std::uint8_t> keep_;
  course::DeviceBuffer<std::uint8_t> result_;  // ResultHeader + Detection[capacity]
};

// For tests: iou(a[i], b[i]) for every i, computed on the GPU by the same iou() the kernels call
// (the exercise's, in the exercise build). GPU == CPU bit for bit is the promise that mul_rn
// keeps; a plain a * b lets nvcc fuse products into FMAs, and this shows it. Synchronous.
// Throws std::invalid_argument if a.size() != b.size().
std::vector<float> iou_gpu(const std::vector<Box>& a, const std::vector<Box>& b);

// Convenience for tests: copies `boxes` to the device, runs GpuNms, returns the kept boxes.
// Throws std::invalid_argument if an index repeats, a score is NaN, the threshold is outside
// [0, 1] or there are more than kMaxNmsBoxes boxes.
std::vector<Detection> nms_gpu(const std::vector<Detection>& boxes, float iou_threshold,
                               bool class_agnostic, NmsVersion version);

// ---------------------------------------- a whole batch, FP16 input, TensorRT's NMS layout
// postprocess.cu section 9 (README "A batch in one launch sequence").
//
// A batched engine writes one tensor [B, per-image layout]: image b's output starts at element
// b x spec.image.elements() and has exactly the single-image layout above ([N, 5 + C] or
// [4 + C, N]). The batched postprocess runs the single-image kernels' code with one more grid
// dimension choosing the image (blockIdx.y, or .z for the 2-D NMS mask grid): one launch per
// step for the whole batch, never one per image. Every image has its own candidate buffer,
// header (counts), sort, mask and result, so a box can only ever suppress, displace or be
// counted with boxes of its own image; each image reports its own dropped count.

// The element type of the engine's output. f16: IEEE binary16 (`__half`), what FP16 engines
// write. Rounding rule: every binary16 value is exactly representable in binary32, so each
// element is first widened exactly (__half2float; no rounding happens), and then the same FP32
// decode runs on the widened values. The result is therefore exactly the FP32 path's result on
// the widened tensor, bit for bit (tests pin it). The widening is a separate, memory-bound pass
// into a float scratch buffer (B x elements floats) so that the decode stays one function.
enum class DType { f32, f16 };
const char* to_string(DType dtype);

struct BatchSpec {
  OutputSpec image;  // the layout of one image's output
  int batch = 1;     // B >= 1
  std::size_t elements() const { return static_cast<std::size_t>(batch) * image.elements(); }
};

// EXERCISE 5. Where image b's part of each batch buffer starts, in elements (not bytes), for a
// batch of images laid out as `image` says, each with `capacity` candidate slots, a v2 mask of
// mask_stride words per slot and room for max_detections results:
//   output      the tensor:        B x (N x attributes) floats, image after image
//   keys        dense score keys:  B x N
//   candidates  candidate buffer:  B x capacity   (the sorted buffer has the same layout)
//   mask        NMS mask:          B x (capacity x mask_stride)
//   detections  results:           B x max_detections
// The batched kernels compute every image's pointers from these (slices_of, postprocess.cu), so
// a wrong offset here is the "only image 0 is right" bug. 0 <= b; nothing is checked.
struct SliceOffsets {
  std::size_t output, keys, candidates, mask, detections;
};
__host__ __device__ SliceOffsets slice_offsets(const OutputSpec& image, int b, int capacity,
                                               int mask_stride, int max_detections);

// Throws std::invalid_argument unless 1 <= batch <= 65535 (a grid dimension), the image spec is
// valid (validate(OutputSpec)) and the whole tensor has fewer than 2^40 elements.
void validate(const BatchSpec& spec);

// Where TensorRT's EfficientNMS_TRT plugin writes its four outputs (device pointers), K =
// max_output_boxes (here: PostprocessConfig::max_detections):
//   num_detections [B, 1]     int32   valid detections of image b, <= K
//   detection_boxes [B, K, 4] float   (x1, y1, x2, y2) corners (the plugin's BoxCorner output)
//   detection_scores [B, K]   float
//   detection_classes [B, K]  int32
// Entries past num_detections[b] are zero (boxes, scores and classes), as the plugin leaves them
// (it memsets all four outputs to 0 before its kernels run). Boxes are in source-image pixels
// (this lesson undoes the letterbox; the plugin returns whatever coordinates it was given).
// The plugin sorts the candidates that pass the score threshold and keeps the top 4096 for its
// NMS kernel; here that cap is PostprocessConfig::max_candidates (default 4096: the same cap),
// with the drop counted per image instead of silently.
struct EfficientNmsOutputs {
  int* num_detections = nullptr;
  float* detection_boxes = nullptr;
  float* detection_scores = nullptr;
  int* detection_classes = nullptr;
};

// The same four tensors in host memory.
struct EfficientNmsHost {
  int batch = 0, max_output_boxes = 0;
  std::vector<int> num_detections;      // [B]
  std::vector<float> detection_boxes;   // [B * K * 4]
  std::vector<float> detection_scores;  // [B * K]
  std::vector<int> detection_classes;   // [B * K]
};

// The host-side conversion (the CPU reference of the GPU layout kernel): image b's first
// min(size, K) detections, zero padding after them. Throws std::invalid_argument if
// max_output_boxes < 1.
EfficientNmsHost to_efficient_nms(const std::vector<PostprocessResult>& results,
                                  int max_output_boxes);

// The other way, what a consumer of the plugin's outputs does: image b's detections read from
// the four tensors in host memory (pointers to [batch, 1], [batch, K, 4], [batch, K] and
// [batch, K], any batch > image), in their order; `index` is the detection's rank k (the
// plugin's outputs carry no candidate index). Throws std::invalid_argument for a null pointer,
// K < 1, image < 0 or a count outside [0, K].
struct EfficientNmsView {
  int max_output_boxes = 0;
  const int* num_detections = nullptr;
  const float* detection_boxes = nullptr;
  const float* detection_scores = nullptr;
  const int* detection_classes = nullptr;
};
std::vector<Detection> detections_of(const EfficientNmsView& outputs, int image);

// One enqueue of a BatchedPostprocessor. The defaults: all B images, the constructor's
// letterboxes, the results copied to host memory.
struct BatchRun {
  // Images in this call, 1..B: an engine built for up to B images runs fewer when a dynamic
  // batcher sends a partial batch. 0 means B. `elements` must then be images x the image's.
  int images = 0;
  // A device array of `images` letterboxes used instead of the constructor's (a batch whose
  // frames changed size mid-stream). Read when the kernels run: it must stay valid and unchanged
  // until then, and for every replay of a CUDA graph that captured the call. Null: the
  // constructor's.
  const Letterbox* letterboxes = nullptr;
  // false: no copy to host memory, for a caller that reads the EfficientNMS tensors instead
  // (write_efficient_nms and its own copy); results() then throws until a call copies again.
  bool copy_results = true;
};

// The postprocess of a whole batch, every buffer allocated once:
//
//   BatchedPostprocessor post(spec, letterboxes, config);           // allocates; may throw
//   post.enqueue(d_output, spec.elements(), stream);                // memset, 5 kernels, 1 copy
//   CUDA_CHECK(cudaStreamSynchronize(stream));
//   std::vector<PostprocessResult> r = post.results();              // r[b]: image b
//
// letterboxes: one per image (B of them; images of one batch may come from different sources),
// or a single one that every image shares. NMS is greedy (config.nms v2 or v3, not v1);
// per image the result equals postprocess_cpu on that image's slice of the tensor.
// Device memory: per image N keys, 2 x max_candidates detections, a max_candidates^2 / 8 byte
// mask, and the result; plus B x elements floats of scratch when dtype is f16.
// Throws std::invalid_argument for a bad spec, config or letterbox, a letterbox count that is
// neither 1 nor B, or nms v1 (before allocating anything).
class BatchedPostprocessor {
 public:
  BatchedPostprocessor(const BatchSpec& spec, const std::vector<Letterbox>& letterboxes,
                       const PostprocessConfig& config, DType dtype = DType::f32);

  // output: device pointer to the batch's tensor, `elements` = images x spec.image.elements()
  // values of the constructor's dtype (the overload must match it; images = run.images, or B).
  // Throws std::invalid_argument for run.images outside [0, B], a wrong size, a null pointer or
  // the other dtype's overload. Asynchronous on `stream`.
  void enqueue(const float* output, std::size_t elements, cudaStream_t stream,
               const BatchRun& run = {});
  void enqueue(const __half* output, std::size_t elements, cudaStream_t stream,
               const BatchRun& run = {});

  // Writes the last enqueue's results in EfficientNMS_TRT's layout for its images (one kernel;
  // enqueue it on the same stream, after enqueue): [images, 1], [images, K, 4], [images, K],
  // [images, K] from the start of each tensor, K = config.max_detections. Throws
  // std::invalid_argument if a pointer is null, std::logic_error before any enqueue.
  // Asynchronous.
  void write_efficient_nms(const EfficientNmsOutputs& out, cudaStream_t stream) const;

  // The results of the last enqueue, one per image of it. Call after the stream has finished it.
  // Throws std::logic_error if the last enqueue did not copy them (BatchRun::copy_results).
  std::vector<PostprocessResult> results() const;
  // enqueue + cudaStreamSynchronize + results.
  std::vector<PostprocessResult> run(const float* output, std::size_t elements,
                                     cudaStream_t stream);

  const BatchSpec& spec() const { return spec_; }
  const PostprocessConfig& config() const { return config_; }

 private:
  void enqueue_f32(const float* output, int images, const Letterbox* letterboxes, bool copy_results,
                   cudaStream_t stream);
  BatchSpec spec_;
  int last_images_ = 0;        // images of the last enqueue (0: none yet)
  bool host_current_ = false;  // whether host_result_ is the last enqueue's
  PostprocessConfig config_;
  DType dtype_;
  int mask_stride_ = 0;
  int staged_words_ = 0;                            // v3
  course::DeviceBuffer<Letterbox> letterboxes_;     // [B]
  course::DeviceBuffer<float> widened_;             // f16: [B x elements]
  course::DeviceBuffer<std::uint32_t> keys_;        // [B][N]
  course::DeviceBuffer<Detection> candidates_;      // [B][max_candidates]
  course::DeviceBuffer<Detection> sorted_;          // [B][max_candidates]
  course::DeviceBuffer<std::uint64_t> mask_;        // [B][mask_stride][max_candidates]
  course::DeviceBuffer<std::uint8_t> result_;       // ResultHeader[B], Detection[B][max_det]
  course::PinnedBuffer<std::uint8_t> host_result_;  // its pinned mirror
};

// ------------------------------------------- CUB for large counts (sort and compaction)
// cub_baselines.cu (README "CUB: when the library wins"). The lesson's own sort (rank sort: one
// launch, O(n^2) independent comparisons, no temporary storage) and compaction (warp-aggregated
// atomicAdd, order decided by warp scheduling) against CUB's radix sort and ordered select.

enum class SortVersion {
  rank_sort,  // the lesson's rank_sort_kernel, one grid row per segment
  cub_radix,  // cub::DeviceRadixSort (1 segment) / cub::DeviceSegmentedRadixSort (a batch)
};
const char* to_string(SortVersion version);

// Sorts each segment of `in` into NMS order (sort_key descending: score desc, index asc).
// Layout: `segments` segments of `segment_capacity` detections each, in one array; segment s
// holds counts[s] valid detections at its start (counts: a device array, values clamped to the
// capacity, so the host never needs them). out has the same layout; only the first counts[s]
// of each segment are written. Indices must be unique within a segment.
// cub_radix sorts 64-bit keys (sort_key) with 32-bit positions as values, then gathers. With one
// segment it sorts the whole capacity (DeviceRadixSort takes its item count from the host; the
// padding gets key 0, which sorts last); with several it sorts [s x cap, s x cap + counts[s])
// per segment (DeviceSegmentedRadixSort reads the offsets from device memory).
// Throws std::invalid_argument unless 1 <= segment_capacity <= 2^24 and 1 <= segments <= 65535
// (and their product < 2^31).
class DetectionSorter {
 public:
  DetectionSorter(int segment_capacity, int segments, SortVersion version);
  // Asynchronous on `stream`. Throws std::invalid_argument for a null pointer.
  void enqueue(const Detection* in, const int* counts, Detection* out, cudaStream_t stream);
  std::size_t temp_storage_bytes() const { return temp_.size(); }

 private:
  int capacity_, segments_;
  SortVersion version_;
  course::DeviceBuffer<std::uint64_t> keys_in_, keys_out_;
  course::DeviceBuffer<int> values_in_, values_out_;
  course::DeviceBuffer<int> offsets_;  // begin[segments], end[segments]
  course::DeviceBuffer<std::uint8_t> temp_;
};

enum class CompactVersion {
  warp_atomic,  // one atomicAdd per warp (decode_kernel's compaction): order varies run to run
  cub_select,   // cub::DeviceSelect::If over the indices: ordered (index ascending)
};
const char* to_string(CompactVersion version);

// Stream compaction of the candidates that passed: every i in [0, n) with keys[i] != 0 (the dense
// key array decode writes) goes to out_indices, their number to *d_count (device). warp_atomic
// writes them in an order that depends on warp scheduling; cub_select in index order. out_indices
// holds n ints. Throws std::invalid_argument unless 0 <= n <= capacity, or for a null pointer.
class Compactor {
 public:
  Compactor(int capacity, CompactVersion version);  // capacity >= 1
  void enqueue(const std::uint32_t* keys, int n, int* out_indices, int* d_count,
               cudaStream_t stream);

 private:
  int capacity_;
  CompactVersion version_;
  course::DeviceBuffer<std::uint8_t> temp_;
};

namespace detail {
// postprocess.cu: the rank sort on segments (DetectionSorter's rank_sort version).
void enqueue_rank_sort_segments(const Detection* in, const int* counts, int capacity, int segments,
                                Detection* out, cudaStream_t stream);
}  // namespace detail

// -------------------------------------------------------------------- CPU reference (host)
// reference.cpp: straightforward loops over the same per-element functions.

// Sorts into NMS order: score desc, index asc (sort_key; -0 == +0, NaN scores sort by their
// bits). A strict order only when indices are unique; nothing is checked or thrown.
void sort_for_nms(std::vector<Detection>& boxes);

// Greedy NMS (the semantics at the top of this file): in NMS order, keep a box unless a kept box
// of the same class (any kept box when class_agnostic) has IoU > iou_threshold with it. Returns
// the kept boxes in NMS order. Equal to cv::dnn::NMSBoxes run per class (the tests check it).
// Throws std::invalid_argument if iou_threshold is outside [0, 1], a score is NaN or an index
// is negative or repeats (validate_nms_input), as nms_gpu does.
std::vector<Detection> nms_cpu(std::vector<Detection> boxes, float iou_threshold,
                               bool class_agnostic);

// Fast NMS (what v1 computes): drop a box if ANY higher box in NMS order (kept or not) of its
// class has IoU > iou_threshold with it. Throws as nms_cpu does.
std::vector<Detection> fast_nms_cpu(std::vector<Detection> boxes, float iou_threshold,
                                    bool class_agnostic);

// Decode + confidence filter + top-K: every candidate that passes, in NMS order, truncated to
// max_candidates. num_dropped = passing - kept. Throws std::invalid_argument if elements !=
// spec.elements(), output is null (with elements > 0), the spec or the letterbox is invalid
// (validate), conf_threshold is outside [0, 1] or max_candidates < 1.
struct DecodeResult {
  std::vector<Detection> candidates;
  int num_above_threshold = 0;
  int num_dropped = 0;
};
DecodeResult decode_cpu(const float* output, std::size_t elements, const OutputSpec& spec,
                        const Letterbox& letterbox, float conf_threshold, int max_candidates);

// The whole postprocess on the CPU: decode_cpu, then nms_cpu (or fast_nms_cpu for v1), then the
// first max_detections. What GpuPostprocessor must return. Throws std::invalid_argument for a
// bad config (validate) and whatever decode_cpu rejects.
PostprocessResult postprocess_cpu(const float* output, std::size_t elements, const OutputSpec& spec,
                                  const Letterbox& letterbox, const PostprocessConfig& config);

// The batched postprocess on the CPU: postprocess_cpu on each image's slice, with letterbox b
// (or the only one). What BatchedPostprocessor must return. Throws std::invalid_argument if
// elements != spec.elements(), the letterbox count is neither 1 nor B, or postprocess_cpu
// rejects an image.
std::vector<PostprocessResult> postprocess_batch_cpu(const float* output, std::size_t elements,
                                                     const BatchSpec& spec,
                                                     const std::vector<Letterbox>& letterboxes,
                                                     const PostprocessConfig& config);

// ------------------------------------------------------------------- classification head

// Largest k topk_rows accepts.
constexpr int kMaxTopK = 64;

// probs[r][c] = exp(logits[r][c] - max_r) / sum_c exp(logits[r][c] - max_r): softmax of each
// row of a rows x cols row-major matrix in device memory (subtracting the row maximum keeps
// exp() from overflowing; the result is the same). One block per row. Not in place: logits and
// probs must not overlap (the kernel reads through __restrict__ pointers). Throws
// std::invalid_argument for rows < 0, cols < 1, or a null pointer with rows > 0, before any CUDA
// call; CudaError if the launch fails. Asynchronous.
void softmax_rows(const float* logits, float* probs, int rows, int cols, cudaStream_t stream);

// EXERCISE 4. The k largest values of each row of a rows x cols row-major matrix in device
// memory, in order (value desc, index asc on ties): top_values and top_indices are rows x k.
// Values must not be NaN. Throws std::invalid_argument unless rows >= 0, cols >= 1 and
// 1 <= k <= min(cols, kMaxTopK). Asynchronous.
void topk_rows(const float* values, int rows, int cols, int k, float* top_values, int* top_indices,
               cudaStream_t stream);

// --------------------------------------------------------------- template implementation

template <class F>
cudaGraph_t GraphExec::record(cudaStream_t stream, F&& enqueue) {
  // ThreadLocal: only this thread's unsafe API calls (a cudaMalloc, a sync) break the capture;
  // anything the stream would not record raises an error instead of running eagerly.
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  // A failed call records its error as the thread's last error too, and so does ending an
  // invalidated capture: the exception reports the failure, so the last error is cleared
  // (cudaGetLastError), or the next CUDA_CHECK_LAUNCH would report it for a launch that worked.
  try {
    enqueue();
  } catch (...) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream, &partial);  // leave the stream usable, then report the error
    if (partial != nullptr) cudaGraphDestroy(partial);
    cudaGetLastError();
    throw;
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);  // ends it, even on failure
  if (ended != cudaSuccess) {  // e.g. invalidated by a call enqueue() made and did not check
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    course::check_cuda(ended, "cudaStreamEndCapture(stream, &graph)", __FILE__, __LINE__);
  }
  return graph;
}

template <class F>
void GraphExec::capture(cudaStream_t stream, F&& enqueue) {
  install(record(stream, enqueue), false);
}

template <class F>
bool GraphExec::recapture(cudaStream_t stream, F&& enqueue) {
  return install(record(stream, enqueue), true);
}

}  // namespace lesson08
