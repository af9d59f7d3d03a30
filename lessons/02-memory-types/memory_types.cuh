// Lesson 02: where every byte lives, and what moving it costs.
//
// The lesson's code, in the order the README teaches it:
//   0. what this GPU offers (MemoryFacts)
//   1. host memory: pageable, pinned (cudaHostAlloc flags), write-combined, registered
//      (HostAllocation); copies and their bandwidth; a pinned staging buffer (exercise 4)
//   2. zero-copy: one preprocessing kernel (uint8 pixels -> normalised floats) that reads its
//      input from device memory, from mapped pinned host memory, or from managed memory
//   3. device global memory with a row pitch (cudaMallocPitch, cudaMemcpy2D); a region of
//      interest copied out of a host image (exercise 2)
//   4. constant memory: a 2x3 affine matrix in __constant__, applied to points
//   5. shared memory: the tiled matrix transpose
//        v0_naive          no shared memory: coalesced reads, strided (uncoalesced) writes
//        v1_shared_tile    static 32x32 tile: both global accesses coalesced, but the column
//                          read of the tile is a 32-way shared-memory bank conflict
//        v2_padded         32x33 tile: one padding column puts a column in 32 different banks
//                          (exercise 3)
//        v3_dynamic_smem   the tile in dynamic (extern) shared memory, padding chosen at launch,
//                          so one kernel measures conflict degree against padding
//   6. managed memory (cudaMallocManaged) with and without prefetch
//   7. the stream-ordered allocator (cudaMallocAsync/cudaFreeAsync) and memory pools
//   8. cudaPointerGetAttributes: what kind of memory is this pointer? (exercise 1)
//
// Every launcher takes a stream, validates its arguments (std::invalid_argument saying what was
// expected) and throws course::CudaError when a CUDA call fails. Sizes are in elements unless the
// name says bytes.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"

namespace lesson02 {

// ======================================================================= 0. the device's memory

// The attributes that decide which memory types this GPU and driver support, read with
// cudaDeviceGetAttribute. Throws CudaError for an invalid device ordinal (or no device).
struct MemoryFacts {
  bool unified_addressing = false;           // one virtual address space for host and device (UVA)
  bool can_map_host_memory = false;          // zero-copy: kernels may read pinned host memory
  bool pageable_memory_access = false;       // kernels may read plain malloc memory (HMM/ATS)
  bool concurrent_managed_access = false;    // managed memory migrates on demand; prefetch works
  bool memory_pools_supported = false;       // cudaMallocAsync and cudaMemPool*
  bool host_register_supported = false;      // cudaHostRegister
  bool host_pointer_for_registered = false;  // registered memory usable at its host address
  int async_engine_count = 0;                // copy engines: copies that can run beside kernels
  std::size_t total_constant_bytes = 0;      // __constant__ space (64 KiB on every GPU so far)
  int shared_per_block_bytes = 0;            // static + dynamic without opt-in (48 KiB)
  int shared_per_block_optin_bytes = 0;      // with cudaFuncAttributeMaxDynamicSharedMemorySize
  int shared_per_sm_bytes = 0;
};
MemoryFacts query_memory_facts(int device = 0);

// ============================================================ 1. host memory and its transfers

// The kinds of host memory a copy can start or end in.
//   pageable        ordinary memory (malloc, std::vector): the OS may move or swap its pages, so
//                   the DMA engine cannot read it directly; the driver copies it through a
//                   pinned staging buffer of its own.
//   pinned          cudaHostAlloc(cudaHostAllocDefault): page-locked, the DMA engine reads it.
//   write_combined  cudaHostAlloc(cudaHostAllocWriteCombined): pinned and not cached by the CPU;
//                   fast for the CPU to write and the GPU to read, very slow for the CPU to read.
//   registered      pageable memory page-locked after the fact with cudaHostRegister.
enum class HostKind { pageable, pinned, write_combined, registered };
const char* to_string(HostKind kind);
inline constexpr HostKind kAllHostKinds[] = {HostKind::pageable, HostKind::pinned,
                                             HostKind::write_combined, HostKind::registered};

// cudaHostRegister for the lifetime of the object; cudaHostUnregister in the destructor.
// The range must stay allocated while registered. Throws CudaError if registration fails.
class HostRegistration {
 public:
  HostRegistration() = default;
  HostRegistration(void* ptr, std::size_t bytes, unsigned flags = cudaHostRegisterDefault);
  ~HostRegistration();
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;
  HostRegistration(HostRegistration&& other) noexcept;
  HostRegistration& operator=(HostRegistration&& other) noexcept;

