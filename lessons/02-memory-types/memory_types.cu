// Lesson 02: kernels and host launchers, in the order the README teaches them. The solutions of
// the exercises are in solutions.cuh (included at the end, lesson build only); exercise.cu holds
// their stubs.
#include "memory_types.cuh"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/device.hpp"
#include "common/timing.hpp"

namespace lesson02 {

namespace {
// Threads per block of the 1D kernels: a multiple of the warp size, small enough that a few
// blocks fit on every SM.
constexpr int kThreads = 256;

// Blocks for a grid-stride loop over `work` items: enough to fill any GPU many times over, capped
// so the grid size stays far from its limit; the loop covers the rest.
unsigned blocks_for(std::size_t work) {
  const std::size_t blocks = (std::max<std::size_t>(work, 1) + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::min<std::size_t>(blocks, 65535));
}

void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument(message);
}
}  // namespace

// ======================================================================= 0. the device's memory

MemoryFacts query_memory_facts(int device) {
  MemoryFacts f;
  f.unified_addressing = course::device_attribute(cudaDevAttrUnifiedAddressing, device) != 0;
  f.can_map_host_memory = course::device_attribute(cudaDevAttrCanMapHostMemory, device) != 0;
  f.pageable_memory_access = course::device_attribute(cudaDevAttrPageableMemoryAccess, device) != 0;
  f.concurrent_managed_access =
      course::device_attribute(cudaDevAttrConcurrentManagedAccess, device) != 0;
  f.memory_pools_supported = course::device_attribute(cudaDevAttrMemoryPoolsSupported, device) != 0;
  f.host_register_supported =
      course::device_attribute(cudaDevAttrHostRegisterSupported, device) != 0;
  f.host_pointer_for_registered =
      course::device_attribute(cudaDevAttrCanUseHostPointerForRegisteredMem, device) != 0;
  f.async_engine_count = course::device_attribute(cudaDevAttrAsyncEngineCount, device);
  f.total_constant_bytes =
      static_cast<std::size_t>(course::device_attribute(cudaDevAttrTotalConstantMemory, device));
  f.shared_per_block_bytes = course::device_attribute(cudaDevAttrMaxSharedMemoryPerBlock, device);
  f.shared_per_block_optin_bytes =
      course::device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  f.shared_per_sm_bytes =
      course::device_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  return f;
}

// ============================================================ 1. host memory and its transfers

const char* to_string(HostKind kind) {
  switch (kind) {
    case HostKind::pageable:
      return "pageable";
    case HostKind::pinned:
      return "pinned";
    case HostKind::write_combined:
      return "write-combined";
    case HostKind::registered:
      return "registered";
  }
  return "?";
}

const char* to_string(Direction direction) {
  return direction == Direction::host_to_device ? "H2D" : "D2H";
}

HostRegistration::HostRegistration(void* ptr, std::size_t bytes, unsigned flags) {
  require(ptr != nullptr && bytes > 0, "HostRegistration: expected a non-null range of > 0 bytes");
  CUDA_CHECK(cudaHostRegister(ptr, bytes, flags));
  ptr_ = ptr;
}

HostRegistration::~HostRegistration() {
  if (ptr_ != nullptr) cudaHostUnregister(ptr_);
}

HostRegistration::HostRegistration(HostRegistration&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)) {}

HostRegistration& HostRegistration::operator=(HostRegistration&& other) noexcept {
  if (this != &other) {
    if (ptr_ != nullptr) cudaHostUnregister(ptr_);
    ptr_ = std::exchange(other.ptr_, nullptr);
  }
  return *this;
}

