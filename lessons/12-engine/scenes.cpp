// Lesson 12: the scene generator (scenes.hpp). Host C++ only; also built alone as
// liblesson12_scenes.so for the training script's ctypes.
//
//   Rng                 splitmix64: the same stream on every platform and compiler
//   plan_scene          letterbox, background, objects: every random choice, in a fixed order
//   shape spans         rectangles, ellipses, triangles as per-row pixel spans, integer math
//   ObjectCanvas        the object-id buffer: painting, visibility counts, undo of a rejected
//                       placement
//   compose             background + objects + noise + bands -> RGB, and the visible boxes
//
// Speed matters (training renders ~1000 scenes a second through ctypes): objects are painted
// into a one-byte id buffer, and the RGB image is written once, in one pass, at the end.
#include "scenes.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace lesson12 {
namespace {

// ------------------------------------------------------------------------------------- Rng

struct Rng {
  std::uint64_t state;
  explicit Rng(std::uint64_t seed) : state(seed) {}
  std::uint64_t next() {  // splitmix64 (Steele, Lea, Flood 2014)
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform integer in [lo, hi] (the modulo bias, < 2^-40 here, does not matter).
  int uniform(int lo, int hi) {
    return lo + static_cast<int>(next() % static_cast<std::uint64_t>(hi - lo + 1));
  }
  // Uniform float in [0, 1): 24 random bits, exact.
  float unit() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }
  bool chance(int percent) { return uniform(0, 99) < percent; }
};

std::uint8_t clamp_u8(int v) {
  return static_cast<std::uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

std::int64_t floor_div(std::int64_t a, std::int64_t b) {  // b > 0
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}
std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return -floor_div(-a, b);
}

// Integer square root, exact: the floor of sqrt(v).
std::int64_t isqrt(std::int64_t v) {
  if (v <= 0) return 0;
  auto r = static_cast<std::int64_t>(std::sqrt(static_cast<double>(v)));
  while (r * r > v) --r;
  while ((r + 1) * (r + 1) <= v) ++r;
  return r;
}

// Colours that are no class: each differs from every class colour by >= 80 in some channel.
const std::array<std::uint8_t, 3> kDistractorColours[] = {
    {128, 128, 128}, {235, 235, 235}, {240, 130, 30},  {130, 80, 40}, {120, 120, 30},
    {120, 40, 120},  {30, 120, 120},  {240, 160, 200}, {30, 30, 30},  {90, 140, 200},
};
constexpr int kNumDistractorColours =
    static_cast<int>(sizeof(kDistractorColours) / sizeof(kDistractorColours[0]));

// A muted colour: grey level 10..190 with each channel within +-30 of it, so never one of the
// saturated class colours (each has channels >= 220 and <= 60).
std::array<int, 3> muted_colour(Rng& rng) {
  const int grey = rng.uniform(10, 190);
  return {grey + rng.uniform(-30, 30), grey + rng.uniform(-30, 30), grey + rng.uniform(-30, 30)};
}

// ------------------------------------------------------------------------------ the plan

enum class Background { ramp, smooth, checks };

struct Placed {
  int class_id;  // -1: distractor
  SceneShape shape;
  int orient;  // 0 apex/along top, 1 bottom, 2 left, 3 right (triangles; others use 0)
  int x0, y0, w, h;
  int apex;  // triangle apex position across the shape, 0..breadth (edge coordinate)
  std::array<std::uint8_t, 3> colour;
};

struct Content {  // the picture inside the letterbox bands
  int x0, y0, w, h;
};

Content pick_letterbox(Rng& rng, int width, int height) {
  Content c{0, 0, width, height};
  if (!rng.chance(40)) return c;
  // 16:9 and 4:3 landscape pictures, and the same turned to portrait.
  static const int aspects[4][2] = {{16, 9}, {4, 3}, {9, 16}, {3, 4}};
  const int* a = aspects[rng.uniform(0, 3)];
  // s = min(W / aw, H / ah): the picture fills one side, centred on the other (lesson 06).
  if (static_cast<std::int64_t>(width) * a[1] <= static_cast<std::int64_t>(height) * a[0]) {
    c.h = static_cast<int>((static_cast<std::int64_t>(width) * a[1] + a[0] / 2) / a[0]);
    c.y0 = (height - c.h) / 2;
  } else {
    c.w = static_cast<int>((static_cast<std::int64_t>(height) * a[0] + a[1] / 2) / a[1]);
    c.x0 = (width - c.w) / 2;
  }
  return c;
}

// ------------------------------------------------------------------------------ shape spans

// A shape in its own frame: `along` rows (0 .. length-1), each a span [begin, end) across
// (0 .. breadth). Triangles have their apex on row -0.5's edge and their base on the last
// row's far edge; orient maps the frame onto the image (flipped, or transposed for left/right).
struct Span {
  int begin, end;
};

Span shape_span(SceneShape shape, int r, int length, int breadth, int apex) {
  switch (shape) {
    case SceneShape::rectangle:
      return {0, breadth};
    case SceneShape::ellipse: {
      // Pixel centre (c + 0.5, r + 0.5) inside the ellipse inscribed in length x breadth:
      // (2c + 1 - B)^2 L^2 + (2r + 1 - L)^2 B^2 <= B^2 L^2, in exact integers.
      const std::int64_t L = length, B = breadth, dy = 2 * r + 1 - L;
      const std::int64_t rhs = B * B * (L * L - dy * dy);
      if (rhs < 0) return {0, 0};
      const std::int64_t m = isqrt(rhs / (L * L));  // |2c + 1 - B| <= m
      const std::int64_t lo = ceil_div(B - 1 - m, 2), hi = floor_div(B - 1 + m, 2);
      return {static_cast<int>(std::max<std::int64_t>(lo, 0)),
              static_cast<int>(std::min<std::int64_t>(hi + 1, B))};
    }
    case SceneShape::triangle: {
      // At row centre r + 0.5 (t = (2r + 1) / 2L of the way from apex to base) the triangle
      // spans [A (1 - t), A + (B - A) t]; pixel c is in when its centre is.
      const std::int64_t L = length, B = breadth, A = apex, t2 = 2 * r + 1;
      const std::int64_t left2 = A * (2 * L - t2), right2 = 2 * L * A + (B - A) * t2;  // x 2L
      const std::int64_t lo = ceil_div(left2 - L, 2 * L), hi = floor_div(right2 - L, 2 * L);
      return {static_cast<int>(std::max<std::int64_t>(lo, 0)),
              static_cast<int>(std::min<std::int64_t>(hi + 1, B))};
    }
  }
  return {0, 0};
}

// Calls f(pixel index) for every pixel of the placed shape.
template <typename F>
void for_each_pixel(const Placed& p, int width, F&& f) {
  const bool transposed = p.orient >= 2;
  const int length = transposed ? p.w : p.h, breadth = transposed ? p.h : p.w;
  const bool flipped = p.orient == 1 || p.orient == 3;
  for (int r = 0; r < length; ++r) {
    const Span s = shape_span(p.shape, r, length, breadth, p.apex);
    const int along = flipped ? length - 1 - r : r;
    if (!transposed) {
      const std::size_t row = static_cast<std::size_t>(p.y0 + along) * width + p.x0;
      for (int c = s.begin; c < s.end; ++c) f(row + c);
    } else {
      const int x = p.x0 + along;
      for (int c = s.begin; c < s.end; ++c) f(static_cast<std::size_t>(p.y0 + c) * width + x);
    }
  }
}

// ------------------------------------------------------------------------------ ObjectCanvas

class ObjectCanvas {
 public:
  ObjectCanvas(int width, int height)
      : width_(width), ids_(static_cast<std::size_t>(width) * height, 0) {
    drawn_.push_back(0);  // id 0: background
    visible_.push_back(0);
  }