 private:
  void* ptr_ = nullptr;
};

// `bytes` of host memory of one HostKind. Pageable and registered memory come from
// std::aligned_alloc on page boundaries (cudaHostRegister locks whole pages, and two
// registrations sharing a page would collide) and are zero-filled, so every page is resident
// before the first copy. Pinned and write-combined come from cudaHostAlloc. A size of 0 allocates
// nothing and calls no CUDA function. Throws std::invalid_argument for a kind that is not a
// HostKind or a size that cannot be rounded up to whole pages (near SIZE_MAX), before allocating;
// CudaError (CUDA kinds) or std::bad_alloc when the allocation fails.
class HostAllocation {
 public:
  HostAllocation(HostKind kind, std::size_t bytes);
  HostAllocation(const HostAllocation&) = delete;  // not movable either: it is used in place
  HostAllocation& operator=(const HostAllocation&) = delete;
  HostKind kind() const noexcept { return kind_; }
  std::size_t bytes() const noexcept { return bytes_; }
  unsigned char* data() noexcept;
  const unsigned char* data() const noexcept;

 private:
  struct FreeDeleter {
    void operator()(unsigned char* p) const noexcept { std::free(p); }
  };
  HostKind kind_;
  std::size_t bytes_ = 0;
  std::unique_ptr<unsigned char, FreeDeleter> pageable_;  // pageable, registered
  course::PinnedBuffer<unsigned char> pinned_;            // pinned, write_combined
  HostRegistration registration_;  // declared last: unregistered before pageable_ is freed
};

// A std::vector copied into new device memory in stream order: cudaMemcpyAsync on `stream`, so
// kernels launched later on `stream` see the data. (course::to_device's cudaMemcpy runs on the
// legacy default stream, which a non-blocking stream is not ordered with, and from pageable
// memory it may return before the DMA into device memory has finished: README, pitfalls.)
// Returns before the copy is done: keep `host` alive and unchanged until `stream` passes it.
// Throws CudaError if the allocation or the copy fails.
template <class T>
course::DeviceBuffer<T> upload(const std::vector<T>& host, cudaStream_t stream) {
  course::DeviceBuffer<T> device(host.size());
  if (!host.empty()) {
    CUDA_CHECK(cudaMemcpyAsync(device.data(), host.data(), device.bytes(), cudaMemcpyHostToDevice,
                               stream));
  }
  return device;
}

enum class Direction { host_to_device, device_to_host };
const char* to_string(Direction direction);

// Enqueues one cudaMemcpyAsync of `bytes` between `host` and `device` on `stream`. From pageable
// memory the call returns only once the driver has staged the data (so it is synchronous with the
// host); from pinned memory it returns at once. `device`: device memory. Throws
// std::invalid_argument for a Direction outside the enum or null pointers when bytes > 0 (before
// any CUDA call), CudaError if the copy fails.
void copy_async(void* host, void* device, std::size_t bytes, Direction direction,
                cudaStream_t stream);

// Median bandwidth in GB/s (1e9 bytes/s) of `reps` timed copies of `bytes` (after one untimed
// warm-up) on `stream`. Pinned, write-combined and registered memory: GPU time (the copy's own
// time, launch latency excluded: common/timing.hpp). Pageable memory: end-to-end time (host call
// to completion), because the call itself blocks the host while the driver stages the data, and
// that is the cost a caller pays. Throws std::invalid_argument if bytes is 0
// or larger than either buffer, or reps < 1.
double measure_copy_gbps(HostAllocation& host, course::DeviceBuffer<unsigned char>& device,
                         std::size_t bytes, Direction direction, int reps, cudaStream_t stream);

// Exercise 4's pinned staging area: two pinned slots of `chunk_bytes` each, used in turn, and
// one event per slot recorded when the copy engine has finished reading it. Default-constructed
// it is empty (no CUDA call). Throws std::invalid_argument if chunk_bytes is 0 or kSlots x
// chunk_bytes overflows size_t (before any CUDA call).
class StagingBuffer {
 public:
  StagingBuffer() = default;
  explicit StagingBuffer(std::size_t chunk_bytes);
  ~StagingBuffer();  // waits for copies still reading the slots before freeing them
  StagingBuffer(const StagingBuffer&) = delete;  // and not movable: copies may be in flight
  StagingBuffer& operator=(const StagingBuffer&) = delete;