HostAllocation::HostAllocation(HostKind kind, std::size_t bytes) : kind_(kind), bytes_(bytes) {
  require(std::find(std::begin(kAllHostKinds), std::end(kAllHostKinds), kind) !=
              std::end(kAllHostKinds),
          "HostAllocation: unknown HostKind " + std::to_string(static_cast<int>(kind)));
  if (bytes == 0) return;
  switch (kind) {
    case HostKind::pageable:
    case HostKind::registered: {
      const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
      // Near SIZE_MAX, bytes + page - 1 would wrap to a tiny size that bytes() then misreports.
      require(bytes <= SIZE_MAX - (page - 1),
              "HostAllocation: " + std::to_string(bytes) +
                  " bytes cannot be rounded up to whole pages (size_t overflow)");
      const std::size_t rounded = (bytes + page - 1) / page * page;
      pageable_.reset(static_cast<unsigned char*>(std::aligned_alloc(page, rounded)));
      if (!pageable_) throw std::bad_alloc();
      // Touch every page now: a fresh allocation is only virtual until first written, and page
      // faults inside the first timed copy would be measured as "pageable is slow".
      std::memset(pageable_.get(), 0, rounded);
      if (kind == HostKind::registered) registration_ = HostRegistration(pageable_.get(), rounded);
      break;
    }
    case HostKind::pinned:
      pinned_ = course::PinnedBuffer<unsigned char>(bytes, cudaHostAllocDefault);
      break;
    case HostKind::write_combined:
      pinned_ = course::PinnedBuffer<unsigned char>(bytes, cudaHostAllocWriteCombined);
      break;
  }
}

unsigned char* HostAllocation::data() noexcept {
  return pageable_ ? pageable_.get() : pinned_.data();
}
const unsigned char* HostAllocation::data() const noexcept {
  return pageable_ ? pageable_.get() : pinned_.data();
}

void copy_async(void* host, void* device, std::size_t bytes, Direction direction,
                cudaStream_t stream) {
  // An out-of-range Direction would otherwise take the else branch: a copy the wrong way.
  require(direction == Direction::host_to_device || direction == Direction::device_to_host,
          "copy_async: expected Direction host_to_device or device_to_host, got " +
              std::to_string(static_cast<int>(direction)));
  if (bytes == 0) return;
  require(host != nullptr && device != nullptr,
          "copy_async: expected non-null host and device pointers");
  if (direction == Direction::host_to_device) {
    CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream));
  } else {
    CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream));
  }
}

double measure_copy_gbps(HostAllocation& host, course::DeviceBuffer<unsigned char>& device,
                         std::size_t bytes, Direction direction, int reps, cudaStream_t stream) {
  require(bytes > 0 && bytes <= host.bytes() && bytes <= device.bytes(),
          "measure_copy_gbps: expected 0 < bytes <= both buffers' sizes");
  require(reps >= 1, "measure_copy_gbps: expected reps >= 1");
  const auto copy = [&] { copy_async(host.data(), device.data(), bytes, direction, stream); };
  copy();  // warm-up: the first copy of a range pays for the driver's lookups
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    ms.push_back(host.kind() == HostKind::pageable ? course::latency_ms(stream, copy)
                                                   : course::gpu_time_ms(stream, copy));
  }
  return static_cast<double>(bytes) / (course::median(ms) * 1e-3) / 1e9;
}

StagingBuffer::StagingBuffer(std::size_t chunk_bytes) : chunk_(chunk_bytes) {
  require(chunk_bytes > 0, "StagingBuffer: expected chunk_bytes > 0");
  memory_ = course::PinnedBuffer<unsigned char>(
      course::checked_bytes(kSlots, chunk_bytes, "StagingBuffer"));
  for (int i = 0; i < kSlots; ++i) slot_free_.emplace_back(cudaEventDisableTiming);
}

StagingBuffer::~StagingBuffer() {
  // A copy engine may still be reading a slot; freeing pinned memory under a running DMA would
  // hand the pages back to the OS while the GPU reads them.
  for (const course::Event& e : slot_free_) cudaEventSynchronize(e.get());
}

// ================================================= 2. zero-copy: one kernel, three input memories

