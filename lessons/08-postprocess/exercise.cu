// Lesson 08 exercises. Replace each TODO body, then run
//   make check LESSON=08
// until every test passes (one exercise at a time:
//   build/lessons/08-postprocess/lesson08_exercise_tests "[ex2]").
//
// Each stub's comment is its contract (postprocess.cuh declares the functions, with the same
// contracts); README.md has folded hints. The solutions are in solutions.cuh: try first. No test
// checks the text of an exception in these exercises, only its type.
//
// Helpers you may call: mul_rn, is_finite, unletterbox_box, kMaxTopK (postprocess.cuh),
// CUDA_CHECK_LAUNCH (common/cuda_check.hpp). postprocess.cu's kFullMask and kWarpSize are
// private to it: define your own here (0xffffffffu and 32) if exercise 4 needs them.
//
// Exercises 1-3 and 5 are __host__ __device__ functions: the CPU tests call them directly, and
// the kernels in postprocess.cu call them on the GPU (in this build, postprocess.cu is compiled
// with relocatable device code so that its kernels can call functions defined in this file). A
// device function cannot throw, so these stubs fail by returning wrong answers.
#include <stdexcept>

#include "common/cuda_check.hpp"
#include "postprocess.cuh"

namespace lesson08 {

// ---------------------------------------------------------------------------- exercise 1
// [ex1] Intersection over union of two boxes (x1, y1, x2, y2) in continuous coordinates:
// intersection area / (area_a + area_b - intersection area), with no "+1" (a box from x1 = 0 to
// x2 = 2 is 2 wide). Disjoint or merely touching boxes give 0; a union of zero area (two
// degenerate boxes) gives 0, not NaN. Symmetric to the bit: iou(a, b) == iou(b, a).
// Host and device must give the same bits: every product through mul_rn (postprocess.cuh),
// never a plain a * b, which nvcc may fuse with an addition into one FMA on the device.
// Tests: hand-computed cases, symmetry and a double-precision IoU on random boxes (CPU); the
// CPU NMS against a double-precision NMS; GPU == CPU bit for bit on 100,000 pairs (GPU).
__host__ __device__ float iou(const Box& a, const Box& b) {
  (void)a;
  (void)b;
  return 0.0f;  // TODO(exercise 1): nothing ever overlaps, so NMS keeps every box
}

// ---------------------------------------------------------------------------- exercise 2
// [ex2] Decode candidate i (0 <= i < N = spec.num_candidates, C = spec.num_classes) of a
// detector output, a dense float tensor in one of two layouts:
//   yolov5  N rows of 5 + C: cx, cy, w, h, objectness, C class scores (row i from i * (5 + C));
//   yolov8  4 + C rows of N: cx, cy, w, h, C class scores, attribute k of candidate i at
//           output[k * N + i].
// Returns whether the candidate is kept, and then fills *out:
//   class_id  the best class score's class: on a tie the lower class; a NaN class score never
//             wins, wherever it sits;
//   score     objectness x best class score, through mul_rn (yolov5); the best class score
//             (yolov8);
//   box       corners (cx - w/2, cy - h/2, cx + w/2, cy + h/2) in network-input pixels, mapped
//             to the source image with unletterbox_box(box, lb);
//   index     i.
// Kept when score > conf_threshold (strictly) and the score and cx, cy, w, h are all finite
// (no NaN, no +-inf). yolov5: when objectness <= conf_threshold the candidate is rejected without
// reading its class scores. Preconditions, not checked: C >= 1, the tensor complete, lb from
// make_letterbox, out non-null; *out is not needed when it returns false.
// Tests: YOLOv5 rows and YOLOv8 columns by hand, the strict threshold, NaN and infinite boxes
// and scores, NaN class scores in every position, tied classes, a double-precision decode of
// generated outputs, and the generator's ground truth coming back (CPU, and the GPU pipeline
// against the CPU reference).
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
// [ex3] One 64-bit word of the NMS v2 mask. Boxes are in score order; row_box is the box at
// position `row`, cols[0 .. col_count) the boxes at positions col_start .. col_start +
// col_count - 1 (col_count <= 64). Bit k of the result is set when row_box suppresses cols[k]:
//   col_start + k > row (only a box earlier in score order suppresses), and
//   the two have the same class_id (unless class_agnostic), and
//   iou(row_box.box, cols[k].box) > iou_threshold (strictly).
// Bits k >= col_count are 0.
// Tests: bits against a double-precision IoU on tile pairs; class-aware, only later boxes,
// strictly above the threshold (CPU); GPU NMS against the CPU reference (GPU).
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
// [ex4] The k largest values of each row of `values`, a rows x cols row-major matrix in device
// memory (no NaN), on the GPU: write the kernel here and launch it from topk_rows.
// Out: top_values and top_indices (device, rows x k): row r's k best values and their column
//      indices, in order: value descending, the lower index first on ties. `values` is left
//      unchanged. Enqueued on `stream` (asynchronous); rows == 0 launches nothing.
// Errors: unless rows >= 0, cols >= 1 and 1 <= k <= min(cols, kMaxTopK):
//      std::invalid_argument, before any CUDA call; CudaError if the launch fails.
// Tests: the errors (CPU); against std::partial_sort with ties, and softmax then top-k as a
// classification head (GPU); on a GPU `make check` runs it under racecheck and synccheck too.
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
// [ex5] Where image b's part of each batch buffer starts, in elements (not bytes). The batch
// buffers hold their images one after the other, with these sizes per image:
//   output      the tensor:       N x image.attributes() floats (attributes: 5 + C or 4 + C)
//   keys        dense keys:       N
//   candidates  candidate slots:  capacity
//   mask        NMS mask:         capacity x mask_stride words
//   detections  results:          max_detections
// b >= 0; nothing is checked. The batched kernels take every image's pointers from this, so a
// wrong offset is the "only image 0 is right" bug (which the stub has).
// Tests: hand-computed offsets, and sizes whose products overflow 32 bits (40,000 images of
// 65,536 slots x 1024 words) (CPU); the batched GPU pipeline image by image (GPU).
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
