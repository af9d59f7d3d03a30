// Lesson 02 exercises. Replace each TODO, then run `make check LESSON=02`: the tests tagged [exN]
// pass when exercise N is done. memory_types.cuh documents what each function must do (shapes,
// units, errors). The reference solutions are in solutions.cuh: try first, compare after.
//
// Helpers you may call, all declared in memory_types.cuh: check_image_view (ex 2),
// check_transpose_args, transpose_grid, transpose_block, kTileDim, kBlockRows (ex 3),
// StagingBuffer::slot / slot_free / chunk_bytes (ex 4); CUDA_CHECK and CUDA_CHECK_LAUNCH from
// common/cuda_check.hpp. memory_types.cu's `require` is private to it: throw
// std::invalid_argument yourself.
#include "memory_types.cuh"

#include <cstring>
#include <stdexcept>

namespace lesson02 {

// ---------------------------------------------------------------- Exercise 1: classify a pointer
//
// clang-format off
// 1a. Map cudaPointerAttributes::type to a MemoryKind:
//       cudaMemoryTypeUnregistered -> pageable    (plain malloc/new/std::vector memory)
//       cudaMemoryTypeHost         -> pinned_host (cudaHostAlloc, cudaMallocHost, cudaHostRegister)
//       cudaMemoryTypeDevice       -> device      (cudaMalloc, cudaMallocPitch, cudaMallocAsync,
//                                                  __device__ / __constant__ symbols)
//       cudaMemoryTypeManaged      -> managed     (cudaMallocManaged)
//     and throw std::invalid_argument for anything else (a cast int that is none of these).
// clang-format on
MemoryKind memory_kind_from(const cudaPointerAttributes& attributes) {
  (void)attributes;
  throw std::logic_error("TODO(exercise 1a): map attributes.type to a MemoryKind");
}

// 1b. Reject nullptr with std::invalid_argument before asking CUDA. Then call
//     cudaPointerGetAttributes (wrapped in CUDA_CHECK) and fill every PointerInfo field from it.
//     Hint: since CUDA 11, a pointer CUDA knows nothing about is not an error; it reports
//     cudaMemoryTypeUnregistered.
PointerInfo classify_pointer(const void* ptr) {
  (void)ptr;
  throw std::logic_error("TODO(exercise 1b): classify_pointer with cudaPointerGetAttributes");
}

// ------------------------------------------- Exercise 2: a region of interest with cudaMemcpy2D
//
// 2a. Where does the ROI start, and what are cudaMemcpy2D's pitch, width and height?
//     - validate the image with check_image_view(image);
//     - reject a negative ROI size, and a ROI that is not inside the image (careful: x + width
//       can overflow an int; compare in long long);
//     - the ROI's first byte is roi.y rows and roi.x pixels in: a row is pitch_bytes long, a
//       pixel `channels` bytes;
//     - the source pitch is the IMAGE's pitch (the ROI's rows are rows of the image), and the
//       width to copy is in BYTES, not pixels.
Copy2DPlan plan_roi_copy(const HostImageView& image, const Roi& roi) {
  (void)image;
  (void)roi;
  throw std::logic_error("TODO(exercise 2a): plan the cudaMemcpy2D of a ROI");
}

// 2b. Plan; return early for an empty ROI (either side 0: nothing to copy, whatever dst is);
//     check that dst is exactly plan.width_bytes x plan.height (std::invalid_argument
//     otherwise); then one cudaMemcpy2DAsync: dst.data() with dst.pitch(), image.data +
//     plan.src_offset with plan.src_pitch.
void upload_roi(const HostImageView& image, const Roi& roi, PitchedImage& dst,
                cudaStream_t stream) {
  (void)image;
  (void)roi;
  (void)dst;
  (void)stream;
  throw std::logic_error("TODO(exercise 2b): upload_roi with cudaMemcpy2DAsync");
}

// ------------------------------------------------------------- Exercise 3: the padded transpose
//
// Copy transpose_v1_shared_tile_kernel from memory_types.cu and remove its bank conflict: give
// each tile row one extra float, so a column of the tile lands in 32 different banks
// (bank_conflict_ways(kTileDim + 1) == 1). Keep the bounds checks: rows and cols need not be
// multiples of 32. The launcher and transpose_v2_padded_attributes below are complete.
//
// What the tests check besides the values: the kernel's static shared memory is exactly
// kTileDim * (kTileDim + 1) floats (cudaFuncGetAttributes: an unpadded tile shows), and `make
// check` runs it under compute-sanitizer racecheck and synccheck on a GPU (a missing
// __syncthreads between the two phases, or one inside a bounds check, shows). The bank conflicts
// themselves are not counted: the padding is the observation.
__global__ void transpose_v2_padded_kernel(const float* in, float* out, int rows, int cols) {
  // TODO(exercise 3): stage a tile in __shared__ float tile[kTileDim][kTileDim + 1], then write
  // it out transposed. As it stands the kernel writes nothing, and the tests see that.
  (void)in;
  (void)out;
  (void)rows;
  (void)cols;
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

// ------------------------------------------- Exercise 4: upload through a pinned staging buffer
//
// Do by hand what cudaMemcpy does with pageable memory:
//   - bytes == 0: return. Null src or dst, or staging.empty(): std::invalid_argument.
//   - loop over chunks of at most staging.chunk_bytes(), using slot (chunk % kSlots) in turn:
//       wait for the slot's event (cudaEventSynchronize(staging.slot_free(slot))): the copy
//       engine may still be reading it (for the first use of a slot the event was never
//       recorded, and waiting on such an event returns at once: no special case needed);
//       std::memcpy the chunk into staging.slot(slot);
//       cudaMemcpyAsync it to dst + offset on `stream`;
//       cudaEventRecord(staging.slot_free(slot), stream): "this slot is free once we get here".
//   - do NOT synchronise the stream inside the loop: with two slots the CPU fills one while the
//     DMA drains the other. (Synchronising every chunk is correct too, and slower: try both.)
// The tests hold the stream up for 100 ms before your upload (a refill that did not wait then
// overwrites a slot whose copy has not started), and, through CUPTI, check the order of your
// calls: each slot's event is recorded AFTER the copy that reads the slot, and waited on before
// the slot's next copy. (Recording it before the copy passes a plain run: the copy is quick.)
void upload_via_staging(const void* src, void* dst, std::size_t bytes, StagingBuffer& staging,
                        cudaStream_t stream) {
  (void)src;
  (void)dst;
  (void)bytes;
  (void)staging;
  (void)stream;
  throw std::logic_error("TODO(exercise 4): upload_via_staging with two pinned slots");
}

}  // namespace lesson02