// Each thread converts 4 pixels: a uchar4 load (a warp reads 128 contiguous bytes, one full
// cache line; over PCIe that is one large read request instead of 32 small ones) and a float4
// store. The last n % 4 pixels are done one per thread by the first threads of the grid.
__global__ void normalize_u8_kernel(const std::uint8_t* in, float* out, std::size_t n, float scale,
                                    float shift) {
  const std::size_t quads = n / 4;
  const auto* in4 = reinterpret_cast<const uchar4*>(in);
  auto* out4 = reinterpret_cast<float4*>(out);
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = first; i < quads; i += stride) {
    const uchar4 v = in4[i];
    out4[i] = make_float4(normalize_pixel(v.x, scale, shift), normalize_pixel(v.y, scale, shift),
                          normalize_pixel(v.z, scale, shift), normalize_pixel(v.w, scale, shift));
  }
  if (first < n % 4) out[quads * 4 + first] = normalize_pixel(in[quads * 4 + first], scale, shift);
}

void normalize_u8(const std::uint8_t* in, float* out, std::size_t n, float scale, float shift,
                  cudaStream_t stream) {
  if (n == 0) return;
  require(in != nullptr && out != nullptr, "normalize_u8: expected non-null in and out when n > 0");
  require(reinterpret_cast<std::uintptr_t>(in) % 4 == 0 &&
              reinterpret_cast<std::uintptr_t>(out) % 16 == 0,
          "normalize_u8: expected `in` 4-byte aligned and `out` 16-byte aligned (vector loads)");
  normalize_u8_kernel<<<blocks_for(std::max<std::size_t>(n / 4, n % 4)), kThreads, 0, stream>>>(
      in, out, n, scale, shift);
  CUDA_CHECK_LAUNCH();
}

void* mapped_device_pointer(void* host) {
  require(host != nullptr, "mapped_device_pointer: expected a non-null pinned host pointer");
  void* device = nullptr;
  CUDA_CHECK(cudaHostGetDevicePointer(&device, host, 0));
  return device;
}

// ================================================================ 3. pitched device memory

PitchedImage::PitchedImage(std::size_t width_bytes, std::size_t height)
    : width_bytes_(width_bytes), height_(height) {
  if (width_bytes == 0 || height == 0) {
    width_bytes_ = height_ = 0;
    return;
  }
  void* p = nullptr;
  CUDA_CHECK(cudaMallocPitch(&p, &pitch_, width_bytes, height));
  ptr_ = static_cast<std::uint8_t*>(p);
}

PitchedImage::~PitchedImage() {
  release();
}

PitchedImage::PitchedImage(PitchedImage&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)),
      pitch_(std::exchange(o.pitch_, 0)),
      width_bytes_(std::exchange(o.width_bytes_, 0)),
      height_(std::exchange(o.height_, 0)) {}

PitchedImage& PitchedImage::operator=(PitchedImage&& o) noexcept {
  if (this != &o) {
    release();
    ptr_ = std::exchange(o.ptr_, nullptr);
    pitch_ = std::exchange(o.pitch_, 0);
    width_bytes_ = std::exchange(o.width_bytes_, 0);
    height_ = std::exchange(o.height_, 0);
  }
  return *this;
}

void PitchedImage::release() noexcept {
  if (ptr_ != nullptr) cudaFree(ptr_);
  ptr_ = nullptr;
  pitch_ = width_bytes_ = height_ = 0;
}

void check_image_view(const HostImageView& image) {
  require(image.width >= 0 && image.height >= 0,
          "image: expected width >= 0 and height >= 0, got " + std::to_string(image.width) + "x" +
              std::to_string(image.height));
  require(image.channels >= 1 && image.channels <= 4,
          "image: expected 1 to 4 channels, got " + std::to_string(image.channels));
  const std::size_t row_bytes = static_cast<std::size_t>(image.width) * image.channels;
  require(image.pitch_bytes >= row_bytes, "image: expected pitch_bytes >= width * channels (" +
                                              std::to_string(row_bytes) + "), got " +
                                              std::to_string(image.pitch_bytes));
  require(image.data != nullptr || image.width == 0 || image.height == 0,
          "image: expected non-null data for a non-empty image");
}