  bool empty() const noexcept { return chunk_ == 0; }
  std::size_t chunk_bytes() const noexcept { return chunk_; }
  static constexpr int kSlots = 2;
  unsigned char* slot(int i) noexcept {
    return memory_.data() + static_cast<std::size_t>(i) * chunk_;
  }
  cudaEvent_t slot_free(int i) const noexcept {
    return slot_free_[static_cast<std::size_t>(i)].get();
  }

 private:
  std::size_t chunk_ = 0;
  course::PinnedBuffer<unsigned char> memory_;  // kSlots * chunk_ bytes
  std::vector<course::Event> slot_free_;
};

// EXERCISE 4. Upload `bytes` from pageable host memory `src` to device memory `dst` through the
// pinned `staging` slots: copy a chunk into a free slot with std::memcpy, cudaMemcpyAsync it on
// `stream`, record the slot's event; before refilling a slot, wait for its event, so the CPU
// fills one slot while the copy engine drains the other. This is what cudaMemcpy does with
// pageable memory, made visible. On return `src` may be reused; `dst` is complete once `stream`
// has synchronised. bytes == 0 does nothing. Throws std::invalid_argument for null src/dst
// (bytes > 0) or an empty staging buffer.
void upload_via_staging(const void* src, void* dst, std::size_t bytes, StagingBuffer& staging,
                        cudaStream_t stream);

// ================================================= 2. zero-copy: one kernel, three input memories

// The per-pixel step of every network's preprocessing: x * scale + shift, e.g. scale = 1/255,
// shift = 0, or scale = 1/(255 std), shift = -mean/std.
__host__ __device__ inline float normalize_pixel(std::uint8_t v, float scale, float shift) {
  return static_cast<float>(v) * scale + shift;
}

// out[i] = normalize_pixel(in[i], scale, shift) for i < n. `in` may point to device memory,
// mapped pinned host memory (zero-copy: every read crosses PCIe/NVLink) or managed memory: the
// kernel cannot tell. Reads 4 pixels per thread (uchar4) so a warp asks for 128 contiguous bytes.
// Requires `in` 4-byte and `out` 16-byte aligned (cudaMalloc/cudaHostAlloc give 256 bytes and
// pages). Throws std::invalid_argument for null or misaligned pointers when n > 0.
void normalize_u8(const std::uint8_t* in, float* out, std::size_t n, float scale, float shift,
                  cudaStream_t stream);

// The address through which kernels reach mapped pinned host memory (cudaHostGetDevicePointer).
// With unified addressing it is the host address itself, except for write-combined and
// registered memory, which may have a distinct device address: always ask. Throws
// std::invalid_argument for nullptr, CudaError for memory that is not mapped pinned memory.
void* mapped_device_pointer(void* host);

// ================================================================ 3. pitched device memory

// A 2D byte array in device memory from cudaMallocPitch: rows of width_bytes, `pitch` bytes
// apart (pitch >= width_bytes, chosen by the driver so every row starts aligned for coalesced
// access). A width or height of 0 allocates nothing (then all sizes read 0). Throws CudaError if
// cudaMallocPitch fails.
class PitchedImage {
 public:
  PitchedImage() = default;
  PitchedImage(std::size_t width_bytes, std::size_t height);
  ~PitchedImage();
  PitchedImage(const PitchedImage&) = delete;
  PitchedImage& operator=(const PitchedImage&) = delete;
  PitchedImage(PitchedImage&& other) noexcept;
  PitchedImage& operator=(PitchedImage&& other) noexcept;

