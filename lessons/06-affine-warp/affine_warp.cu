// Lesson 06: letterbox preprocessing, from a plain warp kernel to a fused, batched one.
// The kernels in the order they are taught; see affine_warp.cuh for the list and the semantics.
#include "affine_warp.cuh"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "common/cuda_check.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"

namespace lesson06 {

// ------------------------------------------------------------------------ validation

namespace {
std::string prefix(const char* who) {
  return std::string(who) + ": ";
}

void check_size(int w, int h, const char* what, const char* who) {
  if (w < 1 || h < 1) {
    throw std::invalid_argument(prefix(who) + what + " size must be at least 1x1, got " +
                                std::to_string(w) + "x" + std::to_string(h));
  }
  if (w > kMaxDimension || h > kMaxDimension) {
    throw std::invalid_argument(prefix(who) + what + " size must be at most " +
                                std::to_string(kMaxDimension) +
                                " per side (OpenCV's coordinate "
                                "limit), got " +
                                std::to_string(w) + "x" + std::to_string(h));
  }
}

template <class T>
void check_destination(const T* dst, const char* who) {
  if (dst == nullptr) throw std::invalid_argument(prefix(who) + "destination pointer is null");
}

}  // namespace

void validate_source(const ImageView& src, const char* who) {
  if (src.width == 0 || src.height == 0) {
    throw std::invalid_argument(prefix(who) + "source image is empty (" +
                                std::to_string(src.width) + "x" + std::to_string(src.height) +
                                "); expected at least 1x1");
  }
  if (src.channels != 3) {
    throw std::invalid_argument(prefix(who) + "expected a 3-channel BGR image, got " +
                                std::to_string(src.channels) + " channels");
  }
  check_size(src.width, src.height, "source", who);
  if (src.data == nullptr) throw std::invalid_argument(prefix(who) + "source data is null");
  if (src.pitch < 3 * static_cast<std::size_t>(src.width)) {
    throw std::invalid_argument(prefix(who) + "source row pitch " + std::to_string(src.pitch) +
                                " bytes is smaller than 3 x width = " +
                                std::to_string(3 * static_cast<std::size_t>(src.width)));
  }
}

void validate_target(int dst_w, int dst_h, const char* who) {
  check_size(dst_w, dst_h, "target", who);
}

void validate_nv12(const Nv12View& f, const char* who) {
  if (f.width == 0 || f.height == 0) {
    throw std::invalid_argument(prefix(who) + "NV12 frame is empty (" + std::to_string(f.width) +
                                "x" + std::to_string(f.height) + "); expected at least 1x1");
  }
  check_size(f.width, f.height, "NV12 frame", who);
  if (f.y == nullptr || f.uv == nullptr) {
    throw std::invalid_argument(prefix(who) + "NV12 frame: the " + (f.y == nullptr ? "Y" : "UV") +
                                " plane pointer is null");
  }
  if (f.y_pitch < static_cast<std::size_t>(f.width)) {
    throw std::invalid_argument(prefix(who) + "NV12 Y pitch " + std::to_string(f.y_pitch) +
                                " bytes is smaller than the width " + std::to_string(f.width));
  }
  const std::size_t uv_row = 2 * ((static_cast<std::size_t>(f.width) + 1) / 2);
  if (f.uv_pitch < uv_row) {
    throw std::invalid_argument(
        prefix(who) + "NV12 UV pitch " + std::to_string(f.uv_pitch) +
        " bytes is smaller than 2 x ceil(width / 2) = " + std::to_string(uv_row));
  }
}

void validate_warp_range(const Affine2x3& dst_to_src, int dst_w, int dst_h, const char* who) {
  const double* m = dst_to_src.m;
  for (int k = 0; k < 6; ++k) {
    if (!std::isfinite(m[k])) {
      throw std::invalid_argument(prefix(who) + "the matrix must be finite, got a NaN or inf");
    }
  }
  // Each term is linear in x or y, so the largest sum of |terms| sits at the far corner.
  const double xmax = dst_w > 0 ? dst_w - 1.0 : 0.0, ymax = dst_h > 0 ? dst_h - 1.0 : 0.0;
  const double reach = std::max(std::fabs(m[0]) * xmax + std::fabs(m[1]) * ymax + std::fabs(m[2]),
                                std::fabs(m[3]) * xmax + std::fabs(m[4]) * ymax + std::fabs(m[5]));
  if (!(reach <= kMaxSourceReach)) {
    throw std::invalid_argument(
        prefix(who) + "this warp maps output pixels up to " + std::to_string(std::lround(reach)) +
        " source pixels away; at most " + std::to_string(static_cast<long>(kMaxSourceReach)) +
        " fit the fixed-point arithmetic (an extreme aspect ratio or scale?)");
  }
}

void validate_normalize(const Normalize& norm, const char* who) {
  // The same rule as lesson 03's bgr8_to_rgb_planar. A std below 1e-6 is a unit mistake or a
  // typo, and 1 / (255 * 1e-45) is inf.
  static const char* const names[3] = {"R", "G", "B"};
  for (int c = 0; c < 3; ++c) {
    if (!(std::isfinite(norm.mean[c]) && std::isfinite(norm.std[c]) &&
          norm.std[c] >= kMinNormStd)) {
      std::ostringstream msg;
      msg << prefix(who) << "std must be finite and >= " << kMinNormStd
          << " and mean finite, got mean " << norm.mean[c] << ", std " << norm.std[c]
          << " for channel " << names[c];
      throw std::invalid_argument(msg.str());
    }
  }
}

ChannelTransform channel_transform(const Normalize& norm) {
  ChannelTransform t;
  for (int c = 0; c < 3; ++c) {
    t.scale[c] = static_cast<float>(1.0 / (255.0 * norm.std[c]));
    t.bias[c] = static_cast<float>(-static_cast<double>(norm.mean[c]) / norm.std[c]);
  }
  return t;
}

// ------------------------------------------------------------------------ warp tables (host)

WarpTable make_warp_table(const Affine2x3& dst_to_src, int dst_w, int dst_h, const char* who) {
  validate_target(dst_w, dst_h, who);
  validate_warp_range(dst_to_src, dst_w, dst_h, who);
  const double* m = dst_to_src.m;
  const double scale = static_cast<double>(1 << kCoordBits);     // OpenCV's AB_SCALE, 1024
  const int round_half = 1 << (kCoordBits - kSubpixelBits - 1);  // its round_delta, 16
  // std::lrint rounds half to even in the default rounding mode, as cvRound does. The order of
  // the operations is OpenCV's: (m0 * x) * 1024 and (m1 * y + m2) * 1024, each a double rounding.
  const auto fixed = [](double v) { return static_cast<int>(std::lrint(v)); };
  WarpTable t;
  t.dst_w = dst_w;
  t.dst_h = dst_h;
  t.terms.resize(static_cast<std::size_t>(dst_w) + dst_h);
  int2* column = t.terms.data();
  int2* row = column + dst_w;
  for (int x = 0; x < dst_w; ++x) {
    const double xd = x;
    column[x] = make_int2(fixed(m[0] * xd * scale), fixed(m[3] * xd * scale));
  }
  for (int y = 0; y < dst_h; ++y) {
    const double yd = y;
    row[y] = make_int2(fixed((m[1] * yd + m[2]) * scale) + round_half,
                       fixed((m[4] * yd + m[5]) * scale) + round_half);
  }
  return t;
}

namespace {
// Per source row r, the first and last column any in-image tap reads (-1: none): what
// source_footprint and nv12_footprint count.
struct TouchedSpans {
  std::vector<int> first, last;
};
TouchedSpans touched_spans(int src_w, int src_h, const Affine2x3& dst_to_src, int dst_w, int dst_h,
                           const char* who) {
  check_size(src_w, src_h, "source", who);
  const WarpTable t = make_warp_table(dst_to_src, dst_w, dst_h, who);
  const WarpTableView v = view_of(t);
  // first[r], last[r]: the first and last source column a tap reads in source row r (-1: none).
  std::vector<int> first(src_h, -1), last(src_h, -1);
  const auto touch = [&](int row, int c0, int c1) {  // columns [c0, c1] of `row` are read
    if (first[row] < 0 || c0 < first[row]) first[row] = c0;
    if (c1 > last[row]) last[row] = c1;
  };
  const auto clip = [](int lo, int hi, int n, int* a, int* b) {  // [lo, hi] within [0, n)
    *a = std::max(lo, 0);
    *b = std::min(hi, n - 1);
    return *a <= *b;
  };
  const double* m = dst_to_src.m;
  if (m[1] == 0.0 && m[3] == 0.0) {
    // Axis-aligned: the source column depends on x only and the row on y only, so the taps form
    // a product of the columns some x reads and the rows some y reads.
    int c_lo = src_w, c_hi = -1;
    for (int x = 0; x < dst_w; ++x) {
      int a = 0, b = 0;
      const int sx = source_position(v, x, 0).x >> kSubpixelBits;
      if (clip(sx, sx + 1, src_w, &a, &b)) c_lo = std::min(c_lo, a), c_hi = std::max(c_hi, b);
    }
    if (c_hi >= 0) {
      for (int y = 0; y < dst_h; ++y) {
        int a = 0, b = 0;
        const int sy = source_position(v, 0, y).y >> kSubpixelBits;
        if (clip(sy, sy + 1, src_h, &a, &b)) {
          for (int r = a; r <= b; ++r) touch(r, c_lo, c_hi);
        }
      }
    }
  } else {
    for (int y = 0; y < dst_h; ++y) {
      for (int x = 0; x < dst_w; ++x) {
        const SubpixelPos p = source_position(v, x, y);
        const int sx = p.x >> kSubpixelBits, sy = p.y >> kSubpixelBits;
        int c0 = 0, c1 = 0, r0 = 0, r1 = 0;
        if (!clip(sx, sx + 1, src_w, &c0, &c1) || !clip(sy, sy + 1, src_h, &r0, &r1)) continue;
        for (int r = r0; r <= r1; ++r) touch(r, c0, c1);
      }
    }
  }
  return {std::move(first), std::move(last)};
}
}  // namespace

SourceFootprint source_footprint(int src_w, int src_h, const Affine2x3& dst_to_src, int dst_w,
                                 int dst_h) {
  const TouchedSpans s = touched_spans(src_w, src_h, dst_to_src, dst_w, dst_h, "source_footprint");
  SourceFootprint f;
  for (int r = 0; r < src_h; ++r) {
    if (s.first[r] < 0) continue;
    ++f.rows;
    f.bytes += 3 * static_cast<std::size_t>(s.last[r] - s.first[r] + 1);
  }
  return f;
}

SourceFootprint nv12_footprint(int src_w, int src_h, const Affine2x3& dst_to_src, int dst_w,
                               int dst_h) {
  const TouchedSpans s = touched_spans(src_w, src_h, dst_to_src, dst_w, dst_h, "nv12_footprint");
  SourceFootprint f;
  // Chroma row j serves luma rows 2j and 2j + 1: its span is the union of theirs, in pairs.
  for (int j = 0; 2 * j < src_h; ++j) {
    int lo = -1, hi = -1;
    for (int r = 2 * j; r <= 2 * j + 1 && r < src_h; ++r) {
      if (s.first[r] < 0) continue;
      ++f.rows;
      f.bytes += static_cast<std::size_t>(s.last[r] - s.first[r] + 1);  // luma, 1 byte a pixel
      lo = lo < 0 ? s.first[r] : std::min(lo, s.first[r]);
      hi = std::max(hi, s.last[r]);
    }
    if (lo >= 0) f.bytes += 2 * static_cast<std::size_t>((hi >> 1) - (lo >> 1) + 1);
  }
  return f;
}

// ------------------------------------------------------------------------ DeviceImage

DeviceImage::DeviceImage(int width, int height) : width_(width), height_(height) {
  check_size(width, height, "image", "DeviceImage");
  // cudaMallocPitch pads each row so that it starts at an address the memory system likes
  // (Programming Guide, "Device Memory"): row y is at data + y * pitch, pitch >= 3 * width.
  CUDA_CHECK(cudaMallocPitch(reinterpret_cast<void**>(&data_), &pitch_,
                             3 * static_cast<std::size_t>(width),
                             static_cast<std::size_t>(height)));
}

DeviceImage::~DeviceImage() {
  reset();
}

DeviceImage::DeviceImage(DeviceImage&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      pitch_(std::exchange(other.pitch_, 0)),
      width_(std::exchange(other.width_, 0)),
      height_(std::exchange(other.height_, 0)) {}

DeviceImage& DeviceImage::operator=(DeviceImage&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    pitch_ = std::exchange(other.pitch_, 0);
    width_ = std::exchange(other.width_, 0);
    height_ = std::exchange(other.height_, 0);
  }
  return *this;
}

void DeviceImage::reset() noexcept {
  if (data_ != nullptr) cudaFree(data_);  // error ignored: destructors must not throw
  data_ = nullptr;
  pitch_ = 0;
  width_ = height_ = 0;
}

void DeviceImage::upload(const ImageView& host, cudaStream_t stream) {
  validate_source(host, "DeviceImage::upload");
  if (host.width != width_ || host.height != height_) {
    throw std::invalid_argument("DeviceImage::upload: expected a " + std::to_string(width_) + "x" +
                                std::to_string(height_) + " image, got " +
                                std::to_string(host.width) + "x" + std::to_string(host.height));
  }
  CUDA_CHECK(cudaMemcpy2DAsync(data_, pitch_, host.data, host.pitch,
                               3 * static_cast<std::size_t>(width_), height_,
                               cudaMemcpyHostToDevice, stream));
}

// ------------------------------------------------------------------------ DeviceNv12

DeviceNv12::DeviceNv12(int width, int height) : width_(width), height_(height) {
  check_size(width, height, "NV12 frame", "DeviceNv12");
  const auto padded = [](std::size_t row) { return (row + 255) / 256 * 256; };
  y_pitch_ = padded(static_cast<std::size_t>(width));
  uv_pitch_ = padded(2 * ((static_cast<std::size_t>(width) + 1) / 2));
  y_ = course::DeviceBuffer<std::uint8_t>(y_pitch_ * height);
  uv_ =
      course::DeviceBuffer<std::uint8_t>(uv_pitch_ * ((static_cast<std::size_t>(height) + 1) / 2));
}

void DeviceNv12::upload(const Nv12View& host, cudaStream_t stream) {
  validate_nv12(host, "DeviceNv12::upload");
  if (host.width != width_ || host.height != height_) {
    throw std::invalid_argument("DeviceNv12::upload: expected a " + std::to_string(width_) + "x" +
                                std::to_string(height_) + " frame, got " +
                                std::to_string(host.width) + "x" + std::to_string(host.height));
  }
  CUDA_CHECK(cudaMemcpy2DAsync(y_.data(), y_pitch_, host.y, host.y_pitch, width_, height_,
                               cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemcpy2DAsync(uv_.data(), uv_pitch_, host.uv, host.uv_pitch,
                               2 * ((static_cast<std::size_t>(width_) + 1) / 2), (height_ + 1) / 2,
                               cudaMemcpyHostToDevice, stream));
}

// ------------------------------------------------------------------------ DeviceTable

namespace {

// What a table depends on: the stream that reads it, the device, the matrix (bit for bit) and
// the output size. Keying by stream keeps each slot's users on one stream, so "the stream has
// passed the last launch that read it" is one event.
struct TableKey {
  cudaStream_t stream = nullptr;
  int device = -1;
  int dst_w = 0, dst_h = 0;
  double m[6] = {};
  bool operator==(const TableKey& o) const {
    return stream == o.stream && device == o.device && dst_w == o.dst_w && dst_h == o.dst_h &&
           std::memcmp(m, o.m, sizeof m) == 0;
  }
};

// How many live CUDA graphs hold a slot. Shared with the graphs' user objects, whose release CUDA
// runs on its own thread (hence atomic), possibly after the cache is gone (hence shared).
using GraphCount = std::shared_ptr<std::atomic<int>>;

struct TableSlot {
  bool filled = false;
  TableKey key;
  int held = 0;                                               // live DeviceTables on this slot
  GraphCount graphs = std::make_shared<std::atomic<int>>(0);  // live graphs that replay it
  bool pinned_by_capture = false;         // ... and whether `pinned_capture` is one of them
  unsigned long long pinned_capture = 0;  // the id of the last capture that pinned the slot
  std::uint64_t last_hit = 0;             // for least-recently-used replacement
  course::DeviceBuffer<int2> device;
  course::PinnedBuffer<int2> staging;              // the copy engine reads the upload from here
  course::Event uploaded{cudaEventDisableTiming};  // after the copy out of `staging`
  course::Event used{cudaEventDisableTiming};      // after the last launch that read `device`
  bool upload_recorded = false, use_recorded = false;
  int device_ordinal = -1;  // where `device` was allocated

  bool busy() const { return held > 0 || graphs->load(std::memory_order_acquire) > 0; }
};

// Enough for a 2048 x 2048 output without growing; growing reallocates (cudaMalloc blocks).
constexpr std::size_t kMinTablePairs = 4096;

// The state of `stream` for the cache: whether it captures, and if so into which graph (only
// valid while Active). Throws CudaError (cudaErrorStreamCaptureImplicit for the legacy stream
// while another blocking stream captures).
struct CaptureState {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  cudaGraph_t graph = nullptr;
};
CaptureState capture_state(cudaStream_t stream) {
  CaptureState c;
  CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &c.status, &c.id, &c.graph));
  return c;
}

// The user object's destructor: CUDA calls it (on an internal thread, where no CUDA call is
// allowed) once no graph holds the reference and their launches have finished.
void unpin_from_graph(void* p) {
  const GraphCount* count = static_cast<GraphCount*>(p);
  (*count)->fetch_sub(1, std::memory_order_acq_rel);
  delete count;
}

// Moves one reference to a new user object into `graph`: the slot stays busy until the graph
// and every executable graph made or updated from it are destroyed and their launches done.
// Once per capture per slot (a batch of 32 frames of one size pins its slot once).
void pin_to_graph(TableSlot& s, const CaptureState& c) {
  if (s.pinned_by_capture && s.pinned_capture == c.id) return;
  auto* count = new GraphCount(s.graphs);
  s.graphs->fetch_add(1, std::memory_order_acq_rel);
  cudaUserObject_t object = nullptr;
  const cudaError_t created =
      cudaUserObjectCreate(&object, count, unpin_from_graph, 1, cudaUserObjectNoDestructorSync);
  if (created != cudaSuccess) {
    s.graphs->fetch_sub(1, std::memory_order_acq_rel);
    delete count;
    CUDA_CHECK(created);
  }
  const cudaError_t moved = cudaGraphRetainUserObject(c.graph, object, 1, cudaGraphUserObjectMove);
  if (moved != cudaSuccess) {
    cudaUserObjectRelease(object, 1);  // ours was the only reference: unpins
    CUDA_CHECK(moved);
  }
  s.pinned_by_capture = true;
  s.pinned_capture = c.id;
}

class TableCache {
 public:
  TableCache() = default;
  TableCache(const TableCache&) = delete;
  TableCache& operator=(const TableCache&) = delete;