void upload_image(const HostImageView& image, PitchedImage& dst, cudaStream_t stream) {
  check_image_view(image);
  const std::size_t row_bytes = static_cast<std::size_t>(image.width) * image.channels;
  require(dst.width_bytes() == row_bytes && dst.height() == static_cast<std::size_t>(image.height),
          "upload_image: expected a destination of width*channels x height bytes");
  if (dst.empty()) return;
  // Host rows are pitch_bytes apart, device rows dst.pitch() apart: cudaMemcpy2D copies
  // width_bytes of each row and skips both paddings, in one call.
  CUDA_CHECK(cudaMemcpy2DAsync(dst.data(), dst.pitch(), image.data, image.pitch_bytes, row_bytes,
                               image.height, cudaMemcpyHostToDevice, stream));
}

void download_image(const PitchedImage& src, std::uint8_t* dst, std::size_t dst_pitch,
                    cudaStream_t stream) {
  if (src.empty()) return;
  require(dst != nullptr && dst_pitch >= src.width_bytes(),
          "download_image: expected a non-null destination with pitch >= the image's width_bytes");
  CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src.data(), src.pitch(), src.width_bytes(),
                               src.height(), cudaMemcpyDeviceToHost, stream));
}

// One thread per byte. A row starts at base + y * pitch: the pitch, not the width, is the
// distance between rows, and threads past width_bytes (the padding) do nothing.
__global__ void brighten_kernel(std::uint8_t* image, std::size_t pitch, std::size_t width_bytes,
                                std::size_t height, int delta) {
  const std::size_t x = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t y = static_cast<std::size_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  if (x >= width_bytes || y >= height) return;
  std::uint8_t* row = image + y * pitch;
  row[x] = brighten_u8(row[x], delta);
}

void brighten(PitchedImage& image, int delta, cudaStream_t stream) {
  if (image.empty()) return;
  const dim3 block(32, 8);
  const std::size_t grid_y = (image.height() + block.y - 1) / block.y;
  require(grid_y <= 65535, "brighten: expected at most 65535 * 8 rows");
  const dim3 grid(static_cast<unsigned>((image.width_bytes() + block.x - 1) / block.x),
                  static_cast<unsigned>(grid_y));
  brighten_kernel<<<grid, block, 0, stream>>>(image.data(), image.pitch(), image.width_bytes(),
                                              image.height(), delta);
  CUDA_CHECK_LAUNCH();
}

// ==================================================================== 4. constant memory

// 24 bytes every thread reads at the same address: the constant cache broadcasts one word to a
// whole warp in one transaction. (Different addresses across a warp would be serialised, so
// constant memory suits uniform values like this matrix, not per-thread tables.)
__constant__ float c_affine[6];

void set_affine(const Affine2x3& affine, cudaStream_t stream) {
  CUDA_CHECK(cudaMemcpyToSymbolAsync(c_affine, affine.m, sizeof(affine.m), 0,
                                     cudaMemcpyHostToDevice, stream));
}

__global__ void transform_points_kernel(const Point2f* in, Point2f* out, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = apply_affine(c_affine, in[i]);
  }
}

void transform_points(const Point2f* in, Point2f* out, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  require(in != nullptr && out != nullptr,
          "transform_points: expected non-null in and out when n > 0");
  transform_points_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in, out, n);
  CUDA_CHECK_LAUNCH();
}

const void* affine_symbol_address() {
  void* p = nullptr;
  CUDA_CHECK(cudaGetSymbolAddress(&p, c_affine));
  return p;
}

// ======================================================= 5. shared memory: the tiled transpose

void check_transpose_args(const float* in, const float* out, int rows, int cols) {
  require(rows >= 0 && cols >= 0, "transpose: expected rows >= 0 and cols >= 0, got " +
                                      std::to_string(rows) + "x" + std::to_string(cols));
  require(rows <= 65535 * kTileDim, "transpose: expected rows <= 65535 * 32 (the grid's y limit)");
  if (rows == 0 || cols == 0) return;
  require(in != nullptr && out != nullptr, "transpose: expected non-null in and out");
  const std::size_t bytes = static_cast<std::size_t>(rows) * cols * sizeof(float);
  const auto a = reinterpret_cast<std::uintptr_t>(in);
  const auto b = reinterpret_cast<std::uintptr_t>(out);
  require(a + bytes <= b || b + bytes <= a, "transpose: expected in and out not to overlap");
}