  std::uint8_t* data() noexcept { return ptr_; }
  const std::uint8_t* data() const noexcept { return ptr_; }
  std::size_t pitch() const noexcept { return pitch_; }
  std::size_t width_bytes() const noexcept { return width_bytes_; }
  std::size_t height() const noexcept { return height_; }
  bool empty() const noexcept { return ptr_ == nullptr; }

 private:
  void release() noexcept;
  std::uint8_t* ptr_ = nullptr;
  std::size_t pitch_ = 0, width_bytes_ = 0, height_ = 0;
};

// A host image: height rows of width x channels bytes (interleaved, e.g. BGR), rows pitch_bytes
// apart. OpenCV's cv::Mat is exactly this (data, cols, rows, channels(), step).
struct HostImageView {
  const std::uint8_t* data = nullptr;
  int width = 0, height = 0, channels = 1;
  std::size_t pitch_bytes = 0;
};

// Throws std::invalid_argument unless width, height >= 0, channels in [1, 4],
// pitch_bytes >= width * channels, and data != nullptr when the image is not empty.
void check_image_view(const HostImageView& image);

// Copies the whole host image into `dst` (cudaMemcpy2DAsync), which must be
// width*channels x height bytes. Throws std::invalid_argument otherwise.
void upload_image(const HostImageView& image, PitchedImage& dst, cudaStream_t stream);
// Copies `src` into host memory `dst` (src.height() rows of src.width_bytes(), dst_pitch bytes
// apart) on `stream`; read `dst` after synchronising. An empty src copies nothing. Throws
// std::invalid_argument for a null dst or dst_pitch < src.width_bytes(), CudaError if the copy
// fails.
void download_image(const PitchedImage& src, std::uint8_t* dst, std::size_t dst_pitch,
                    cudaStream_t stream);

// Saturating brightness change: clamp(v + delta, 0, 255).
__host__ __device__ inline std::uint8_t brighten_u8(std::uint8_t v, int delta) {
  const int x = static_cast<int>(v) + delta;
  return static_cast<std::uint8_t>(x < 0 ? 0 : (x > 255 ? 255 : x));
}
// Applies brighten_u8 to every byte of `image` in place. Touches only the width_bytes of each
// row, never the padding up to the pitch. An empty image does nothing. Throws
// std::invalid_argument for more than 65535 * 8 rows (blocks of 32 x 8, gridDim.y <= 65535),
// CudaError if the launch fails.
void brighten(PitchedImage& image, int delta, cudaStream_t stream);

// A region of interest in pixels: columns [x, x + width), rows [y, y + height).
struct Roi {
  int x = 0, y = 0, width = 0, height = 0;
};

// The arguments of the cudaMemcpy2D that copies a ROI out of a host image: the ROI's first byte
// is src_offset bytes from image.data, its rows src_pitch bytes apart, width_bytes wide,
// height rows.
struct Copy2DPlan {
  std::size_t src_offset = 0;
  std::size_t src_pitch = 0;
  std::size_t width_bytes = 0;
  std::size_t height = 0;
};

// EXERCISE 2a. Plan the copy of `roi` out of `image`. Throws std::invalid_argument if the view is
// invalid (check_image_view) or the ROI has a negative size or does not lie inside the image.
// An empty ROI (width or height 0) inside the image is valid.
Copy2DPlan plan_roi_copy(const HostImageView& image, const Roi& roi);

// EXERCISE 2b. Copy `roi` of `image` into `dst` (roi.width*channels x roi.height bytes) with one
// cudaMemcpy2DAsync on `stream`. An empty ROI (either side 0) copies nothing and leaves `dst`
// unchecked. Throws std::invalid_argument for a bad plan or a `dst` of another size.
void upload_roi(const HostImageView& image, const Roi& roi, PitchedImage& dst, cudaStream_t stream);

// ==================================================================== 4. constant memory

struct Point2f {
  float x = 0.0f, y = 0.0f;
};
// x' = m[0] x + m[1] y + m[2],  y' = m[3] x + m[4] y + m[5]  (cv::warpAffine's 2x3 layout)
struct Affine2x3 {
  float m[6] = {1, 0, 0, 0, 1, 0};
};

__host__ __device__ inline Point2f apply_affine(const float* m, Point2f p) {
  return Point2f{m[0] * p.x + m[1] * p.y + m[2], m[3] * p.x + m[4] * p.y + m[5]};
}

// Copies `affine` into the lesson's __constant__ matrix with cudaMemcpyToSymbolAsync on `stream`:
// kernels launched later on the same stream see it. (The source is pageable, so the call returns
// once the 24 bytes are staged; `affine` may go out of scope.) Throws CudaError if the copy fails.
void set_affine(const Affine2x3& affine, cudaStream_t stream);
// out[i] = apply_affine(constant matrix, in[i]) for i < n. in and out: n points in device memory
// (they may be the same). Throws std::invalid_argument for null pointers when n > 0.
void transform_points(const Point2f* in, Point2f* out, std::size_t n, cudaStream_t stream);
// The device address of the __constant__ matrix (cudaGetSymbolAddress). Throws CudaError if the
// query fails (no device).
const void* affine_symbol_address();

// ======================================================= 5. shared memory: the tiled transpose

// A block transposes one kTileDim x kTileDim tile with kTileDim x kBlockRows threads: each thread
// moves kTileDim / kBlockRows elements, which leaves enough work per thread to hide latency.
inline constexpr int kTileDim = 32;
inline constexpr int kBlockRows = 8;
inline constexpr int kSharedBanks = 32;  // 4-byte banks on every GPU since Kepler

// How many lanes of a warp hit the busiest shared-memory bank when lane i reads the 4-byte word
// at index i * stride_words, i.e. how many times the access is replayed. Reading a column of a
// float tile whose rows are stride_words long is this access: gcd(stride, 32) ways, so a 32-word
// row is a 32-way conflict and a 33-word row is conflict-free. Lanes reading the same word are a
// broadcast, not a conflict (stride 0 gives 1).
__host__ __device__ constexpr int bank_conflict_ways(int stride_words) {
  int a = stride_words < 0 ? -stride_words : stride_words;
  if (a == 0) return 1;
  int b = kSharedBanks;
  while (b != 0) {
    const int t = a % b;
    a = b;
    b = t;
  }
  return a;
}

// The launch shape of every transpose: one block per tile, kTileDim x kBlockRows threads.
inline dim3 transpose_block() {
  return dim3(kTileDim, kBlockRows);
}
// One block per 32x32 tile: ceil(cols / 32) x ceil(rows / 32). rows, cols >= 0; not checked
// (check_transpose_args bounds rows to the grid's y limit).
inline dim3 transpose_grid(int rows, int cols) {
  const auto tiles = [](int n) {
    return static_cast<unsigned>((static_cast<long long>(n) + kTileDim - 1) / kTileDim);
  };
  return dim3(tiles(cols), tiles(rows));
}

// All transposes: in is rows x cols row-major, out is cols x rows row-major,
// out[c * rows + r] = in[r * cols + c]. rows, cols >= 0 (0 does nothing);
// rows <= 65535 * kTileDim (the grid's y limit). in and out must not overlap.
// Throws std::invalid_argument (see check_transpose_args).
void check_transpose_args(const float* in, const float* out, int rows, int cols);
void transpose_v0_naive(const float* in, float* out, int rows, int cols, cudaStream_t stream);
void transpose_v1_shared_tile(const float* in, float* out, int rows, int cols, cudaStream_t stream);
// EXERCISE 3: the padded tile. Its launcher lives with the kernel (exercise.cu holds both stubs).
void transpose_v2_padded(const float* in, float* out, int rows, int cols, cudaStream_t stream);
// cudaFuncGetAttributes of the kernel transpose_v2_padded launches (exercise 3 writes it beside
// the kernel): the tests read its sharedSizeBytes, kTileDim * (kTileDim + 1) floats once the
// tile is padded. Needs a device; throws CudaError otherwise.
cudaFuncAttributes transpose_v2_padded_attributes();
// The tile in dynamic shared memory, rows of kTileDim + pad floats; pad in [0, kTileDim].
void transpose_v3_dynamic_smem(const float* in, float* out, int rows, int cols, int pad,
                               cudaStream_t stream);
// The CPU reference, same layout; the oracle of the tests and of the lesson binary.
void transpose_cpu(const float* in, float* out, int rows, int cols);

// ===================================================================== 6. managed memory

// cudaMallocManaged memory for `count` elements of T: one pointer valid on host and device; the
// driver migrates pages to whichever processor touches them (on GPUs with
// concurrent_managed_access) or prefetch_managed moves them ahead of time. 0 allocates nothing.
// Throws std::invalid_argument if count * sizeof(T) overflows size_t (before any CUDA call),
// CudaError if the allocation fails.
template <class T>
class ManagedBuffer {
 public:
  ManagedBuffer() = default;
  explicit ManagedBuffer(std::size_t count) : count_(count) {
    const std::size_t bytes = course::checked_bytes(count, sizeof(T), "ManagedBuffer");
    if (count_ > 0) {
      CUDA_CHECK(cudaMallocManaged(reinterpret_cast<void**>(&ptr_), bytes, cudaMemAttachGlobal));
    }
  }
  ~ManagedBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  ManagedBuffer(const ManagedBuffer&) = delete;
  ManagedBuffer& operator=(const ManagedBuffer&) = delete;
  ManagedBuffer(ManagedBuffer&& o) noexcept : ptr_(o.ptr_), count_(o.count_) {
    o.ptr_ = nullptr;
    o.count_ = 0;
  }
  ManagedBuffer& operator=(ManagedBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_ != nullptr) cudaFree(ptr_);
      ptr_ = o.ptr_;
      count_ = o.count_;
      o.ptr_ = nullptr;
      o.count_ = 0;
    }
    return *this;
  }
  T* data() noexcept { return ptr_; }
  const T* data() const noexcept { return ptr_; }
  T* begin() noexcept { return ptr_; }
  T* end() noexcept { return ptr_ + count_; }
  std::size_t size() const noexcept { return count_; }
  std::size_t bytes() const noexcept { return count_ * sizeof(T); }

 private:
  T* ptr_ = nullptr;
  std::size_t count_ = 0;
};

