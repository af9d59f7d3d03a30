// Lesson 08 exercises. Replace each TODO body, then run
//   make check LESSON=08
// until every test passes (one exercise at a time:
//   build/lessons/08-postprocess/lesson08_exercise_tests "[ex2]").
//
// What each function must do is documented where it is declared, in postprocess.cuh; README.md
// has hints. The solutions are in solutions.cuh: try first.
//
// Helpers you may call: mul_rn, is_finite, unletterbox_box, kMaxTopK (postprocess.cuh),
// CUDA_CHECK_LAUNCH (common/cuda_check.hpp). postprocess.cu's kFullMask and kWarpSize are
// private to it: define your own here (0xffffffffu and 32) if exercise 4 needs them.
//
// Exercises 1-3 are __host__ __device__ functions: the CPU tests call them directly, and the
// kernels in postprocess.cu call them on the GPU (in this build, postprocess.cu is compiled with
// relocatable device code so that its kernels can call functions defined in this file). A
// device function cannot throw, so these stubs fail by returning wrong answers.
#include <stdexcept>

#include "common/cuda_check.hpp"
#include "postprocess.cuh"

namespace lesson08 {

// ---------------------------------------------------------------------------- exercise 1
// IoU of two boxes in continuous coordinates: intersection / (area_a + area_b - intersection).
// Hints:
// - The intersection's width is min(x2) - max(x1), but never below zero (disjoint boxes).
// - No "+1": a box from x1 = 0 to x2 = 2 is 2 wide.
// - A union of zero area gives 0 (not NaN).
// - Write the products with mul_rn(a, b), not a * b: on the GPU nvcc would otherwise fuse
//   `area_a + area_b` with a product into an FMA, the GPU would round differently from the CPU,
//   and the GPU == CPU tests would find the one pair in a million that lands on the threshold.
__host__ __device__ float iou(const Box& a, const Box& b) {
  (void)a;
  (void)b;
  return 0.0f;  // TODO(exercise 1): nothing ever overlaps, so NMS keeps every box
}

// ---------------------------------------------------------------------------- exercise 2
// Decode candidate i: confidence filter, argmax over classes, centre/size to corners, letterbox
// inverse (unletterbox_box, in letterbox_map.cuh).
// Hints:
// - yolov5: row i starts at output + i * (5 + C): cx, cy, w, h, objectness, C class scores.
//   Test the objectness against the threshold first (return false early), then take the best
//   class; score = mul_rn(objectness, best class score).
// - yolov8: attribute k of candidate i is at output[k * N + i]; the class scores are attributes
//   4 .. 4 + C - 1; score = the best class score.
// - "Best" with a strict >, scanning classes upwards: the lower class wins a tie. A NaN class
//   score never wins, in any position: a NaN best-so-far is replaced by the next class.
// - Kept when score > conf_threshold (strictly), and rejected when the score or any of cx, cy,
//   w, h is NaN or +-inf: test them with is_finite (postprocess.cuh).
// - Corners: cx -/+ w/2 (write w/2 as mul_rn(0.5f, w)), then unletterbox_box(box, lb).
__host__ __device__ bool decode_candidate(const float* output, const OutputSpec& spec, int i,
                                          float conf_threshold, const Letterbox& lb,
                                          Detection* out) {
  (void)output;
  (void)spec;
  (void)i;
  (void)conf_threshold;
  (void)lb;
  (void)out;
  return false;  // TODO(exercise 2): every candidate is rejected
}

// ---------------------------------------------------------------------------- exercise 3
// One 64-bit word of the NMS v2 mask: bit k says "box `row` suppresses box col_start + k".
// Hints:
// - Only a box that comes earlier in score order suppresses: col_start + k > row.
// - Class-aware: only boxes of the same class (unless class_agnostic).
// - IoU strictly greater than the threshold.
// - Shift a 64-bit one: std::uint64_t{1} << k (1 << k is an int: undefined for k >= 31).
__host__ __device__ std::uint64_t nms_mask_word(const Detection& row_box, int row,
                                                const Detection* cols, int col_start, int col_count,
                                                float iou_threshold, bool class_agnostic) {
  (void)row_box;
  (void)row;
  (void)cols;
  (void)col_start;
  (void)col_count;
  (void)iou_threshold;
  (void)class_agnostic;
  return 0;  // TODO(exercise 3): nothing suppresses anything
}

// ---------------------------------------------------------------------------- exercise 4
// Top-k of each row, on the GPU: write the kernel here and launch it from topk_rows.
// Hints:
// - One block per row. A simple plan: k rounds; in each, a block-wide argmax over the row, where
//   "larger" means (value desc, index asc) and only elements ranked after the previous round's
//   pick take part (so you never modify the input).
// - Block argmax: __shfl_xor_sync within each warp (value AND index), then one value per warp in
//   shared memory, then combine them; __syncthreads between rounds.
// - Validate first: rows >= 0, cols >= 1, 1 <= k <= min(cols, kMaxTopK), else
//   std::invalid_argument. rows == 0 launches nothing. CUDA_CHECK_LAUNCH() after the launch.
void topk_rows(const float* values, int rows, int cols, int k, float* top_values, int* top_indices,
               cudaStream_t stream) {
  (void)values;
  (void)rows;
  (void)cols;
  (void)k;
  (void)top_values;
  (void)top_indices;
  (void)stream;
  throw std::logic_error("TODO(exercise 4): topk_rows is not written yet");
}

// ---------------------------------------------------------------------------- exercise 5
// Where image b's part of each batch buffer starts (postprocess.cuh lists the five buffers and
// their per-image sizes). The batched kernels take every image's pointers from this function.
// Hints:
// - Image b's tensor starts after b whole tensors: b x N x attributes floats (attributes() is
//   5 + C or 4 + C, whichever the layout has).
// - Each buffer's offset is b times that buffer's per-image size; the mask's per-image size is
//   capacity x mask_stride words.
// - Compute in std::size_t: B x N x attributes overflows an int for a batch of YOLOv5 outputs.
__host__ __device__ SliceOffsets slice_offsets(const OutputSpec& image, int b, int capacity,
                                               int mask_stride, int max_detections) {
  (void)image;
  (void)b;
  (void)capacity;
  (void)mask_stride;
  (void)max_detections;
  return {0, 0, 0, 0, 0};  // TODO(exercise 5): every image reads image 0 ("only image 0 is right")
}

}  // namespace lesson08