  // At thread exit. A graph destroyed just before (lesson 09's workers destroy theirs, then end)
  // drops its references on CUDA's thread a moment later: wait for that, up to 0.5 s. A slot a
  // graph still holds after that keeps its memory (deliberately leaked): freeing it would let a
  // replay read freed memory.
  ~TableCache() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    for (TableSlot& s : slots_) {
      while (s.graphs->load(std::memory_order_acquire) > 0 &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      if (s.graphs->load(std::memory_order_acquire) > 0) {
        new course::DeviceBuffer<int2>(std::move(s.device));   // never freed, on purpose
        new course::PinnedBuffer<int2>(std::move(s.staging));  // the graph's copy node may read it
      }
    }
  }

  TableSlot& slot(int i) { return slots_[i]; }

  int graph_held() const noexcept {
    int n = 0;
    for (const TableSlot& s : slots_) n += s.graphs->load(std::memory_order_acquire) > 0;
    return n;
  }

  int acquire(const Affine2x3& inv, int dst_w, int dst_h, cudaStream_t stream) {
    TableKey key;
    key.stream = stream;
    CUDA_CHECK(cudaGetDevice(&key.device));
    key.dst_w = dst_w;
    key.dst_h = dst_h;
    std::memcpy(key.m, inv.m, sizeof key.m);
    const CaptureState capture = capture_state(stream);
    ++clock_;
    for (int i = 0; i < kTableCacheSlots; ++i) {
      TableSlot& s = slots_[i];
      if (s.filled && s.key == key) {
        // A capture replays this table for the graph's whole life: pin it to the graph first.
        // (An invalidated capture never becomes a graph: nothing to pin.)
        if (capture.status == cudaStreamCaptureStatusActive) pin_to_graph(s, capture);
        ++s.held;
        s.last_hit = clock_;
        return i;
      }
    }
    if (capture.status != cudaStreamCaptureStatusNone) {
      throw std::logic_error(
          "device_table: the stream is capturing a CUDA graph and this geometry's table is not "
          "cached for it; a capture only finds tables (building one uploads it and may "
          "allocate, which a capture must not record). Run the same launch once on this stream "
          "before capturing");
    }
    // A miss: build the table on the host (this validates), then refill the least recently used
    // slot that nobody holds: no DeviceTable, no graph.
    const WarpTable table = make_warp_table(inv, dst_w, dst_h, "device_table");
    int victim = -1;
    for (int i = 0; i < kTableCacheSlots; ++i) {
      const TableSlot& s = slots_[i];
      if (s.busy()) continue;
      if (!s.filled) {  // an empty slot first
        victim = i;
        break;
      }
      if (victim < 0 || s.last_hit < slots_[victim].last_hit) victim = i;
    }
    if (victim < 0) {
      throw std::logic_error("device_table: all " + std::to_string(kTableCacheSlots) +
                             " table slots of this thread are held (by DeviceTables, or by CUDA "
                             "graphs that replay them); destroy DeviceTables after their launch, "
                             "and graphs you no longer replay");
    }
    TableSlot& s = slots_[victim];
    s.filled = false;  // until the upload is enqueued
    const std::size_t pairs = table.terms.size();
    // The host rewrites `staging`: the copy engine must be done reading its previous upload.
    // (Both events were recorded outside any capture: the cache never records into one. A graph
    // that replayed the slot is gone, and so are its launches: CUDA released the slot only then.)
    if (s.upload_recorded) s.uploaded.synchronize();
    // The device buffer: launches still reading the old table (on the old stream) come first.
    if (s.use_recorded) CUDA_CHECK(cudaStreamWaitEvent(stream, s.used, 0));
    if (s.device.size() < pairs || s.device_ordinal != key.device) {
      const std::size_t n = std::max(pairs, kMinTablePairs);
      if (s.use_recorded) s.used.synchronize();  // cudaFree must not pull memory from under it
      s.device = course::DeviceBuffer<int2>(n);
      s.staging = course::PinnedBuffer<int2>(n);
      s.device_ordinal = key.device;
    }
    std::copy(table.terms.begin(), table.terms.end(), s.staging.data());
    CUDA_CHECK(cudaMemcpyAsync(s.device.data(), s.staging.data(), pairs * sizeof(int2),
                               cudaMemcpyHostToDevice, stream));
    s.uploaded.record(stream);
    s.upload_recorded = true;
    s.key = key;
    s.filled = true;
    s.pinned_by_capture = false;
    s.held = 1;
    s.last_hit = clock_;
    return victim;
  }

