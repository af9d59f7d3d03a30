// Lesson 02 exercises. Replace each TODO, then run `make check LESSON=02`: the tests tagged [exN]
// pass when exercise N is done. Each stub's comment is its contract (memory_types.cuh declares
// the functions); README.md has folded hints, and solutions.cuh the answers: try first.
//
// Helpers you may call, all declared in memory_types.cuh: check_image_view (ex 2),
// check_transpose_args, transpose_grid, transpose_block, kTileDim, kBlockRows (ex 3),
// StagingBuffer::slot / slot_free / chunk_bytes (ex 4); CUDA_CHECK and CUDA_CHECK_LAUNCH from
// common/cuda_check.hpp. memory_types.cu's `require` is private to it: throw
// std::invalid_argument yourself. No test checks the text of an exception in these exercises,
// only its type.
#include "memory_types.cuh"

#include <cstring>
#include <stdexcept>

namespace lesson02 {

// ---------------------------------------------------------------- Exercise 1: classify a pointer
//
// 1a [ex1, CPU]. The MemoryKind of what cudaPointerGetAttributes reported in attributes.type:
// clang-format off
//       cudaMemoryTypeUnregistered -> pageable    (plain malloc/new/std::vector memory)
//       cudaMemoryTypeHost         -> pinned_host (cudaHostAlloc, cudaMallocHost, cudaHostRegister)
//       cudaMemoryTypeDevice       -> device      (cudaMalloc, cudaMallocPitch, cudaMallocAsync,
//                                                  __device__ / __constant__ symbols)
//       cudaMemoryTypeManaged      -> managed     (cudaMallocManaged)
// clang-format on
// Errors: any other value (an int cast to cudaMemoryType): std::invalid_argument.
MemoryKind memory_kind_from(const cudaPointerAttributes& attributes) {
  (void)attributes;
  throw std::logic_error("TODO(exercise 1a): map attributes.type to a MemoryKind");
}

// 1b [ex1]. What CUDA knows about `ptr`, any address (host, device, managed, or one CUDA never
// saw), from cudaPointerGetAttributes: every PointerInfo field filled, kind through
// memory_kind_from, device / device_pointer / host_pointer as CUDA reports them. A host pointer
// CUDA does not know is an answer (pageable), not an error. The [gpu] test classifies pageable,
// pinned, write-combined, registered, device, pitched, pool, managed and __constant__ memory.
// Errors: nullptr: std::invalid_argument, before any CUDA call; a failed query: CudaError.
PointerInfo classify_pointer(const void* ptr) {
  (void)ptr;
  throw std::logic_error("TODO(exercise 1b): classify_pointer with cudaPointerGetAttributes");
}

// ------------------------------------------- Exercise 2: a region of interest with cudaMemcpy2D
//
// 2a [ex2, CPU]. The arguments of the cudaMemcpy2D that copies `roi` (x, y, width, height in
// pixels) out of the host image `image` (width x height pixels of `channels` bytes, rows
// pitch_bytes apart):
//   src_offset   bytes from image.data to the ROI's first byte;
//   src_pitch    bytes from one ROI row to the next in the source;
//   width_bytes  bytes of one ROI row;
//   height       ROI rows.
// An empty ROI (width or height 0) inside the image is valid. Tested on a 641-pixel-wide BGR
// image with 2048-byte rows, a 7 x 5 grey one, and ROIs in the corners and at odd offsets.
// Errors: std::invalid_argument when check_image_view(image) rejects the image, when the ROI
// has a negative size, or when it does not lie inside the image, also where x + width (or
// y + height) is past INT_MAX (the tests pass x = INT_MAX).
Copy2DPlan plan_roi_copy(const HostImageView& image, const Roi& roi) {
  (void)image;
  (void)roi;
  throw std::logic_error("TODO(exercise 2a): plan the cudaMemcpy2D of a ROI");
}

// 2b [ex2]. Enqueue on `stream` the copy of `roi` of the host image into `dst`, which must be
// exactly roi.width * channels bytes by roi.height rows (its own pitch), with one
// cudaMemcpy2DAsync. An empty ROI (either side 0) copies nothing, and `dst` is then not
// checked (an empty PitchedImage reads 0 x 0 whichever side was 0). `dst` holds the ROI once
// `stream` has synchronised. The [gpu] test uses an odd width, 1 and 3 channels, odd offsets.
// Errors: std::invalid_argument for whatever plan_roi_copy rejects and for a `dst` of another
// size, before any copy; a failed copy: CudaError.
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
// [ex3, GPU]. out = the transpose of in: `in` is rows x cols floats, `out` cols x rows, both
// row-major device arrays, any shape (the tests use 33 x 31 and 513 x 1025: not multiples of
// 32). v1's kernel (transpose_v1_shared_tile_kernel, memory_types.cu) without its shared-memory
// bank conflict: the tile is padded, kTileDim + 1 floats per row, so that reading down a column
// of the tile touches 32 different banks (bank_conflict_ways(kTileDim + 1) == 1).
// Launch, fixed by transpose_v2_padded below (leave it and transpose_v2_padded_attributes as
// they are): transpose_grid(rows, cols) blocks of transpose_block() = kTileDim x kBlockRows
// threads, one block per kTileDim x kTileDim tile; arguments already checked.
// Checked besides the values: the kernel's static shared memory is exactly
// kTileDim * (kTileDim + 1) floats (cudaFuncGetAttributes: an unpadded tile shows), and on a GPU
// `make check` runs it under compute-sanitizer racecheck and synccheck (a missing barrier between
// the two phases, or one inside a bounds check, shows). The bank conflicts are not counted.
__global__ void transpose_v2_padded_kernel(const float* in, float* out, int rows, int cols) {
  // TODO(exercise 3). As it stands the kernel writes nothing, and the tests see that.
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
// [ex4]. Upload `bytes` from pageable host memory `src` to device memory `dst` through the pinned
// slots of `staging`, as cudaMemcpy does with pageable memory, made visible:
//   - chunk c is bytes [c * chunk_bytes(), ...) (the last one shorter) and goes through slot
//     c % StagingBuffer::kSlots: copied into staging.slot(slot) by the CPU, then from the slot to
//     dst on `stream` with cudaMemcpyAsync;
//   - after each copy from a slot, the slot's event staging.slot_free(slot) is recorded on
//     `stream`, and the CPU waits for that event before it refills the slot (an event never
//     recorded is complete: waiting on it returns at once);
//   - no synchronisation of the whole stream inside the loop: the CPU fills one slot while the
//     copy engine drains the other.
// On return `src` may be reused; `dst` is complete once `stream` has synchronised. bytes == 0
// does nothing (null pointers and an empty staging buffer allowed then).
// Tested: sizes from 1 byte to 1 MiB + 5 with 1000-byte chunks; two uploads back to back
// through the same staging buffer; an upload behind a stream held up for 100 ms (a refill that
// does not wait overwrites a slot whose copy has not started); and, through CUPTI, the order of
// the calls per slot: copy, then record of its event, then a wait on it before the next copy
// (recording the event before the copy gives the right bytes in a plain run: only the order
// shows it), with an event recorded after the slot's last copy.
// Errors (bytes > 0): null src or dst, or staging.empty(): std::invalid_argument, before any
// copy; a failed CUDA call: CudaError.
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
