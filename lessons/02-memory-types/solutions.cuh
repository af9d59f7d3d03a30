// Lesson 02: the exercise solutions. Read them after you have tried.
//
// Not compiled on its own: memory_types.cu includes this file at its end, in the lesson build only,
// so the solutions share its translation unit (its helpers, and the kernels that call them). The
// exercise build (make check LESSON=02) compiles memory_types.cu with LESSON_EXERCISE_BUILD
// defined, which leaves this file out, and exercise.cu supplies the same functions instead.
#pragma once

namespace lesson02 {

// ---- Exercise 1: classify a pointer
MemoryKind memory_kind_from(const cudaPointerAttributes& attributes) {
  switch (attributes.type) {
    case cudaMemoryTypeUnregistered:
      return MemoryKind::pageable;
    case cudaMemoryTypeHost:
      return MemoryKind::pinned_host;
    case cudaMemoryTypeDevice:
      return MemoryKind::device;
    case cudaMemoryTypeManaged:
      return MemoryKind::managed;
  }
  throw std::invalid_argument("memory_kind_from: unknown cudaMemoryType " +
                              std::to_string(static_cast<int>(attributes.type)));
}

PointerInfo classify_pointer(const void* ptr) {
  require(ptr != nullptr, "classify_pointer: expected a non-null pointer");
  cudaPointerAttributes attributes{};
  // Since CUDA 11 a plain host pointer is not an error: it reports cudaMemoryTypeUnregistered.
  CUDA_CHECK(cudaPointerGetAttributes(&attributes, ptr));
  PointerInfo info;
  info.kind = memory_kind_from(attributes);
  info.device = attributes.device;
  info.device_pointer = attributes.devicePointer;
  info.host_pointer = attributes.hostPointer;
  return info;
}

// ---- Exercise 2: a region of interest, copied with cudaMemcpy2D
Copy2DPlan plan_roi_copy(const HostImageView& image, const Roi& roi) {
  check_image_view(image);
  require(roi.width >= 0 && roi.height >= 0, "plan_roi_copy: expected a ROI of width, height >= 0");
  require(roi.x >= 0 && roi.y >= 0 && static_cast<long long>(roi.x) + roi.width <= image.width &&
              static_cast<long long>(roi.y) + roi.height <= image.height,
          "plan_roi_copy: expected the ROI inside the " + std::to_string(image.width) + "x" +
              std::to_string(image.height) + " image");
  Copy2DPlan plan;
  const auto channels = static_cast<std::size_t>(image.channels);
  plan.src_offset = static_cast<std::size_t>(roi.y) * image.pitch_bytes + roi.x * channels;
  plan.src_pitch = image.pitch_bytes;  // the host image's pitch: the ROI's rows are image rows
  plan.width_bytes = roi.width * channels;
  plan.height = static_cast<std::size_t>(roi.height);
  return plan;
}

void upload_roi(const HostImageView& image, const Roi& roi, PitchedImage& dst,
                cudaStream_t stream) {
  const Copy2DPlan plan = plan_roi_copy(image, roi);
  // An empty ROI (either side 0) copies nothing, whatever dst is: an empty PitchedImage is 0x0
  // even when only one side was 0, so checking it against a 0x3 plan would refuse a valid call.
  if (plan.width_bytes == 0 || plan.height == 0) return;
  require(dst.width_bytes() == plan.width_bytes && dst.height() == plan.height,
          "upload_roi: expected a destination of roi.width*channels x roi.height bytes");
  CUDA_CHECK(cudaMemcpy2DAsync(dst.data(), dst.pitch(), image.data + plan.src_offset,
                               plan.src_pitch, plan.width_bytes, plan.height,
                               cudaMemcpyHostToDevice, stream));
}

// ---- Exercise 3: the padded tile
// v2: fixes v1's bank conflict. One extra column makes a tile row 33 words long, so element
// [i][k] is in bank (33 i + k) mod 32 = (i + k) mod 32: a column's 32 elements now sit in 32
// different banks and the column read is a single conflict-free access.
__global__ void transpose_v2_padded_kernel(const float* in, float* out, int rows, int cols) {
  __shared__ float tile[kTileDim][kTileDim + 1];
  int c = blockIdx.x * kTileDim + threadIdx.x;
  int r = blockIdx.y * kTileDim + threadIdx.y;
  for (int j = 0; j < kTileDim; j += kBlockRows) {
    if (r + j < rows && c < cols)
      tile[threadIdx.y + j][threadIdx.x] = in[static_cast<std::size_t>(r + j) * cols + c];
  }
  __syncthreads();
  c = blockIdx.y * kTileDim + threadIdx.x;
  r = blockIdx.x * kTileDim + threadIdx.y;
  for (int j = 0; j < kTileDim; j += kBlockRows) {
    if (r + j < cols && c < rows)
      out[static_cast<std::size_t>(r + j) * rows + c] = tile[threadIdx.x][threadIdx.y + j];
  }
}

void transpose_v2_padded(const float* in, float* out, int rows, int cols, cudaStream_t stream) {
  check_transpose_args(in, out, rows, cols);
  if (rows == 0 || cols == 0) return;
  transpose_v2_padded_kernel<<<transpose_grid(rows, cols), transpose_block(), 0, stream>>>(
      in, out, rows, cols);
  CUDA_CHECK_LAUNCH();
}

cudaFuncAttributes transpose_v2_padded_attributes() {
  cudaFuncAttributes a{};
  CUDA_CHECK(cudaFuncGetAttributes(&a, transpose_v2_padded_kernel));
  return a;
}

// ---- Exercise 4: upload through a pinned staging buffer
void upload_via_staging(const void* src, void* dst, std::size_t bytes, StagingBuffer& staging,
                        cudaStream_t stream) {
  if (bytes == 0) return;
  require(src != nullptr && dst != nullptr, "upload_via_staging: expected non-null src and dst");
  require(!staging.empty(), "upload_via_staging: expected a non-empty StagingBuffer");
  const auto* from = static_cast<const unsigned char*>(src);
  auto* to = static_cast<unsigned char*>(dst);
  std::size_t done = 0;
  for (int chunk = 0; done < bytes; ++chunk) {
    const int slot = chunk % StagingBuffer::kSlots;
    const std::size_t n = std::min(staging.chunk_bytes(), bytes - done);
    // Wait only until the copy engine has drained this slot (its copy from kSlots chunks ago),
    // not for the whole stream: meanwhile it is reading the other slot.
    CUDA_CHECK(cudaEventSynchronize(staging.slot_free(slot)));
    std::memcpy(staging.slot(slot), from + done, n);
    CUDA_CHECK(cudaMemcpyAsync(to + done, staging.slot(slot), n, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaEventRecord(staging.slot_free(slot), stream));
    done += n;
  }
}

}  // namespace lesson02