  void release(int i, cudaStream_t stream) noexcept {
    TableSlot& s = slots_[i];
    // Never into a capturing stream: the event would belong to the capture, and waiting on it
    // later fails (cudaErrorCapturedEvent). A captured launch is covered by its graph's pin.
    // If the query fails (the legacy stream while another stream captures), so did the launch.
    // Other errors are ignored (a destructor calls this); a failed record leaves an error that
    // the next CUDA call reports.
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &status) == cudaSuccess &&
        status == cudaStreamCaptureStatusNone && cudaEventRecord(s.used, stream) == cudaSuccess) {
      s.use_recorded = true;
    }
    --s.held;
  }

 private:
  TableSlot slots_[kTableCacheSlots];
  std::uint64_t clock_ = 0;
};

TableCache& thread_table_cache() {
  thread_local TableCache cache;
  return cache;
}

}  // namespace

DeviceTable device_table(const Affine2x3& dst_to_src, int dst_w, int dst_h, cudaStream_t stream) {
  TableCache& cache = thread_table_cache();
  const int i = cache.acquire(dst_to_src, dst_w, dst_h, stream);
  DeviceTable t;
  t.slot_ = i;
  const int2* base = cache.slot(i).device.data();
  t.view_ = {base, base + dst_w};
  return t;
}

