// Lesson 13 tests: calibrating lesson 12's engine graph on its CPU reference, end to end, with
// the trained weights, at 96 x 128 (the network is fully convolutional).
//
// Oracles: the graph's buffers recomputed here with lesson 12's run_engine_graph_reference and
// their max |x| taken directly (the min-max table must hold exactly max / 127); the rendered
// scene's bytes / 255; and the calibrators' own ordering (no histogram method above min-max).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <unistd.h>
#include <vector>

#include "calibrate_graph.hpp"
#include "common/testing.hpp"
#include "network.hpp"
#include "quantize.hpp"
#include "scenes.hpp"
#include "test_weights.hpp"

using namespace lesson13;
using course::testing::Contains;

namespace {

constexpr int kH = 96, kW = 128;

const lesson12::WeightsFile& trained_weights() {
  static const lesson12::WeightsFile w =
      lesson12::read_weights(std::string(LESSON12_DATA_DIR) + "/yolov8n_scenes.weights");
  return w;
}

}  // namespace

TEST_CASE("calibration_images: scenes as lesson 12 feeds them to the network", "[calibrate]") {
  const auto images = calibration_images(500, 2, 40, 32);
  REQUIRE(images.size() == 2);
  for (int i = 0; i < 2; ++i) {
    std::vector<std::uint8_t> rgb(40 * 32 * 3);
    lesson12::render_scene(500 + i, 40, 32, rgb.data());
    REQUIRE(images[i].size() == 3u * 40 * 32);
    for (int c = 0; c < 3; ++c) {
      for (int p = 0; p < 40 * 32; ++p) {
        REQUIRE(images[i][c * 40 * 32 + p] == rgb[3 * p + c] / 255.0f);  // planar RGB in [0, 1]
      }
    }
  }
  CHECK(calibration_images(0, 0, 64, 64).empty());
  CHECK_THROWS_AS(calibration_images(0, -1, 64, 64), std::invalid_argument);
  CHECK_THROWS_AS(calibration_images(0, 1, 16, 64), std::invalid_argument);  // below 32
}

TEST_CASE("network_id: the weights and the graph, not the input size", "[calibrate]") {
  const auto w11 = lesson12::testing::random_yolov8n_weights(11);
  const auto w12 = lesson12::testing::random_yolov8n_weights(12);
  const std::string a = network_id("yolov8n", lesson12::optimize(lesson12::yolov8n(w11, kH, kW)));
  const std::string b = network_id("yolov8n", lesson12::optimize(lesson12::yolov8n(w11, 64, 64)));
  const std::string c = network_id("yolov8n", lesson12::optimize(lesson12::yolov8n(w12, kH, kW)));
  CHECK(a == b);
  CHECK(a != c);
  REQUIRE(a.size() == std::string("yolov8n-").size() + 16);
  CHECK(a.rfind("yolov8n-", 0) == 0);
  CHECK(a.find_first_not_of("0123456789abcdef", 8) == std::string::npos);
  const auto g = lesson12::optimize(lesson12::yolov8n(w11, 64, 64));
  CHECK_THROWS_AS(network_id("", g), std::invalid_argument);
  CHECK_THROWS_AS(network_id("yolo v8", g), std::invalid_argument);
}

