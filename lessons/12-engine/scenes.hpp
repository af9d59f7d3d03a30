// Lesson 12: the detector's world. A deterministic scene generator: the training data of
// train/train_detector.py (through the C ABI below and ctypes) and the held-out frames the
// engine is checked on.
//
//   SceneBox               one truth box: class and the box of the object's visible pixels
//   SceneObject            everything drawn, truth or not (for the tests)
//   class_colour_rgb       lesson 09's palette (red, green, blue, yellow, magenta, cyan) as RGB
//   render_scene           seed -> RGB image + truth boxes
//   render_scene_objects   the same image, with every object and its visibility
//   lesson12_render_scene  the C ABI of render_scene (liblesson12_scenes.so)
//
// A scene: a textured background (dark ramps like lesson 09's camera, smooth gradients and
// waves, checks and stripes, all in unsaturated colours), filled rectangles, ellipses and
// triangles in the class colours with per-object colour jitter, distractor shapes in colours
// that are no class, per-pixel noise, and sometimes letterbox bands of grey 114 around a 16:9,
// 4:3 or portrait picture, centred as lesson 06 letterboxes (so lesson 09's 1080p frames
// letterboxed to 640 x 640 are in the distribution).
//
// Truth: the bounding box of an object's VISIBLE pixels, for class objects at least
// kMinVisibleFraction visible whose visible box is at least kMinTruthSize pixels on both sides.
// Placement avoids the cases no detector can get right: an object is redrawn elsewhere if it
// would leave an earlier class object partly hidden below kMinVisibleFraction (so every class
// object is either fully hidden or clearly visible), and two objects of one class never touch
// (with no jitter they would be one blob).
//
// Deterministic everywhere: a private splitmix64 stream, integer or exactly-rounded float
// math only, no library random numbers.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace lesson12 {

constexpr int kSceneNumClasses = 6;
constexpr int kSceneMinSize = 32;    // smallest width or height render_scene accepts
constexpr int kSceneMaxSize = 4096;  // largest
constexpr int kClassJitter = 20;     // per-object colour offset, each channel, at most +-20
constexpr int kMaxPixelNoise = 12;   // per-pixel noise, each channel, at most +-12
constexpr float kMinVisibleFraction = 0.6f;
constexpr int kMinTruthSize = 6;  // pixels, both sides of the visible box
constexpr std::uint8_t kLetterboxGrey = 114;

// Lesson 09's palette in RGB order (lesson 09 stores BGR). Throws std::invalid_argument for a
// class outside [0, 6).
std::array<std::uint8_t, 3> class_colour_rgb(int class_id);

// Continuous pixel coordinates of edges: a box covering pixel columns 3..7 has x1 = 3, x2 = 8.
struct SceneBox {
  int class_id;
  float x1, y1, x2, y2;
};

enum class SceneShape { rectangle, ellipse, triangle };

struct SceneObject {
  int class_id = -1;  // -1: a distractor (colour of no class)
  SceneShape shape = SceneShape::rectangle;
  int drawn_pixels = 0;                  // pixels the shape covered when drawn
  int visible_pixels = 0;                // pixels still showing in the final image
  float x1 = 0, y1 = 0, x2 = 0, y2 = 0;  // box of the visible pixels (all 0 when none)
  std::array<std::uint8_t, 3> colour{};  // RGB after jitter, before pixel noise
  bool in_truth = false;
};

// Renders scene `seed` at width x height into rgb (height * width * 3 bytes, RGB, row-major,
// no padding) and returns its truth boxes (class objects in drawing order). Throws
// std::invalid_argument if width or height is outside [32, 4096] or rgb is null.
std::vector<SceneBox> render_scene(std::uint64_t seed, int width, int height, std::uint8_t* rgb);

// The same image; returns every object drawn (class objects and distractors, drawing order)
// with its visibility and whether it is in the truth. Same errors.
std::vector<SceneObject> render_scene_objects(std::uint64_t seed, int width, int height,
                                              std::uint8_t* rgb);

}  // namespace lesson12

// C ABI for ctypes. rgb: height * width * 3 bytes; boxes: max_boxes rows of 5 floats
// (class, x1, y1, x2, y2). Returns the number of truth boxes; -1 (nothing written) for a size
// outside [32, 4096] or a null pointer; -2 (the image written, no boxes) when the truth has more
// than max_boxes boxes.
extern "C" int lesson12_render_scene(std::uint64_t seed, int width, int height, std::uint8_t* rgb,
                                     float* boxes, int max_boxes);