int tables_held_by_graphs() {
  return thread_table_cache().graph_held();
}

DeviceTable::~DeviceTable() {
  release();
}

DeviceTable::DeviceTable(DeviceTable&& other) noexcept
    : view_(std::exchange(other.view_, WarpTableView{})), slot_(std::exchange(other.slot_, -1)) {}

DeviceTable& DeviceTable::operator=(DeviceTable&& other) noexcept {
  if (this != &other) {
    release();
    view_ = std::exchange(other.view_, WarpTableView{});
    slot_ = std::exchange(other.slot_, -1);
  }
  return *this;
}

void DeviceTable::release() noexcept {
  if (slot_ < 0) return;
  TableCache& cache = thread_table_cache();
  cache.release(slot_, cache.slot(slot_).key.stream);
  slot_ = -1;
  view_ = {};
}

// ======================================================================== kernels

namespace {

// 32 x 8 threads: a warp covers 32 neighbouring pixels of one row, so its stores to each output
// row (and plane) are contiguous: coalesced (Programming Guide, "Device Memory Accesses").
constexpr int kBlockX = 32;
constexpr int kBlockY = 8;

dim3 grid_for(int dst_w, int dst_h, int pixels_per_thread, int frames = 1) {
  const int columns = (dst_w + pixels_per_thread - 1) / pixels_per_thread;
  return dim3((columns + kBlockX - 1) / kBlockX, (dst_h + kBlockY - 1) / kBlockY, frames);
}

// ---- v1: one thread per output pixel, HWC uint8 BGR out: cv::warpAffine on the GPU.
// The image description and the two table pointers travel by value as kernel parameters:
// parameters live in constant memory, and every thread of a warp reading the same word is a
// broadcast (Programming Guide, "Function Parameters" and "Constant Memory"). The tables
// themselves are in global memory (see DeviceTable): each thread reads its own column pair.
// Per pixel: two table loads, two integer additions and shifts, the bilinear sample. No FP64.
__global__ void warp_affine_v1_kernel(ImageView src, WarpTableView table,
                                      std::uint8_t* __restrict__ dst, int dst_w, int dst_h,
                                      std::uint8_t border) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= dst_w || y >= dst_h) return;
  std::uint8_t bgr[3];
  warp_pixel_bgr(src, table, x, y, border, bgr);
  std::uint8_t* out = dst + (static_cast<std::size_t>(y) * dst_w + x) * 3;
  out[0] = bgr[0];
  out[1] = bgr[1];
  out[2] = bgr[2];
}