  // Paints p on top of everything as a new object; returns false (and paints nothing) if that
  // would leave an earlier class object partly hidden below kMinVisibleFraction. Two passes,
  // count then paint, so a rejected placement needs no undo.
  bool try_paint(const Placed& p, const std::vector<Placed>& earlier) {
    covered_.assign(drawn_.size(), 0);
    int area = 0;
    for_each_pixel(p, width_, [&](std::size_t i) {
      ++covered_[ids_[i]];
      ++area;
    });
    if (area == 0) return false;
    for (std::size_t j = 0; j < earlier.size(); ++j) {
      const int v = visible_[j + 1] - covered_[j + 1], d = drawn_[j + 1];
      if (earlier[j].class_id >= 0 && v > 0 && 10 * v < 6 * d) return false;  // 0 < v/d < 0.6
    }
    for (std::size_t j = 1; j < drawn_.size(); ++j) visible_[j] -= covered_[j];
    const auto id = static_cast<std::uint8_t>(drawn_.size());
    for_each_pixel(p, width_, [&](std::size_t i) { ids_[i] = id; });
    drawn_.push_back(area);
    visible_.push_back(area);
    return true;
  }

  const std::vector<std::uint8_t>& ids() const { return ids_; }
  int drawn(int id) const { return drawn_[id]; }
  int visible(int id) const { return visible_[id]; }

