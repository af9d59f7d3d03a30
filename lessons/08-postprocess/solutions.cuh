// Lesson 08: the exercise solutions. Read them after you have tried.
//
// Not compiled on its own: postprocess.cu includes this file at its end, in the lesson build only,
// so the solutions share its translation unit (its helpers, and the kernels that call them). The
// exercise build (make check LESSON=08) compiles postprocess.cu with LESSON_EXERCISE_BUILD defined,
// which leaves this file out, and exercise.cu supplies the same functions instead.
#pragma once

namespace lesson08 {

// Exercise 1.
__host__ __device__ float iou(const Box& a, const Box& b) {
  const float iw = fmaxf(0.0f, fminf(a.x2, b.x2) - fmaxf(a.x1, b.x1));
  const float ih = fmaxf(0.0f, fminf(a.y2, b.y2) - fmaxf(a.y1, b.y1));
  const float inter = mul_rn(iw, ih);
  const float area_a = mul_rn(a.x2 - a.x1, a.y2 - a.y1);
  const float area_b = mul_rn(b.x2 - b.x1, b.y2 - b.y1);
  const float uni = area_a + area_b - inter;  // without mul_rn, nvcc would fuse this into FMAs
  return uni > 0.0f ? inter / uni : 0.0f;
}

// Exercise 2.
__host__ __device__ bool decode_candidate(const float* output, const OutputSpec& spec, int i,
                                          float conf_threshold, const Letterbox& lb,
                                          Detection* out) {
  const int num_classes = spec.num_classes;
  float cx, cy, w, h, score;
  int best = 0;
  if (spec.layout == Layout::yolov5) {
    // A row per candidate: this thread reads 5 (or 5 + C) consecutive floats.
    const float* row =
        output + static_cast<std::size_t>(i) * static_cast<std::size_t>(5 + num_classes);
    const float objectness = row[4];
    if (!(objectness > conf_threshold)) return false;  // exact: objectness x class <= objectness
    float best_class = row[5];
    for (int c = 1; c < num_classes; ++c) {
      // Strict: the lower class wins a tie. A NaN so far is replaced by anything, and a NaN
      // never compares greater: a NaN class score never wins, whichever class it is.
      if (row[5 + c] > best_class || best_class != best_class) {
        best_class = row[5 + c];
        best = c;
      }
    }
    score = mul_rn(objectness, best_class);
    cx = row[0];
    cy = row[1];
    w = row[2];
    h = row[3];
  } else {
    // A channel per attribute: neighbouring threads read neighbouring floats (coalesced).
    const std::size_t n = static_cast<std::size_t>(spec.num_candidates);
    const float* column = output + i;
    score = column[4 * n];
    for (int c = 1; c < num_classes; ++c) {
      const float s = column[(4 + static_cast<std::size_t>(c)) * n];
      if (s > score || score != score) {  // as above: a NaN class score never wins
        score = s;
        best = c;
      }
    }
    cx = column[0];
    cy = column[n];
    w = column[2 * n];
    h = column[3 * n];
  }
  if (!(score > conf_threshold)) return false;
  // NaN would pass every clamp below unchanged, and inf in w minus inf in cx makes a NaN corner.
  if (!is_finite(score) || !is_finite(cx) || !is_finite(cy) || !is_finite(w) || !is_finite(h)) {
    return false;
  }
  const float half_w = mul_rn(0.5f, w), half_h = mul_rn(0.5f, h);
  out->box = unletterbox_box({cx - half_w, cy - half_h, cx + half_w, cy + half_h}, lb);
  out->score = score;
  out->class_id = best;
  out->index = i;
  return true;
}

// Exercise 5 (before 3 in this file only because it is short).
__host__ __device__ SliceOffsets slice_offsets(const OutputSpec& image, int b, int capacity,
                                               int mask_stride, int max_detections) {
  const std::size_t i = static_cast<std::size_t>(b);
  const std::size_t n = static_cast<std::size_t>(image.num_candidates);
  const std::size_t cap = static_cast<std::size_t>(capacity);
  // Every product in size_t: a batch of 32 YOLOv5 outputs is 68.5 M floats, and the mask of a
  // batch of 32 images with 65,536 slots each is far beyond 2^31 words.
  return {i * n * static_cast<std::size_t>(image.attributes()), i * n, i * cap,
          i * cap * static_cast<std::size_t>(mask_stride),
          i * static_cast<std::size_t>(max_detections)};
}

// Exercise 3.
__host__ __device__ std::uint64_t nms_mask_word(const Detection& row_box, int row,
                                                const Detection* cols, int col_start, int col_count,
                                                float iou_threshold, bool class_agnostic) {
  std::uint64_t bits = 0;
  for (int k = 0; k < col_count; ++k) {
    const Detection& c = cols[k];
    if (col_start + k > row && (class_agnostic || c.class_id == row_box.class_id) &&
        iou(row_box.box, c.box) > iou_threshold) {
      bits |= std::uint64_t{1} << k;
    }
  }
  return bits;
}

// Exercise 4: top-k, one block per row, k rounds of a block-wide argmax. Round r looks only at
// the elements ranked after round r-1's pick in the order (value desc, index asc), so nothing
// needs to be marked or copied: the input stays read-only. O(k x cols / threads) per row: fine
// for the k <= 64 a classifier wants (a sort wins for large k).
namespace {
constexpr int kTopkThreads = 256;

__device__ bool ranks_before(float v, int i, float other_v, int other_i) {
  return v > other_v || (v == other_v && i < other_i);
}

__global__ void __launch_bounds__(kTopkThreads)
    topk_kernel(const float* __restrict__ values, int cols, int k, float* __restrict__ top_values,
                int* __restrict__ top_indices) {
  __shared__ float warp_value[kWarpSize];
  __shared__ int warp_index[kWarpSize];
  const float* row = values + static_cast<std::size_t>(blockIdx.x) * cols;
  const int lane = threadIdx.x & (kWarpSize - 1), warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  float last_value = INFINITY;  // round 0: everything ranks after (+inf, -1)
  int last_index = -1;
  for (int r = 0; r < k; ++r) {
    float best_value = -INFINITY;
    int best_index = INT_MAX;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
      const float v = row[j];
      if (ranks_before(last_value, last_index, v, j) &&
          ranks_before(v, j, best_value, best_index)) {
        best_value = v;
        best_index = j;
      }
    }
    for (int d = kWarpSize / 2; d > 0; d >>= 1) {
      const float other_value = __shfl_xor_sync(kFullMask, best_value, d);
      const int other_index = __shfl_xor_sync(kFullMask, best_index, d);
      if (ranks_before(other_value, other_index, best_value, best_index)) {
        best_value = other_value;
        best_index = other_index;
      }
    }
    if (lane == 0) {
      warp_value[warp] = best_value;
      warp_index[warp] = best_index;
    }
    __syncthreads();
    best_value = warp_value[0];
    best_index = warp_index[0];
    for (int w = 1; w < warps; ++w) {
      if (ranks_before(warp_value[w], warp_index[w], best_value, best_index)) {
        best_value = warp_value[w];
        best_index = warp_index[w];
      }
    }
    __syncthreads();  // warp_value is rewritten next round
    if (threadIdx.x == 0) {
      top_values[static_cast<std::size_t>(blockIdx.x) * k + r] = best_value;
      top_indices[static_cast<std::size_t>(blockIdx.x) * k + r] = best_index;
    }
    last_value = best_value;
    last_index = best_index;
  }
}
}  // namespace

void topk_rows(const float* values, int rows, int cols, int k, float* top_values, int* top_indices,
               cudaStream_t stream) {
  if (rows < 0 || cols < 1 || k < 1 || k > cols || k > kMaxTopK) {
    throw std::invalid_argument(
        "topk_rows: expected rows >= 0, cols >= 1 and 1 <= k <= min(cols, " +
        std::to_string(kMaxTopK) + "), got rows = " + std::to_string(rows) +
        ", cols = " + std::to_string(cols) + ", k = " + std::to_string(k));
  }
  if (rows == 0) return;
  if (values == nullptr || top_values == nullptr || top_indices == nullptr) {
    throw std::invalid_argument("topk_rows: null pointer");
  }
  topk_kernel<<<rows, kTopkThreads, 0, stream>>>(values, cols, k, top_values, top_indices);
  CUDA_CHECK_LAUNCH();
}

}  // namespace lesson08