// ---- The unfused second pass: read the uint8 letterbox back, write planar float RGB.
// What a port of the OpenCV pipeline (cvtColor, convertTo, split) to the GPU looks like: the
// intermediate image is written by one kernel and read back by the next.
__global__ void hwc_u8_to_chw_f32_kernel(const std::uint8_t* __restrict__ src, int w, int h,
                                         float* __restrict__ dst, ChannelTransform t) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  const std::size_t plane = static_cast<std::size_t>(w) * h;
  const std::size_t i = static_cast<std::size_t>(y) * w + x;
  store_rgb_planar(dst, plane, i, src + 3 * i, t);
}

// ---- v2: fused. The same sample as v1, but the thread swaps BGR -> RGB, normalises and writes
// straight into the three planes: one pass, no intermediate image, one launch.
__global__ void letterbox_v2_fused_kernel(ImageView src, WarpTableView table,
                                          float* __restrict__ dst, int dst_w, int dst_h,
                                          ChannelTransform t) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= dst_w || y >= dst_h) return;
  std::uint8_t bgr[3];
  warp_pixel_bgr(src, table, x, y, kPadValue, bgr);
  const std::size_t plane = static_cast<std::size_t>(dst_w) * dst_h;
  store_rgb_planar(dst, plane, static_cast<std::size_t>(y) * dst_w + x, bgr, t);
}

// ---- v3: four neighbouring pixels per thread. The row pair of the source position is the
// same for all four (loaded once), and each plane gets one 16-byte float4 store: a warp writes
// 512 contiguous bytes per plane with 32 instructions instead of 128.
constexpr int kPixelsPerThread = 4;

// The sources the quad samples: a BGR image, or an NV12 frame with its matrix (v5, v6). Each
// gives one pixel's 8-bit B, G, R at a 1/32-grid position, border 114.
struct BgrSource {
  ImageView img;
  __device__ void sample(SubpixelPos p, std::uint8_t bgr[3]) const {
    bilinear_sample_bgr(img, p, kPadValue, bgr);
  }
};
struct Nv12Source {
  Nv12View img;
  YuvToRgb k;
  __device__ void sample(SubpixelPos p, std::uint8_t bgr[3]) const {
    bilinear_sample_nv12(img, k, p, kPadValue, bgr);
  }
};

// Stores of the quad's values: float as is; __half rounded once, to nearest even
// (__float2half_rn). Four values in one store: 16 bytes (float4) or 8 (two __half2).
__device__ inline void store1(float* p, float v) {
  *p = v;
}
__device__ inline void store1(__half* p, float v) {
  *p = __float2half_rn(v);
}
__device__ inline void store4(float* p, const float v[4]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ inline void store4(__half* p, const float v[4]) {
  const __half2 lo = __halves2half2(__float2half_rn(v[0]), __float2half_rn(v[1]));
  const __half2 hi = __halves2half2(__float2half_rn(v[2]), __float2half_rn(v[3]));
  uint2 bits;
  bits.x = *reinterpret_cast<const unsigned*>(&lo);
  bits.y = *reinterpret_cast<const unsigned*>(&hi);
  *reinterpret_cast<uint2*>(p) = bits;
}
template <class T>
__device__ inline bool aligned_quad(const T* p) {  // 4 values in one store need 4 x sizeof(T)
  return (reinterpret_cast<std::uintptr_t>(p) & (kPixelsPerThread * sizeof(T) - 1)) == 0;
}

template <class Source, class T>
__device__ inline void letterbox_quad(const Source& src, const WarpTableView& table, int x0, int y,
                                      T* __restrict__ dst, int dst_w, int dst_h,
                                      const ChannelTransform& t) {
  float r[kPixelsPerThread], g[kPixelsPerThread], b[kPixelsPerThread];
  const int2 row = detail::load_pair(table.row + y);
#pragma unroll
  for (int k = 0; k < kPixelsPerThread; ++k) {
    // Past the right edge, recompute the last pixel rather than branch: its values are dropped.
    const int x = min(x0 + k, dst_w - 1);
    std::uint8_t bgr[3];
    src.sample(subpixel_position(row, detail::load_pair(table.column + x)), bgr);
    r[k] = normalize_value(bgr[2], t, 0);
    g[k] = normalize_value(bgr[1], t, 1);
    b[k] = normalize_value(bgr[0], t, 2);
  }
  const std::size_t plane = static_cast<std::size_t>(dst_w) * dst_h;
  T* pr = dst + static_cast<std::size_t>(y) * dst_w + x0;
  T* pg = pr + plane;
  T* pb = pg + plane;
  // A vector store needs its own size of alignment: true when dst_w is a multiple of 4 (and the
  // tensor starts aligned, as cudaMalloc's do). Other widths take the scalar path.
  if (x0 + kPixelsPerThread <= dst_w && aligned_quad(pr) && aligned_quad(pg) && aligned_quad(pb)) {
    store4(pr, r);
    store4(pg, g);
    store4(pb, b);
  } else {
    for (int k = 0; k < kPixelsPerThread && x0 + k < dst_w; ++k) {
      store1(pr + k, r[k]);
      store1(pg + k, g[k]);
      store1(pb + k, b[k]);
    }
  }
}

__global__ void letterbox_v3_vec4_kernel(ImageView src, WarpTableView table,
                                         float* __restrict__ dst, int dst_w, int dst_h,
                                         ChannelTransform t) {
  const int x0 = (blockIdx.x * blockDim.x + threadIdx.x) * kPixelsPerThread;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x0 >= dst_w || y >= dst_h) return;
  letterbox_quad(BgrSource{src}, table, x0, y, dst, dst_w, dst_h, t);
}