// v0: no shared memory. A warp reads 32 consecutive floats of a row of `in` (coalesced: 128
// bytes, 4 sectors of 32 bytes) but writes them down a column of `out`, 32 rows apart: each store
// instruction costs 32 L2 sector writes instead of 4, 4 useful bytes in each. DRAM does not see
// 8x the bytes: the other 7 floats of each 32-byte sector are written by the same block moments
// later, and the write-back L2 merges them before the line is evicted, so DRAM write traffic
// stays about 1x. What limits v0 is the number of store transactions through the LSU and L2
// (docs/profiling.md has the ncu metrics that show both sides).
__global__ void transpose_v0_naive_kernel(const float* in, float* out, int rows, int cols) {
  const int c = blockIdx.x * kTileDim + threadIdx.x;
  const int r0 = blockIdx.y * kTileDim + threadIdx.y;
  for (int j = 0; j < kTileDim; j += kBlockRows) {
    const int r = r0 + j;
    if (r < rows && c < cols)
      out[static_cast<std::size_t>(c) * rows + r] = in[static_cast<std::size_t>(r) * cols + c];
  }
}

// v1: fixes v0's writes. The block stages a 32x32 tile in shared memory: it reads rows of `in`
// and writes rows of `out`, both coalesced, and does the transposition inside the tile. But the
// read tile[threadIdx.x][...] walks down a column: the 32 lanes hit addresses 32 words apart,
// all in the same bank, and the hardware serialises them (a 32-way bank conflict).
__global__ void transpose_v1_shared_tile_kernel(const float* in, float* out, int rows, int cols) {
  __shared__ float tile[kTileDim][kTileDim];
  int c = blockIdx.x * kTileDim + threadIdx.x;
  int r = blockIdx.y * kTileDim + threadIdx.y;
  for (int j = 0; j < kTileDim; j += kBlockRows) {
    if (r + j < rows && c < cols)
      tile[threadIdx.y + j][threadIdx.x] = in[static_cast<std::size_t>(r + j) * cols + c];
  }
  __syncthreads();  // the whole tile is loaded before any thread reads another thread's element
  // The output tile sits at the mirrored block position; threadIdx.x runs along its rows.
  c = blockIdx.y * kTileDim + threadIdx.x;
  r = blockIdx.x * kTileDim + threadIdx.y;
  for (int j = 0; j < kTileDim; j += kBlockRows) {
    if (r + j < cols && c < rows)
      out[static_cast<std::size_t>(r + j) * rows + c] = tile[threadIdx.x][threadIdx.y + j];
  }
}

// v3: v2's idea with the tile in dynamic shared memory (extern __shared__, size given at launch
// as the third <<<>>> argument), so the row stride kTileDim + pad is a runtime value: one kernel
// measures the conflict degree bank_conflict_ways(kTileDim + pad) against padding.
__global__ void transpose_v3_dynamic_smem_kernel(const float* in, float* out, int rows, int cols,
                                                 int stride) {
  extern __shared__ float tile[];  // kTileDim rows of `stride` floats
  int c = blockIdx.x * kTileDim + threadIdx.x;
  int r = blockIdx.y * kTileDim + threadIdx.y;
  for (int j = 0; j < kTileDim; j += kBlockRows) {
    if (r + j < rows && c < cols)
      tile[(threadIdx.y + j) * stride + threadIdx.x] =
          in[static_cast<std::size_t>(r + j) * cols + c];
  }
  __syncthreads();
  c = blockIdx.y * kTileDim + threadIdx.x;
  r = blockIdx.x * kTileDim + threadIdx.y;
  for (int j = 0; j < kTileDim; j += kBlockRows) {
    if (r + j < cols && c < rows)
      out[static_cast<std::size_t>(r + j) * rows + c] =
          tile[threadIdx.x * stride + threadIdx.y + j];
  }
}