// Enqueue a migration of managed memory on `stream`: to device `device`, or to the host when
// device == cudaCpuDeviceId. ptr: managed memory, `bytes` long. bytes == 0 does nothing.
// Throws std::invalid_argument for a null ptr with bytes > 0; CudaError without
// concurrent_managed_access, for memory that is not managed, or an invalid device.
// (CUDA 13 takes a cudaMemLocation; CUDA 12 a device ordinal: this hides the difference.)
void prefetch_managed(const void* ptr, std::size_t bytes, int device, cudaStream_t stream);

// ================================================= 7. the stream-ordered allocator and pools

// What a MemPool's memory is. Both are "pinned" allocations (cudaMemAllocationTypePinned: the
// memory does not migrate); the location differs.
enum class PoolMemory {
  device,       // device memory of `device` (cudaMemLocationTypeDevice)
  pinned_host,  // page-locked host memory (cudaMemLocationTypeHost, CUDA 12.6+), for staging
                // buffers allocated per frame in stream order; `device` is granted read/write
                // access (cudaMemPoolSetAccess), the CPU has it by default
};

// A memory pool (cudaMemPoolCreate) that keeps up to release_threshold bytes reserved across
// synchronisations instead of returning them to the OS: device memory on `device`, or pinned host
// memory that `device` can use. Allocate from it with cudaMallocFromPoolAsync (AsyncDeviceBuffer
// for device memory). Throws CudaError if the pool cannot be created (invalid device, no memory
// pool support; for pinned_host, cudaDevAttrHostMemoryPoolsSupported == 0), std::runtime_error
// for pinned_host with a CUDA runtime older than 12.6; reserved_bytes() throws CudaError if its
// query fails.
class MemPool {
 public:
  MemPool(int device, std::uint64_t release_threshold, PoolMemory memory = PoolMemory::device);
  ~MemPool();
  MemPool(const MemPool&) = delete;
  MemPool& operator=(const MemPool&) = delete;
  cudaMemPool_t get() const noexcept { return pool_; }
  // Bytes the pool holds from the OS (cudaMemPoolAttrReservedMemCurrent).
  std::uint64_t reserved_bytes() const;