// ---- v5: v3 from an NV12 frame. The colour conversion happens at the four taps of every
// sample (bilinear_sample_nv12: what cvtColor + warpAffine compute), so the frame is read as
// 1.5 bytes a pixel instead of BGR's 3, and no BGR copy of it ever exists. float or __half out.
template <class T>
__global__ void letterbox_nv12_v5_kernel(Nv12View src, YuvToRgb k, WarpTableView table,
                                         T* __restrict__ dst, int dst_w, int dst_h,
                                         ChannelTransform t) {
  const int x0 = (blockIdx.x * blockDim.x + threadIdx.x) * kPixelsPerThread;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x0 >= dst_w || y >= dst_h) return;
  letterbox_quad(Nv12Source{src, k}, table, x0, y, dst, dst_w, dst_h, t);
}

// ---- v4: a batch in one launch. blockIdx.z picks the frame; each frame's pointer, size, pitch
// and table pointers travel in the kernel parameters (40 bytes a frame, 1.3 KB for 32: under
// the 4 KB every CUDA 12 toolkit accepts). All threads of a block read the same descriptor: a
// constant-bank broadcast, no descriptor array in global memory. Each frame has its own matrix,
// so its own table (frames of one size share one: the cache finds it).
//
// v6 is the same kernel for the other formats: the frame descriptor (BGR or NV12) and the output
// type (float or __half) are template parameters. An NV12 descriptor is 56 bytes, 1.8 KB for 32.
struct FrameParams {
  const std::uint8_t* data;
  int width, height;
  std::size_t pitch;
  WarpTableView table;
  __device__ BgrSource source(const YuvToRgb&) const {
    return {ImageView{data, width, height, 3, pitch}};
  }
};
struct Nv12FrameParams {
  Nv12View view;
  WarpTableView table;
  __device__ Nv12Source source(const YuvToRgb& k) const { return {view, k}; }
};
template <class Frame>
struct BatchParams {
  Frame frame[kMaxFramesPerLaunch];
};

template <class Frame, class T>
__global__ void letterbox_batched_kernel(BatchParams<Frame> batch, YuvToRgb k, T* __restrict__ dst,
                                         int dst_w, int dst_h, ChannelTransform t) {
  const int x0 = (blockIdx.x * blockDim.x + threadIdx.x) * kPixelsPerThread;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x0 >= dst_w || y >= dst_h) return;
  const Frame& f = batch.frame[blockIdx.z];
  T* frame_dst = dst + static_cast<std::size_t>(blockIdx.z) * 3 * dst_w * dst_h;
  letterbox_quad(f.source(k), f.table, x0, y, frame_dst, dst_w, dst_h, t);
}

// The geometry of one frame: the letterbox and the inverse matrix the kernels use.
struct Prepared {
  Letterbox lb;
  Affine2x3 inv;
};
Prepared prepare(int src_w, int src_h, int dst_w, int dst_h, const char* who) {
  const Letterbox lb = make_letterbox(src_w, src_h, dst_w, dst_h);
  const Affine2x3 inv = invert_affine(letterbox_matrix(lb));
  validate_warp_range(inv, dst_w, dst_h, who);
  return {lb, inv};
}

// The checks of one frame, BGR or NV12.
void validate_frame(const ImageView& f, const char* who) {
  validate_source(f, who);
}
void validate_frame(const Nv12View& f, const char* who) {
  validate_nv12(f, who);
}

// Every check of a letterbox launcher, all before any work.
template <class View, class T>
Prepared validate_and_prepare(const View& src, const T* dst, int dst_w, int dst_h,
                              const Normalize& norm, const char* who) {
  validate_frame(src, who);
  validate_target(dst_w, dst_h, who);
  check_destination(dst, who);
  validate_normalize(norm, who);
  return prepare(src.width, src.height, dst_w, dst_h, who);
}

// What a batch launcher needs of one frame, BGR or NV12: its descriptor.
FrameParams frame_params(const ImageView& f, const WarpTableView& table) {
  return {f.data, f.width, f.height, f.pitch, table};
}
Nv12FrameParams frame_params(const Nv12View& f, const WarpTableView& table) {
  return {f, table};
}

// v4 and v6: validate every frame, then one launch per kMaxFramesPerLaunch frames.
template <class View, class T>
std::vector<Letterbox> launch_batched(const std::vector<View>& frames, T* dst, int dst_w, int dst_h,
                                      const YuvToRgb& k, const Normalize& norm, cudaStream_t stream,
                                      const char* who) {
  validate_target(dst_w, dst_h, who);
  validate_normalize(norm, who);
  std::vector<Letterbox> geometry;
  if (frames.empty()) return geometry;
  check_destination(dst, who);
  // Validate every frame before launching anything: a bad frame 40 must not leave frames 0-31
  // processed and the rest not.
  for (const View& f : frames) validate_frame(f, who);
  std::vector<Prepared> prepared;
  prepared.reserve(frames.size());
  for (const View& f : frames) prepared.push_back(prepare(f.width, f.height, dst_w, dst_h, who));

  using Frame = decltype(frame_params(frames[0], WarpTableView{}));
  const ChannelTransform t = channel_transform(norm);
  const std::size_t frame_elems = 3 * static_cast<std::size_t>(dst_w) * dst_h;
  for (std::size_t first = 0; first < frames.size(); first += kMaxFramesPerLaunch) {
    const int count =
        static_cast<int>(std::min<std::size_t>(kMaxFramesPerLaunch, frames.size() - first));
    BatchParams<Frame> batch{};
    std::vector<DeviceTable> tables;  // one per frame (frames of one size share a slot)
    tables.reserve(count);
    for (int i = 0; i < count; ++i) {
      tables.push_back(device_table(prepared[first + i].inv, dst_w, dst_h, stream));
      batch.frame[i] = frame_params(frames[first + i], tables.back().view());
    }
    letterbox_batched_kernel<Frame, T>
        <<<grid_for(dst_w, dst_h, kPixelsPerThread, count), dim3(kBlockX, kBlockY), 0, stream>>>(
            batch, k, dst + first * frame_elems, dst_w, dst_h, t);
    CUDA_CHECK_LAUNCH();
  }
  geometry.reserve(prepared.size());
  for (const Prepared& p : prepared) geometry.push_back(p.lb);
  return geometry;
}