TEST_CASE("calibration on the CPU reference: every buffer observed, tables right, round trip",
          "[calibrate][network]") {
  const lesson12::EngineGraph graph =
      lesson12::optimize(lesson12::yolov8n(trained_weights(), kH, kW));
  const std::vector<std::string> names = calibration_tensor_names(graph);
  REQUIRE(names.size() == graph.buffers.size() + 1);
  CHECK(names[0] == "images");
  for (std::size_t b = 0; b < graph.buffers.size(); ++b)
    CHECK(names[b + 1] == graph.buffers[b].name);

  const int count = 3;
  const auto images = calibration_images(1000, count, kW, kH);
  const std::vector<TensorObservation> obs = observe_engine_graph(graph, images);
  REQUIRE(obs.size() == names.size());

  // The oracle: the buffers recomputed here, their max |x| taken directly.
  std::vector<float> amax(names.size(), 0.0f);
  std::vector<std::uint64_t> values(names.size(), 0);
  for (const auto& image : images) {
    for (float v : image) amax[0] = std::max(amax[0], std::fabs(v));
    values[0] += image.size();
    std::vector<std::vector<float>> buffers;
    lesson12::run_engine_graph_reference(graph, image, &buffers);
    REQUIRE(buffers.size() == graph.buffers.size());
    for (std::size_t b = 0; b < buffers.size(); ++b) {
      for (float v : buffers[b]) amax[b + 1] = std::max(amax[b + 1], std::fabs(v));
      values[b + 1] += buffers[b].size();
    }
  }
  for (std::size_t t = 0; t < obs.size(); ++t) {
    INFO(names[t]);
    CHECK(obs[t].name == names[t]);
    CHECK(obs[t].observer.count() == values[t]);
    CHECK(obs[t].observer.amax() == amax[t]);
    if (t > 0) {
      CHECK(values[t] == count * graph.buffers[t - 1].elements_per_image());
    }
  }

  const std::string id = network_id(trained_weights().model, graph);
  const CalibrationTable minmax = make_calibration_table(obs, {CalibrationMethod::min_max}, id);
  const CalibrationTable p9999 =
      make_calibration_table(obs, {CalibrationMethod::percentile, 99.99}, id);
  const CalibrationTable p999 =
      make_calibration_table(obs, {CalibrationMethod::percentile, 99.9}, id);
  const CalibrationTable entropy = make_calibration_table(obs, {CalibrationMethod::entropy}, id);
  CHECK(minmax.calibrator == "minmax");
  CHECK(entropy.calibrator == "entropy-128");
  CHECK(minmax.network == id);
  int entropy_clips = 0;
  for (std::size_t t = 0; t < names.size(); ++t) {
    INFO(names[t] << ": amax " << amax[t]);
    CHECK(minmax.tensors[t].name == names[t]);
    CHECK(minmax.tensors[t].scale == amax[t] / 127.0f);  // exactly: float(amax) / 127 in float
    for (const CalibrationTable* table : {&p9999, &p999, &entropy}) {
      CHECK(table->tensors[t].name == names[t]);
      CHECK(table->tensors[t].scale > 0.0f);
      CHECK(table->tensors[t].scale <= minmax.tensors[t].scale);
    }
    CHECK(p999.tensors[t].scale <= p9999.tensors[t].scale);
    entropy_clips += entropy.tensors[t].scale < minmax.tensors[t].scale;
  }
  // Real activations have tails: the entropy threshold clips some of them (how many, and what
  // it costs in boxes, is the GPU lesson's measurement).
  std::printf("calibration at %dx%d on %d scenes: %zu tensors; entropy clips %d of them\n", kW, kH,
              count, names.size(), entropy_clips);
  CHECK(entropy_clips > 0);
  // The input is RGB / 255: its amax is at most 1.
  CHECK(amax[0] <= 1.0f);
  CHECK(minmax.scale("images") <= 1.0f / 127.0f);

  // Round trip: text, then a file checked against this network's id and tensors.
  for (const CalibrationTable* table : {&minmax, &p9999, &p999, &entropy}) {
    const CalibrationTable back = parse_calibration_table(format_calibration_table(*table));
    REQUIRE(back.tensors.size() == table->tensors.size());
    for (std::size_t t = 0; t < names.size(); ++t) {
      CHECK(back.tensors[t].name == table->tensors[t].name);
      CHECK(back.tensors[t].scale == table->tensors[t].scale);
    }
    CHECK(back.calibrator == table->calibrator);
  }
  const std::string path =
      "/tmp/lesson13_calibration_" + std::to_string(static_cast<long>(::getpid())) + ".txt";
  save_calibration_table(path, entropy);
  const CalibrationTable loaded = load_calibration_table(path, id, names);
  CHECK(loaded.scale(names.back()) == entropy.tensors.back().scale);
  // The same file for a network with other weights, or missing a tensor the engine needs.
  const std::string other = network_id(
      "yolov8n",
      lesson12::optimize(lesson12::yolov8n(lesson12::testing::random_yolov8n_weights(3), kH, kW)));
  CHECK_THROWS_WITH(load_calibration_table(path, other, names), Contains("another network"));
  std::vector<std::string> more = names;
  more.push_back("model.99");
  CHECK_THROWS_WITH(load_calibration_table(path, id, more), Contains("model.99"));
  std::remove(path.c_str());
}

TEST_CASE("calibration on the CPU reference: empty sets, wrong sizes, silent tensors",
          "[calibrate]") {
  const lesson12::EngineGraph graph =
      lesson12::optimize(lesson12::yolov8n(lesson12::testing::random_yolov8n_weights(5), 64, 64));
  CHECK_THROWS_WITH(observe_engine_graph(graph, {}), Contains("calibration set is empty"));
  CHECK_THROWS_WITH(observe_engine_graph(
                        graph, {std::vector<float>(3 * 64 * 64), std::vector<float>(3 * 64 * 63)}),
                    Contains("image 1"));
  // A tensor that was zero on every image: no scale, and the table says which one.
  std::vector<TensorObservation> obs;
  obs.push_back({"images", ActivationObserver()});
  obs.back().observer.observe(std::vector<float>{0.5f, 1.0f});
  obs.push_back({"model.7", ActivationObserver()});
  obs.back().observer.observe(std::vector<float>(100, 0.0f));
  CHECK_THROWS_WITH(make_calibration_table(obs, {CalibrationMethod::entropy}, "n"),
                    Contains("'model.7'") && Contains("was 0"));
  CHECK_THROWS_AS(make_calibration_table({}, {CalibrationMethod::entropy}, "n"),
                  std::invalid_argument);
  // Nothing observed at all: the calibrators refuse.
  obs[1] = {"model.7", ActivationObserver()};
  CHECK_THROWS_WITH(make_calibration_table(obs, {CalibrationMethod::min_max}, "n"),
                    Contains("empty calibration set"));
}