 private:
  cudaMemPool_t pool_ = nullptr;
};

// Device memory allocated in stream order: cudaMallocAsync (the device's default pool) or
// cudaMallocFromPoolAsync, freed with cudaFreeAsync on the same stream by the destructor. The
// memory may be used by work on `stream` after the allocation; the stream must outlive the buffer.
// Throws std::invalid_argument if count * sizeof(T) overflows size_t (before any CUDA call),
// CudaError if the allocation fails.
template <class T>
class AsyncDeviceBuffer {
 public:
  AsyncDeviceBuffer(std::size_t count, cudaStream_t stream, cudaMemPool_t pool = nullptr)
      : count_(count), stream_(stream) {
    const std::size_t bytes = course::checked_bytes(count, sizeof(T), "AsyncDeviceBuffer");
    if (count_ == 0) return;
    void** out = reinterpret_cast<void**>(&ptr_);
    if (pool == nullptr) {
      CUDA_CHECK(cudaMallocAsync(out, bytes, stream_));
    } else {
      CUDA_CHECK(cudaMallocFromPoolAsync(out, bytes, pool, stream_));
    }
  }
  ~AsyncDeviceBuffer() {
    if (ptr_ != nullptr) cudaFreeAsync(ptr_, stream_);
  }
  AsyncDeviceBuffer(const AsyncDeviceBuffer&) = delete;
  AsyncDeviceBuffer& operator=(const AsyncDeviceBuffer&) = delete;
  T* data() noexcept { return ptr_; }
  std::size_t size() const noexcept { return count_; }
  std::size_t bytes() const noexcept { return count_ * sizeof(T); }