 private:
  int width_;
  std::vector<std::uint8_t> ids_;  // 0 = background, k = placed object k - 1
  std::vector<int> drawn_, visible_, covered_;
};

constexpr int kMaxObjects = 40;  // fits the one-byte id buffer with room to spare

bool boxes_touch(const Placed& a, const Placed& b, int margin) {
  return a.x0 - margin < b.x0 + b.w && b.x0 - margin < a.x0 + a.w && a.y0 - margin < b.y0 + b.h &&
         b.y0 - margin < a.y0 + a.h;
}

void check_size(int width, int height, const void* rgb, const char* who) {
  if (width < kSceneMinSize || width > kSceneMaxSize || height < kSceneMinSize ||
      height > kSceneMaxSize) {
    throw std::invalid_argument(std::string(who) + ": expected width and height in [" +
                                std::to_string(kSceneMinSize) + ", " +
                                std::to_string(kSceneMaxSize) + "], got " + std::to_string(width) +
                                "x" + std::to_string(height));
  }
  if (rgb == nullptr) throw std::invalid_argument(std::string(who) + ": rgb is null");
}

}  // namespace

std::array<std::uint8_t, 3> class_colour_rgb(int class_id) {
  // Lesson 09's palette (there BGR): any two differ by >= 170 in some channel.
  static const std::array<std::uint8_t, 3> palette[kSceneNumClasses] = {
      {230, 40, 40},   // red
      {40, 220, 40},   // green
      {40, 60, 230},   // blue
      {230, 220, 40},  // yellow
      {220, 40, 220},  // magenta
      {40, 230, 230},  // cyan
  };
  if (class_id < 0 || class_id >= kSceneNumClasses) {
    throw std::invalid_argument("class_colour_rgb: class must be in [0, 6), got " +
                                std::to_string(class_id));
  }
  return palette[class_id];
}