void transpose_v0_naive(const float* in, float* out, int rows, int cols, cudaStream_t stream) {
  check_transpose_args(in, out, rows, cols);
  if (rows == 0 || cols == 0) return;
  transpose_v0_naive_kernel<<<transpose_grid(rows, cols), transpose_block(), 0, stream>>>(
      in, out, rows, cols);
  CUDA_CHECK_LAUNCH();
}

void transpose_v1_shared_tile(const float* in, float* out, int rows, int cols,
                              cudaStream_t stream) {
  check_transpose_args(in, out, rows, cols);
  if (rows == 0 || cols == 0) return;
  transpose_v1_shared_tile_kernel<<<transpose_grid(rows, cols), transpose_block(), 0, stream>>>(
      in, out, rows, cols);
  CUDA_CHECK_LAUNCH();
}

void transpose_v3_dynamic_smem(const float* in, float* out, int rows, int cols, int pad,
                               cudaStream_t stream) {
  check_transpose_args(in, out, rows, cols);
  require(pad >= 0 && pad <= kTileDim,
          "transpose_v3_dynamic_smem: expected pad in [0, 32], got " + std::to_string(pad));
  if (rows == 0 || cols == 0) return;
  const int stride = kTileDim + pad;
  const std::size_t smem_bytes = static_cast<std::size_t>(kTileDim) * stride * sizeof(float);
  transpose_v3_dynamic_smem_kernel<<<transpose_grid(rows, cols), transpose_block(), smem_bytes,
                                     stream>>>(in, out, rows, cols, stride);
  CUDA_CHECK_LAUNCH();
}

void transpose_cpu(const float* in, float* out, int rows, int cols) {
  check_transpose_args(in, out, rows, cols);
  // Blocked, so that the strided side of the copy stays in cache; same result as the plain loop.
  constexpr int kBlock = 64;
  for (int r0 = 0; r0 < rows; r0 += kBlock) {
    for (int c0 = 0; c0 < cols; c0 += kBlock) {
      for (int r = r0; r < std::min(rows, r0 + kBlock); ++r) {
        for (int c = c0; c < std::min(cols, c0 + kBlock); ++c) {
          out[static_cast<std::size_t>(c) * rows + r] = in[static_cast<std::size_t>(r) * cols + c];
        }
      }
    }
  }
}

// ===================================================================== 6. managed memory

void prefetch_managed(const void* ptr, std::size_t bytes, int device, cudaStream_t stream) {
  if (bytes == 0) return;
  require(ptr != nullptr, "prefetch_managed: expected a non-null managed pointer");
#if CUDART_VERSION >= 13000
  cudaMemLocation location{};
  if (device == cudaCpuDeviceId) {
    location.type = cudaMemLocationTypeHost;
  } else {
    location.type = cudaMemLocationTypeDevice;
    location.id = device;
  }
  CUDA_CHECK(cudaMemPrefetchAsync(ptr, bytes, location, 0, stream));
#else
  CUDA_CHECK(cudaMemPrefetchAsync(ptr, bytes, device, stream));
#endif
}

// ================================================= 7. the stream-ordered allocator and pools

MemPool::MemPool(int device, std::uint64_t release_threshold, PoolMemory memory) {
  cudaMemPoolProps props{};
  // Pinned means "does not migrate", not "device": pools may also live in pinned host memory
  // (location cudaMemLocationTypeHost from CUDA 12.6, or HostNuma with a NUMA node id), and
  // CUDA 13 adds managed pools (cudaMemAllocationTypeManaged).
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;  // a host pool must have 0 here (cudaMemPoolCreate)
  if (memory == PoolMemory::device) {
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
  } else {
#if CUDART_VERSION >= 12060
    props.location.type = cudaMemLocationTypeHost;  // id is ignored
    props.location.id = 0;
#else
    throw std::runtime_error("MemPool: a pinned-host pool needs CUDA 12.6 or newer");
#endif
  }
  CUDA_CHECK(cudaMemPoolCreate(&pool_, &props));
  try {
    CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &release_threshold));
    if (memory == PoolMemory::pinned_host) {
      // A host pool is accessible from the CPU only, until a device is granted access.
      cudaMemAccessDesc access{};
      access.location.type = cudaMemLocationTypeDevice;
      access.location.id = device;
      access.flags = cudaMemAccessFlagsProtReadWrite;
      CUDA_CHECK(cudaMemPoolSetAccess(pool_, &access, 1));
    }
  } catch (...) {
    cudaMemPoolDestroy(pool_);
    throw;
  }
}