 private:
  T* ptr_ = nullptr;
  std::size_t count_ = 0;
  cudaStream_t stream_ = nullptr;
};

// How per-frame scratch memory is obtained.
//   cuda_malloc             cudaMalloc / cudaFree (cudaFree synchronises the device)
//   async_default_pool      cudaMallocAsync / cudaFreeAsync from the device's default pool, whose
//                           release threshold is 0: memory goes back to the OS at every sync
//   async_retaining_pool    the same from a MemPool whose threshold keeps the memory
enum class AllocStrategy { cuda_malloc, async_default_pool, async_retaining_pool };
const char* to_string(AllocStrategy strategy);

// One frame's worth of scratch: allocate `bytes`, cudaMemsetAsync them on `stream`, free, then
// synchronise `stream`. `pool` is used (and required) for async_retaining_pool only. Throws
// std::invalid_argument for a strategy outside the enum or a missing pool (before any CUDA call),
// CudaError if an allocation, the memset or the synchronisation fails.
void alloc_use_free(AllocStrategy strategy, std::size_t bytes, cudaStream_t stream,
                    const MemPool* pool = nullptr);

// ====================================================== 8. what kind of memory is this pointer?

enum class MemoryKind { pageable, pinned_host, device, managed };
const char* to_string(MemoryKind kind);

struct PointerInfo {
  MemoryKind kind = MemoryKind::pageable;
  int device = -1;                 // the device it lives on or was allocated against
  void* device_pointer = nullptr;  // the address kernels use, or nullptr if none
  void* host_pointer = nullptr;    // the address the host uses, or nullptr if none
};

// EXERCISE 1a. The MemoryKind of what cudaPointerGetAttributes reported: cudaMemoryTypeUnregistered
// -> pageable, Host -> pinned_host, Device -> device, Managed -> managed. Throws
// std::invalid_argument for any other value of attributes.type.
MemoryKind memory_kind_from(const cudaPointerAttributes& attributes);
// EXERCISE 1b. Ask cudaPointerGetAttributes about `ptr` and fill a PointerInfo. Throws
// std::invalid_argument for nullptr (there is nothing to classify), CudaError if the query fails.
PointerInfo classify_pointer(const void* ptr);

// The flags cudaHostAlloc was called with for `pinned` (cudaHostGetFlags). Throws CudaError for
// memory that cudaHostAlloc did not allocate.
unsigned host_alloc_flags(void* pinned);
// "portable|mapped|write-combined" for cudaHostAlloc flags ("default" for 0).
std::string describe_host_alloc_flags(unsigned flags);

}  // namespace lesson02