std::vector<SceneObject> render_scene_objects(std::uint64_t seed, int width, int height,
                                              std::uint8_t* rgb) {
  check_size(width, height, rgb, "render_scene");
  // Seeds 0, 1, 2 ... would start splitmix64 in neighbouring states; mixing once decorrelates
  // them (the stream itself is fine from any state).
  Rng rng(Rng(seed).next());

  // 1. Letterbox bands, background.
  const Content content = pick_letterbox(rng, width, height);
  const int bg_pick = rng.uniform(0, 99);
  const Background bg =
      bg_pick < 30 ? Background::ramp : (bg_pick < 65 ? Background::smooth : Background::checks);
  // Separable tables: background(x, y) is a function of tx[x] and ty[y] per channel.
  std::vector<int> tx(static_cast<std::size_t>(width) * 3),
      ty(static_cast<std::size_t>(height) * 3);
  std::array<std::array<int, 3>, 2> check_colours{};
  std::array<int, 3> ramp_lo{}, ramp_amp{};
  int check_kind = 0;
  if (bg == Background::ramp) {
    // Lesson 09's camera: 16 + (a x + b y) mod 48 per channel; here with random slopes,
    // offsets and depths.
    for (int c = 0; c < 3; ++c) {
      const int a = rng.uniform(1, 11), b = rng.uniform(1, 11);
      ramp_lo[c] = rng.uniform(8, 40);
      ramp_amp[c] = rng.uniform(24, 72);
      for (int x = 0; x < width; ++x) tx[3 * x + c] = (x * a) % 48;
      for (int y = 0; y < height; ++y) ty[3 * y + c] = (y * b) % 48;
    }
  } else if (bg == Background::smooth) {
    // A linear gradient between two muted colours plus a triangle wave along x and along y.
    const std::array<int, 3> c0 = muted_colour(rng), c1 = muted_colour(rng);
    const int period_x = rng.uniform(16, 400), period_y = rng.uniform(16, 400);
    const int wave_x = rng.uniform(0, 30), wave_y = rng.uniform(0, 30);
    const int mix = rng.uniform(0, 100);  // % of the gradient along x (the rest along y)
    for (int c = 0; c < 3; ++c) {
      const int d = c1[c] - c0[c];
      for (int x = 0; x < width; ++x) {
        const int phase = x % period_x, tri = std::abs(2 * phase - period_x);  // 0..period
        tx[3 * x + c] = c0[c] + d * mix * x / (100 * width) + wave_x * tri / period_x - wave_x / 2;
      }
      for (int y = 0; y < height; ++y) {
        const int phase = y % period_y, tri = std::abs(2 * phase - period_y);
        ty[3 * y + c] = d * (100 - mix) * y / (100 * height) + wave_y * tri / period_y - wave_y / 2;
      }
    }
  } else {
    // Checks or stripes of two muted colours.
    check_colours[0] = muted_colour(rng);
    check_colours[1] = muted_colour(rng);
    check_kind = rng.uniform(0, 2);  // 0 checks, 1 vertical stripes, 2 horizontal stripes
    const int cell = rng.uniform(6, 64);
    for (int x = 0; x < width; ++x) tx[3 * x] = check_kind == 2 ? 0 : (x / cell) & 1;
    for (int y = 0; y < height; ++y) ty[3 * y] = check_kind == 1 ? 0 : (y / cell) & 1;
  }
  const int noise = rng.chance(30) ? 0 : rng.uniform(2, kMaxPixelNoise);
  const bool exact_colours = rng.chance(25);  // lesson 09's frames: palette colours, no jitter

  // 2. Objects: several per class, and distractors, in random order, on top of each other.
  const int side = std::min(content.w, content.h);
  const int hi_size = std::max(10, side * 45 / 100);
  const int lo_size = std::min(10, hi_size);
  const int room = std::max(1, content.w * content.h / (44 * 44));
  const int num_class_objects = rng.uniform(1, std::min(14, std::max(1, room)));
  const int num_distractors = rng.uniform(0, std::min(5, std::max(0, room / 2)));
  std::vector<int> order;  // class id or -1
  for (int i = 0; i < num_class_objects; ++i) order.push_back(rng.uniform(0, kSceneNumClasses - 1));
  for (int i = 0; i < num_distractors; ++i) order.push_back(-1);
  for (int i = static_cast<int>(order.size()) - 1; i > 0; --i) {  // Fisher-Yates
    std::swap(order[i], order[rng.uniform(0, i)]);
  }

  ObjectCanvas canvas(width, height);
  std::vector<Placed> placed;
  for (const int class_id : order) {
    Placed p{};
    p.class_id = class_id;
    p.shape = static_cast<SceneShape>(rng.uniform(0, 2));
    p.orient = p.shape == SceneShape::triangle ? rng.uniform(0, 3) : 0;
    if (class_id >= 0) {
      const auto base = class_colour_rgb(class_id);
      for (int c = 0; c < 3; ++c) {
        const int j = exact_colours ? 0 : rng.uniform(-kClassJitter, kClassJitter);
        p.colour[c] = clamp_u8(base[c] + j);
      }
    } else {
      const auto base = kDistractorColours[rng.uniform(0, kNumDistractorColours - 1)];
      for (int c = 0; c < 3; ++c) p.colour[c] = clamp_u8(base[c] + rng.uniform(-15, 15));
    }
    // Size: small ones more often (u^2), aspect 1:4 .. 4:1.
    const float u = rng.unit();
    const float size = static_cast<float>(lo_size) + static_cast<float>(hi_size - lo_size) * u * u;
    const float aspect = 1.0f + 3.0f * rng.unit();
    const float root = std::sqrt(aspect);
    const bool wide = rng.chance(50);
    int w = static_cast<int>(wide ? size * root : size / root);
    int h = static_cast<int>(wide ? size / root : size * root);
    w = std::clamp(w, lo_size, content.w);
    h = std::clamp(h, lo_size, content.h);
    p.w = w;
    p.h = h;
    const int breadth = p.orient >= 2 ? h : w;
    p.apex = rng.uniform(0, breadth);
    for (int attempt = 0; attempt < 12; ++attempt) {
      p.x0 = content.x0 + rng.uniform(0, content.w - w);
      p.y0 = content.y0 + rng.uniform(0, content.h - h);
      if (static_cast<int>(placed.size()) >= kMaxObjects) break;
      bool clash = false;  // two objects of one class never touch: they would merge
      for (const Placed& q : placed) {
        if (class_id >= 0 && q.class_id == class_id && boxes_touch(p, q, 2)) clash = true;
      }
      if (!clash && canvas.try_paint(p, placed)) {
        placed.push_back(p);
        break;
      }
    }
  }

  // 3. Compose: background, objects in drawing order, noise, bands. Each a tight loop over
  // rows (the compiler vectorises them); the visible boxes from the id buffer.
  const int n = static_cast<int>(placed.size());
  std::array<std::array<std::uint8_t, 96>, 3> ramp_lut{};  // (tx + ty) -> level, mod 48 folded in
  for (int c = 0; c < 3; ++c) {
    for (int s = 0; s < 96; ++s) {
      ramp_lut[c][s] = static_cast<std::uint8_t>(ramp_lo[c] + (s % 48) * ramp_amp[c] / 48);
    }
  }
  const std::size_t row_bytes = static_cast<std::size_t>(width) * 3;
  for (int y = content.y0; y < content.y0 + content.h; ++y) {
    std::uint8_t* out = rgb + y * row_bytes;
    const int* cy = ty.data() + 3 * y;
    if (bg == Background::ramp) {
      for (int x = content.x0; x < content.x0 + content.w; ++x) {
        for (int c = 0; c < 3; ++c) out[3 * x + c] = ramp_lut[c][tx[3 * x + c] + cy[c]];
      }
    } else if (bg == Background::smooth) {
      for (int x = content.x0; x < content.x0 + content.w; ++x) {
        for (int c = 0; c < 3; ++c) out[3 * x + c] = clamp_u8(tx[3 * x + c] + cy[c]);
      }
    } else {
      for (int x = content.x0; x < content.x0 + content.w; ++x) {
        const auto& col = check_colours[tx[3 * x] ^ cy[0]];
        for (int c = 0; c < 3; ++c) out[3 * x + c] = clamp_u8(col[c]);
      }
    }
  }
  for (const Placed& p : placed) {
    for_each_pixel(p, width, [&](std::size_t i) {
      std::uint8_t* px = rgb + 3 * i;
      px[0] = p.colour[0];
      px[1] = p.colour[1];
      px[2] = p.colour[2];
    });
  }
  if (noise > 0) {
    // Eight 8-bit draws per splitmix64 call, each mapped onto [-noise, noise].
    Rng noise_rng(rng.next());
    const int span = 2 * noise + 1;
    std::vector<std::uint8_t> draws(static_cast<std::size_t>(content.w) * 3 + 8);
    for (int y = content.y0; y < content.y0 + content.h; ++y) {
      for (std::size_t k = 0; k + 8 <= draws.size(); k += 8) {
        const std::uint64_t bits = noise_rng.next();
        for (int b = 0; b < 8; ++b) draws[k + b] = static_cast<std::uint8_t>(bits >> (8 * b));
      }
      std::uint8_t* out = rgb + y * row_bytes + static_cast<std::size_t>(content.x0) * 3;
      for (int k = 0; k < content.w * 3; ++k) {
        out[k] = clamp_u8(out[k] + ((draws[k] * span) >> 8) - noise);
      }
    }
  }
  for (int y = 0; y < height; ++y) {  // bands: exactly 114, no noise (lesson 06's padding)
    std::uint8_t* out = rgb + y * row_bytes;
    if (y < content.y0 || y >= content.y0 + content.h) {
      std::fill(out, out + row_bytes, kLetterboxGrey);
    } else {
      std::fill(out, out + 3 * content.x0, kLetterboxGrey);
      std::fill(out + 3 * (content.x0 + content.w), out + row_bytes, kLetterboxGrey);
    }
  }
  std::vector<int> min_x(n + 1, width), min_y(n + 1, height), max_x(n + 1, -1), max_y(n + 1, -1);
  const std::vector<std::uint8_t>& ids = canvas.ids();
  for (int i = 0; i < n; ++i) {
    const int id = i + 1;
    if (canvas.visible(id) == 0) continue;
    for_each_pixel(placed[i], width, [&](std::size_t k) {
      if (ids[k] != id) return;
      const int x = static_cast<int>(k % width), y = static_cast<int>(k / width);
      min_x[id] = std::min(min_x[id], x);
      max_x[id] = std::max(max_x[id], x);
      min_y[id] = std::min(min_y[id], y);
      max_y[id] = std::max(max_y[id], y);
    });
  }

  std::vector<SceneObject> objects(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int id = i + 1;
    SceneObject& o = objects[i];
    o.class_id = placed[i].class_id;
    o.shape = placed[i].shape;
    o.colour = placed[i].colour;
    o.drawn_pixels = canvas.drawn(id);
    o.visible_pixels = canvas.visible(id);
    if (o.visible_pixels > 0) {
      o.x1 = static_cast<float>(min_x[id]);
      o.y1 = static_cast<float>(min_y[id]);
      o.x2 = static_cast<float>(max_x[id] + 1);
      o.y2 = static_cast<float>(max_y[id] + 1);
    }
    o.in_truth = o.class_id >= 0 && o.visible_pixels > 0 &&
                 10 * o.visible_pixels >= 6 * o.drawn_pixels &&  // kMinVisibleFraction, exactly
                 o.x2 - o.x1 >= kMinTruthSize && o.y2 - o.y1 >= kMinTruthSize;
  }
  return objects;
}