template <class T>
Letterbox launch_nv12_v5(const Nv12View& src, T* dst, int dst_w, int dst_h, YuvMatrix matrix,
                         const Normalize& norm, cudaStream_t stream) {
  const char* who = "letterbox_nv12_v5";
  const Prepared p = validate_and_prepare(src, dst, dst_w, dst_h, norm, who);
  const DeviceTable table = device_table(p.inv, dst_w, dst_h, stream);
  letterbox_nv12_v5_kernel<T>
      <<<grid_for(dst_w, dst_h, kPixelsPerThread), dim3(kBlockX, kBlockY), 0, stream>>>(
          src, yuv_to_rgb(matrix), table.view(), dst, dst_w, dst_h, channel_transform(norm));
  CUDA_CHECK_LAUNCH();
  return p.lb;
}

}  // namespace

// ======================================================================== launchers

void warp_affine_v1(const ImageView& src, const Affine2x3& dst_to_src, std::uint8_t* dst, int dst_w,
                    int dst_h, std::uint8_t border, cudaStream_t stream) {
  validate_source(src, "warp_affine_v1");
  validate_target(dst_w, dst_h, "warp_affine_v1");
  check_destination(dst, "warp_affine_v1");
  validate_warp_range(dst_to_src, dst_w, dst_h, "warp_affine_v1");
  // The tables (built on the host once per geometry) outlive the launch: `table` is destroyed
  // after it, which lets the cache reuse the memory only once the stream has passed the kernel.
  const DeviceTable table = device_table(dst_to_src, dst_w, dst_h, stream);
  warp_affine_v1_kernel<<<grid_for(dst_w, dst_h, 1), dim3(kBlockX, kBlockY), 0, stream>>>(
      src, table.view(), dst, dst_w, dst_h, border);
  CUDA_CHECK_LAUNCH();
}

Letterbox letterbox_v1_u8(const ImageView& src, std::uint8_t* dst, int dst_w, int dst_h,
                          cudaStream_t stream) {
  const Prepared p = validate_and_prepare(src, dst, dst_w, dst_h, Normalize{}, "letterbox_v1_u8");
  warp_affine_v1(src, p.inv, dst, dst_w, dst_h, kPadValue, stream);
  return p.lb;
}

void hwc_u8_to_chw_f32(const std::uint8_t* src, int w, int h, float* dst, const Normalize& norm,
                       cudaStream_t stream) {
  validate_target(w, h, "hwc_u8_to_chw_f32");
  if (src == nullptr) throw std::invalid_argument("hwc_u8_to_chw_f32: source pointer is null");
  check_destination(dst, "hwc_u8_to_chw_f32");
  validate_normalize(norm, "hwc_u8_to_chw_f32");
  hwc_u8_to_chw_f32_kernel<<<grid_for(w, h, 1), dim3(kBlockX, kBlockY), 0, stream>>>(
      src, w, h, dst, channel_transform(norm));
  CUDA_CHECK_LAUNCH();
}

Letterbox letterbox_v2_fused(const ImageView& src, float* dst, int dst_w, int dst_h,
                             const Normalize& norm, cudaStream_t stream) {
  const Prepared p = validate_and_prepare(src, dst, dst_w, dst_h, norm, "letterbox_v2_fused");
  const DeviceTable table = device_table(p.inv, dst_w, dst_h, stream);
  letterbox_v2_fused_kernel<<<grid_for(dst_w, dst_h, 1), dim3(kBlockX, kBlockY), 0, stream>>>(
      src, table.view(), dst, dst_w, dst_h, channel_transform(norm));
  CUDA_CHECK_LAUNCH();
  return p.lb;
}

Letterbox letterbox_v3_vec4(const ImageView& src, float* dst, int dst_w, int dst_h,
                            const Normalize& norm, cudaStream_t stream) {
  const Prepared p = validate_and_prepare(src, dst, dst_w, dst_h, norm, "letterbox_v3_vec4");
  const DeviceTable table = device_table(p.inv, dst_w, dst_h, stream);
  letterbox_v3_vec4_kernel<<<grid_for(dst_w, dst_h, kPixelsPerThread), dim3(kBlockX, kBlockY), 0,
                             stream>>>(src, table.view(), dst, dst_w, dst_h,
                                       channel_transform(norm));
  CUDA_CHECK_LAUNCH();
  return p.lb;
}

std::vector<Letterbox> letterbox_v4_batched(const std::vector<ImageView>& frames, float* dst,
                                            int dst_w, int dst_h, const Normalize& norm,
                                            cudaStream_t stream) {
  return launch_batched(frames, dst, dst_w, dst_h, YuvToRgb{}, norm, stream,
                        "letterbox_v4_batched");
}

Letterbox letterbox_nv12_v5(const Nv12View& src, float* dst, int dst_w, int dst_h, YuvMatrix matrix,
                            const Normalize& norm, cudaStream_t stream) {
  return launch_nv12_v5(src, dst, dst_w, dst_h, matrix, norm, stream);
}
Letterbox letterbox_nv12_v5(const Nv12View& src, __half* dst, int dst_w, int dst_h,
                            YuvMatrix matrix, const Normalize& norm, cudaStream_t stream) {
  return launch_nv12_v5(src, dst, dst_w, dst_h, matrix, norm, stream);
}

std::vector<Letterbox> letterbox_v6_batched(const std::vector<ImageView>& frames, __half* dst,
                                            int dst_w, int dst_h, const Normalize& norm,
                                            cudaStream_t stream) {
  return launch_batched(frames, dst, dst_w, dst_h, YuvToRgb{}, norm, stream,
                        "letterbox_v6_batched");
}
std::vector<Letterbox> letterbox_nv12_v6_batched(const std::vector<Nv12View>& frames, float* dst,
                                                 int dst_w, int dst_h, YuvMatrix matrix,
                                                 const Normalize& norm, cudaStream_t stream) {
  return launch_batched(frames, dst, dst_w, dst_h, yuv_to_rgb(matrix), norm, stream,
                        "letterbox_nv12_v6_batched");
}
std::vector<Letterbox> letterbox_nv12_v6_batched(const std::vector<Nv12View>& frames, __half* dst,
                                                 int dst_w, int dst_h, YuvMatrix matrix,
                                                 const Normalize& norm, cudaStream_t stream) {
  return launch_batched(frames, dst, dst_w, dst_h, yuv_to_rgb(matrix), norm, stream,
                        "letterbox_nv12_v6_batched");
}

