// Lesson 12 tests: the scene generator (CPU only).
//
// Determinism (same seed, same bytes and boxes; different seeds differ), truth boxes inside the
// image, every truth box tight around pixels of its class colour (within jitter + noise), the
// visible-fraction and minimum-size rules against the generator's own object list, letterbox
// bands exactly grey 114, size checks, and the C ABI's -1 / -2 returns.
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "common/testing.hpp"
#include "scenes.hpp"

using course::testing::Contains;
using namespace lesson12;

namespace {

std::vector<std::uint8_t> image(int width, int height) {
  return std::vector<std::uint8_t>(static_cast<std::size_t>(width) * height * 3);
}

// Within kClassJitter + kMaxPixelNoise of class c's palette colour in every channel.
bool in_class_colour(const std::uint8_t* px, int c) {
  const auto base = class_colour_rgb(c);
  for (int k = 0; k < 3; ++k) {
    if (std::abs(int{px[k]} - int{base[k]}) > kClassJitter + kMaxPixelNoise) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("render_scene is deterministic in the seed", "[scenes]") {
  for (const auto& [w, h] : {std::pair{640, 640}, std::pair{128, 96}, std::pair{64, 64}}) {
    auto a = image(w, h), b = image(w, h), c = image(w, h);
    for (std::uint64_t seed : {0ull, 1ull, 1000000ull, 0xFFFFFFFFFFFFull}) {
      const auto ta = render_scene(seed, w, h, a.data());
      const auto tb = render_scene(seed, w, h, b.data());
      REQUIRE(a == b);
      REQUIRE(ta.size() == tb.size());
      for (std::size_t i = 0; i < ta.size(); ++i) {
        CHECK(ta[i].class_id == tb[i].class_id);
        CHECK(ta[i].x1 == tb[i].x1);
        CHECK(ta[i].y2 == tb[i].y2);
      }
      render_scene(seed + 1, w, h, c.data());
      CHECK(a != c);
    }
  }
}

TEST_CASE("truth boxes lie inside the image and around pixels of their class colour", "[scenes]") {
  int boxes = 0;
  for (const auto& [w, h] : {std::pair{640, 640}, std::pair{128, 96}, std::pair{320, 200}}) {
    auto img = image(w, h);
    for (std::uint64_t seed = 0; seed < 60; ++seed) {
      for (const SceneBox& t : render_scene(seed, w, h, img.data())) {
        ++boxes;
        REQUIRE(t.class_id >= 0);
        REQUIRE(t.class_id < kSceneNumClasses);
        REQUIRE(t.x1 >= 0);
        REQUIRE(t.y1 >= 0);
        REQUIRE(t.x2 <= w);
        REQUIRE(t.y2 <= h);
        REQUIRE(t.x2 - t.x1 >= kMinTruthSize);
        REQUIRE(t.y2 - t.y1 >= kMinTruthSize);
        const int x1 = static_cast<int>(t.x1), x2 = static_cast<int>(t.x2);
        const int y1 = static_cast<int>(t.y1), y2 = static_cast<int>(t.y2);
        // Tight: the first and last row and column of the box each hold a class-colour pixel.
        bool top = false, bottom = false, left = false, right = false;
        int coloured = 0;
        for (int y = y1; y < y2; ++y) {
          for (int x = x1; x < x2; ++x) {
            if (!in_class_colour(&img[(static_cast<std::size_t>(y) * w + x) * 3], t.class_id))
              continue;
            ++coloured;
            top |= y == y1;
            bottom |= y == y2 - 1;
            left |= x == x1;
            right |= x == x2 - 1;
          }
        }
        CHECK((top && bottom && left && right));
        // A triangle fills half its box and may be 40% hidden: at least 0.5 * 0.6 = 30% is
        // its colour.
        CHECK(coloured * 10 >= 3 * (x2 - x1) * (y2 - y1));
      }
    }
  }
  CHECK(boxes > 300);  // the scenes do have objects
}

TEST_CASE("truth holds exactly the class objects >= 60% visible with a 6-pixel visible box",
          "[scenes]") {
  auto img = image(640, 640), again = image(640, 640);
  int distractors = 0, partly_hidden = 0;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    const auto objects = render_scene_objects(seed, 640, 640, img.data());
    const auto truth = render_scene(seed, 640, 640, again.data());
    REQUIRE(img == again);
    std::size_t next = 0;
    for (const SceneObject& o : objects) {
      REQUIRE(o.visible_pixels <= o.drawn_pixels);
      const bool expected = o.class_id >= 0 && o.visible_pixels > 0 &&
                            static_cast<double>(o.visible_pixels) >=
                                kMinVisibleFraction * static_cast<double>(o.drawn_pixels) &&
                            o.x2 - o.x1 >= kMinTruthSize && o.y2 - o.y1 >= kMinTruthSize;
      CHECK(o.in_truth == expected);
      distractors += o.class_id < 0;
      partly_hidden += o.in_truth && o.visible_pixels < o.drawn_pixels;
      // Placement never leaves a class object in the ambiguous zone: hidden or >= 60% visible.
      if (o.class_id >= 0 && o.visible_pixels > 0) {
        CHECK(10 * o.visible_pixels >= 6 * o.drawn_pixels);
      }
      if (o.in_truth) {
        REQUIRE(next < truth.size());
        CHECK(truth[next].class_id == o.class_id);
        CHECK(truth[next].x1 == o.x1);
        CHECK(truth[next].y1 == o.y1);
        CHECK(truth[next].x2 == o.x2);
        CHECK(truth[next].y2 == o.y2);
        ++next;
      }
    }
    CHECK(next == truth.size());
  }
  CHECK(distractors > 0);
  CHECK(partly_hidden > 0);  // occlusion happens, and the truth box is the visible part
}

TEST_CASE("letterbox bands are exactly grey 114 and some scenes have them", "[scenes]") {
  auto img = image(640, 640);
  int banded = 0;
  for (std::uint64_t seed = 0; seed < 50; ++seed) {
    render_scene(seed, 640, 640, img.data());
    // A band covers the top row or the left column entirely.
    bool top = true, left = true;
    for (int x = 0; x < 640; ++x) {
      for (int c = 0; c < 3; ++c) top &= img[3 * x + c] == kLetterboxGrey;
    }
    for (int y = 0; y < 640; ++y) {
      for (int c = 0; c < 3; ++c)
        left &= img[3 * static_cast<std::size_t>(y) * 640 + c] == kLetterboxGrey;
    }
    banded += top || left;
  }
  CHECK(banded > 5);
  CHECK(banded < 45);
}

TEST_CASE("render_scene rejects sizes outside [32, 4096] and a null image", "[scenes]") {
  auto img = image(4097, 32);
  CHECK_THROWS_AS(render_scene(0, 31, 64, img.data()), std::invalid_argument);
  CHECK_THROWS_AS(render_scene(0, 64, 31, img.data()), std::invalid_argument);
  CHECK_THROWS_AS(render_scene(0, 4097, 32, img.data()), std::invalid_argument);
  CHECK_THROWS_WITH(render_scene(0, 0, 64, img.data()), Contains("[32, 4096]"));
  CHECK_THROWS_AS(render_scene(0, 64, 64, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(class_colour_rgb(6), std::invalid_argument);
  CHECK_NOTHROW(render_scene(0, 32, 32, img.data()));
}

TEST_CASE("C ABI: box rows, -1 for a bad size, -2 rather than overflow", "[scenes]") {
  auto img = image(640, 640);
  std::uint64_t seed = 0;
  std::vector<SceneBox> truth;
  while ((truth = render_scene(seed, 640, 640, img.data())).size() < 3) ++seed;
  const int n = static_cast<int>(truth.size());

  std::vector<float> boxes(5 * (n + 1), -7.0f);
  REQUIRE(lesson12_render_scene(seed, 640, 640, img.data(), boxes.data(), n) == n);
  for (int i = 0; i < n; ++i) {
    CHECK(boxes[5 * i + 0] == static_cast<float>(truth[i].class_id));
    CHECK(boxes[5 * i + 1] == truth[i].x1);
    CHECK(boxes[5 * i + 2] == truth[i].y1);
    CHECK(boxes[5 * i + 3] == truth[i].x2);
    CHECK(boxes[5 * i + 4] == truth[i].y2);
  }
  CHECK(boxes[5 * n] == -7.0f);  // nothing past max_boxes

  std::vector<float> few(5 * (n - 1), -7.0f);
  CHECK(lesson12_render_scene(seed, 640, 640, img.data(), few.data(), n - 1) == -2);
  for (float v : few) CHECK(v == -7.0f);

  std::vector<std::uint8_t> untouched(32 * 32 * 3, 9);
  CHECK(lesson12_render_scene(seed, 31, 32, untouched.data(), boxes.data(), n) == -1);
  CHECK(lesson12_render_scene(seed, 32, 5000, untouched.data(), boxes.data(), n) == -1);
  CHECK(lesson12_render_scene(seed, 32, 32, nullptr, boxes.data(), n) == -1);
  CHECK(lesson12_render_scene(seed, 32, 32, untouched.data(), nullptr, 4) == -1);
  for (std::uint8_t v : untouched) REQUIRE(v == 9);
}