std::vector<SceneBox> render_scene(std::uint64_t seed, int width, int height, std::uint8_t* rgb) {
  std::vector<SceneBox> truth;
  for (const SceneObject& o : render_scene_objects(seed, width, height, rgb)) {
    if (o.in_truth) truth.push_back({o.class_id, o.x1, o.y1, o.x2, o.y2});
  }
  return truth;
}

}  // namespace lesson12

extern "C" int lesson12_render_scene(std::uint64_t seed, int width, int height, std::uint8_t* rgb,
                                     float* boxes, int max_boxes) {
  if (width < lesson12::kSceneMinSize || width > lesson12::kSceneMaxSize ||
      height < lesson12::kSceneMinSize || height > lesson12::kSceneMaxSize || rgb == nullptr ||
      (boxes == nullptr && max_boxes > 0) || max_boxes < 0) {
    return -1;
  }
  // No exception may cross the C boundary; with the size checked above none is thrown but
  // std::bad_alloc, reported the same way.
  try {
    const std::vector<lesson12::SceneBox> truth = lesson12::render_scene(seed, width, height, rgb);
    if (static_cast<int>(truth.size()) > max_boxes) return -2;
    for (std::size_t i = 0; i < truth.size(); ++i) {
      float* row = boxes + 5 * i;
      row[0] = static_cast<float>(truth[i].class_id);
      row[1] = truth[i].x1;
      row[2] = truth[i].y1;
      row[3] = truth[i].x2;
      row[4] = truth[i].y2;
    }
    return static_cast<int>(truth.size());
  } catch (...) {
    return -1;
  }
}