// ======================================================================== CPU references

std::vector<std::uint8_t> warp_affine_reference(const ImageView& src, const Affine2x3& dst_to_src,
                                                int dst_w, int dst_h, std::uint8_t border) {
  validate_source(src, "warp_affine_reference");
  validate_target(dst_w, dst_h, "warp_affine_reference");
  // The same host tables the launchers upload: the CPU and GPU paths share them.
  const WarpTable table = make_warp_table(dst_to_src, dst_w, dst_h, "warp_affine_reference");
  const WarpTableView v = view_of(table);
  std::vector<std::uint8_t> out(3 * static_cast<std::size_t>(dst_w) * dst_h);
  for (int y = 0; y < dst_h; ++y) {
    for (int x = 0; x < dst_w; ++x) {
      warp_pixel_bgr(src, v, x, y, border, &out[3 * (static_cast<std::size_t>(y) * dst_w + x)]);
    }
  }
  return out;
}

std::vector<std::uint8_t> warp_affine_float_reference(const ImageView& src,
                                                      const Affine2x3& dst_to_src, int dst_w,
                                                      int dst_h, std::uint8_t border) {
  validate_source(src, "warp_affine_float_reference");
  validate_target(dst_w, dst_h, "warp_affine_float_reference");
  validate_warp_range(dst_to_src, dst_w, dst_h, "warp_affine_float_reference");
  const auto tap = [&](int x, int y, int c) -> double {
    const bool inside = x >= 0 && x < src.width && y >= 0 && y < src.height;
    return inside ? src.data[static_cast<std::size_t>(y) * src.pitch + 3 * x + c] : border;
  };
  std::vector<std::uint8_t> out(3 * static_cast<std::size_t>(dst_w) * dst_h);
  for (int y = 0; y < dst_h; ++y) {
    for (int x = 0; x < dst_w; ++x) {
      double sx = 0.0, sy = 0.0;
      apply_affine(dst_to_src, x, y, &sx, &sy);
      const int ix = static_cast<int>(std::floor(sx)), iy = static_cast<int>(std::floor(sy));
      const double ax = sx - ix, ay = sy - iy;
      for (int c = 0; c < 3; ++c) {
        const double v = (1 - ax) * (1 - ay) * tap(ix, iy, c) + ax * (1 - ay) * tap(ix + 1, iy, c) +
                         (1 - ax) * ay * tap(ix, iy + 1, c) + ax * ay * tap(ix + 1, iy + 1, c);
        out[3 * (static_cast<std::size_t>(y) * dst_w + x) + c] =
            static_cast<std::uint8_t>(std::lrint(v));
      }
    }
  }
  return out;
}

std::vector<float> letterbox_reference(const ImageView& src, int dst_w, int dst_h,
                                       const Normalize& norm) {
  validate_source(src, "letterbox_reference");
  validate_target(dst_w, dst_h, "letterbox_reference");
  validate_normalize(norm, "letterbox_reference");
  const Prepared p = prepare(src.width, src.height, dst_w, dst_h, "letterbox_reference");
  const WarpTable table = make_warp_table(p.inv, dst_w, dst_h, "letterbox_reference");
  const WarpTableView v = view_of(table);
  const ChannelTransform t = channel_transform(norm);
  const std::size_t plane = static_cast<std::size_t>(dst_w) * dst_h;
  std::vector<float> out(3 * plane);
  for (int y = 0; y < dst_h; ++y) {
    for (int x = 0; x < dst_w; ++x) {
      std::uint8_t bgr[3];
      warp_pixel_bgr(src, v, x, y, kPadValue, bgr);
      store_rgb_planar(out.data(), plane, static_cast<std::size_t>(y) * dst_w + x, bgr, t);
    }
  }
  return out;
}

namespace {
// The NV12 references' loop: every destination pixel's BGR sample, handed to `emit`.
template <class Emit>
void nv12_reference_loop(const Nv12View& src, int dst_w, int dst_h, YuvMatrix matrix,
                         const char* who, Emit&& emit) {
  validate_nv12(src, who);
  validate_target(dst_w, dst_h, who);
  const Prepared p = prepare(src.width, src.height, dst_w, dst_h, who);
  const WarpTable table = make_warp_table(p.inv, dst_w, dst_h, who);
  const WarpTableView v = view_of(table);
  const YuvToRgb k = yuv_to_rgb(matrix);
  for (int y = 0; y < dst_h; ++y) {
    for (int x = 0; x < dst_w; ++x) {
      std::uint8_t bgr[3];
      bilinear_sample_nv12(src, k, source_position(v, x, y), kPadValue, bgr);
      emit(static_cast<std::size_t>(y) * dst_w + x, bgr);
    }
  }
}
}  // namespace

std::vector<std::uint8_t> warp_nv12_reference(const Nv12View& src, int dst_w, int dst_h,
                                              YuvMatrix matrix) {
  validate_target(dst_w, dst_h, "warp_nv12_reference");  // before the allocation
  std::vector<std::uint8_t> out(3 * static_cast<std::size_t>(dst_w) * dst_h);
  nv12_reference_loop(src, dst_w, dst_h, matrix, "warp_nv12_reference",
                      [&](std::size_t i, const std::uint8_t bgr[3]) {
                        std::copy(bgr, bgr + 3, out.begin() + 3 * i);
                      });
  return out;
}

std::vector<float> letterbox_nv12_reference(const Nv12View& src, int dst_w, int dst_h,
                                            YuvMatrix matrix, const Normalize& norm) {
  validate_target(dst_w, dst_h, "letterbox_nv12_reference");  // before the allocation
  validate_normalize(norm, "letterbox_nv12_reference");
  const ChannelTransform t = channel_transform(norm);
  const std::size_t plane = static_cast<std::size_t>(dst_w) * dst_h;
  std::vector<float> out(3 * plane);
  nv12_reference_loop(src, dst_w, dst_h, matrix, "letterbox_nv12_reference",
                      [&](std::size_t i, const std::uint8_t bgr[3]) {
                        store_rgb_planar(out.data(), plane, i, bgr, t);
                      });
  return out;
}

}  // namespace lesson06

// The exercise solutions (solutions.cuh): compiled here, in this translation unit, by the
// lesson build only; the exercise build takes exercise.cu instead. Try the exercises first.
#ifndef LESSON_EXERCISE_BUILD
#include "solutions.cuh"
#endif