MemPool::~MemPool() {
  if (pool_ != nullptr) cudaMemPoolDestroy(pool_);
}

std::uint64_t MemPool::reserved_bytes() const {
  std::uint64_t bytes = 0;
  CUDA_CHECK(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &bytes));
  return bytes;
}

const char* to_string(AllocStrategy strategy) {
  switch (strategy) {
    case AllocStrategy::cuda_malloc:
      return "cudaMalloc/cudaFree";
    case AllocStrategy::async_default_pool:
      return "cudaMallocAsync, default pool";
    case AllocStrategy::async_retaining_pool:
      return "cudaMallocAsync, retaining pool";
  }
  return "?";
}

void alloc_use_free(AllocStrategy strategy, std::size_t bytes, cudaStream_t stream,
                    const MemPool* pool) {
  require(strategy == AllocStrategy::cuda_malloc || strategy == AllocStrategy::async_default_pool ||
              strategy == AllocStrategy::async_retaining_pool,
          "alloc_use_free: unknown AllocStrategy " + std::to_string(static_cast<int>(strategy)));
  require(strategy != AllocStrategy::async_retaining_pool || pool != nullptr,
          "alloc_use_free: async_retaining_pool needs a MemPool");
  switch (strategy) {
    case AllocStrategy::cuda_malloc: {
      course::DeviceBuffer<unsigned char> scratch(bytes);
      if (bytes > 0) CUDA_CHECK(cudaMemsetAsync(scratch.data(), 0, bytes, stream));
      // The frame's work ends before its scratch is freed; cudaFree (in ~DeviceBuffer) may also
      // synchronise the whole device, one of the costs this comparison measures.
      CUDA_CHECK(cudaStreamSynchronize(stream));
      break;
    }
    case AllocStrategy::async_default_pool:
    case AllocStrategy::async_retaining_pool: {
      // The allocation, its use and its cudaFreeAsync are ordered on the stream like kernels:
      // the freed block can serve the next cudaMallocAsync on this stream at once.
      AsyncDeviceBuffer<unsigned char> scratch(
          bytes, stream, strategy == AllocStrategy::async_retaining_pool ? pool->get() : nullptr);
      if (bytes > 0) CUDA_CHECK(cudaMemsetAsync(scratch.data(), 0, bytes, stream));
      break;
    }
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

// ====================================================== 8. what kind of memory is this pointer?

const char* to_string(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::pageable:
      return "pageable";
    case MemoryKind::pinned_host:
      return "pinned host";
    case MemoryKind::device:
      return "device";
    case MemoryKind::managed:
      return "managed";
  }
  return "?";
}

unsigned host_alloc_flags(void* pinned) {
  require(pinned != nullptr, "host_alloc_flags: expected a non-null pointer from cudaHostAlloc");
  unsigned flags = 0;
  CUDA_CHECK(cudaHostGetFlags(&flags, pinned));
  return flags;
}

std::string describe_host_alloc_flags(unsigned flags) {
  std::string out;
  const auto add = [&](unsigned bit, const char* name) {
    if ((flags & bit) == 0) return;
    if (!out.empty()) out += '|';
    out += name;
    flags &= ~bit;
  };
  add(cudaHostAllocPortable, "portable");
  add(cudaHostAllocMapped, "mapped");
  add(cudaHostAllocWriteCombined, "write-combined");
  if (flags != 0) add(flags, "unknown flags");  // bits added by a later CUDA
  return out.empty() ? "default" : out;
}

}  // namespace lesson02

// The exercise solutions (solutions.cuh): compiled here, in this translation unit, by the
// lesson build only; the exercise build takes exercise.cu instead. Try the exercises first.
#ifndef LESSON_EXERCISE_BUILD
#include "solutions.cuh"
#endif
