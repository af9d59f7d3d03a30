#include "evaluate.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "common/cuda_check.hpp"
#include "common/letterbox.cuh"
#include "common/memory.hpp"

namespace lesson12 {

std::vector<float> scene_input(std::uint64_t seed, int width, int height,
                               std::vector<SceneBox>* truth) {
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(width) * height * 3);
  std::vector<SceneBox> boxes = render_scene(seed, width, height, rgb.data());
  const std::size_t plane = static_cast<std::size_t>(width) * height;
  std::vector<float> chw(3 * plane);
  for (std::size_t p = 0; p < plane; ++p) {
    for (int c = 0; c < 3; ++c) chw[c * plane + p] = rgb[3 * p + c] / 255.0f;
  }
  if (truth) *truth = std::move(boxes);
  return chw;
}

OutputError compare_outputs(const std::vector<float>& got, const std::vector<float>& ref,
                            int num_classes, int input_h, int input_w, float min_score) {
  const int n = num_candidates(input_h, input_w);
  const std::size_t expected = static_cast<std::size_t>(4 + num_classes) * n;
  if (got.size() != expected || ref.size() != expected) {
    throw std::invalid_argument("compare_outputs: expected two tensors of " +
                                std::to_string(expected) + " values, got " +
                                std::to_string(got.size()) + " and " + std::to_string(ref.size()));
  }
  const int p3 = (input_h / 8) * (input_w / 8), p4 = (input_h / 16) * (input_w / 16);
  OutputError e;
  for (int i = 0; i < n; ++i) {
    float best = 0;
    for (int c = 0; c < num_classes; ++c) {
      const std::size_t k = static_cast<std::size_t>(4 + c) * n + i;
      best = std::max(best, ref[k]);
      e.max_score = std::max(e.max_score, std::fabs(static_cast<double>(got[k]) - ref[k]));
    }
    if (best <= min_score) continue;
    ++e.confident;
    const double stride = i < p3 ? 8 : i < p3 + p4 ? 16 : 32;
    for (int r = 0; r < 4; ++r) {
      const std::size_t k = static_cast<std::size_t>(r) * n + i;
      const double d = std::fabs(static_cast<double>(got[k]) - ref[k]);
      e.max_box_px = std::max(e.max_box_px, d);
      e.max_box_cells = std::max(e.max_box_cells, d / stride);
    }
  }
  return e;
}

lesson08::PostprocessConfig eval_config() {
  lesson08::PostprocessConfig c;
  c.conf_threshold = 0.001f;
  c.iou_threshold = 0.7f;
  c.max_detections = 300;
  c.max_candidates = 8400;
  return c;
}

lesson08::PostprocessConfig deploy_config() {
  lesson08::PostprocessConfig c;
  c.conf_threshold = 0.25f;
  c.iou_threshold = 0.45f;
  return c;
}

std::vector<std::vector<lesson08::Detection>> run_detector(
    const Engine& engine, ExecutionContext& context, std::uint64_t first_seed, int count, int batch,
    const lesson08::PostprocessConfig& config, cudaStream_t stream,
    std::vector<std::vector<SceneBox>>* truth) {
  if (count < 0) throw std::invalid_argument("run_detector: count must be >= 0");
  const OptimizationProfile p = engine.profile();
  if (batch < p.min_batch || batch > p.max_batch) {
    throw std::invalid_argument("run_detector: batch " + std::to_string(batch) +
                                " outside the profile [" + std::to_string(p.min_batch) + ", " +
                                std::to_string(p.max_batch) + "]");
  }
  const int h = engine.input_h(), w = engine.input_w();
  const std::size_t in_elems = 3 * static_cast<std::size_t>(h) * w;
  lesson08::OutputSpec spec;
  spec.layout = lesson08::Layout::yolov8;
  spec.num_candidates = engine.num_candidates();
  spec.num_classes = engine.num_classes();
  const std::size_t out_elems = spec.elements();
  course::DeviceBuffer<float> images(in_elems * batch), output(out_elems * batch);
  lesson08::GpuPostprocessor post(spec, course::make_letterbox(w, h, w, h), config);
  context.set_tensor_address("images", images.data());
  context.set_tensor_address("output0", output.data());
  std::vector<std::vector<lesson08::Detection>> out;
  if (truth) truth->clear();
  std::vector<float> host(in_elems * batch);
  for (int first = 0; first < count; first += batch) {
    const int n = std::min(batch, count - first);
    for (int i = 0; i < n; ++i) {
      std::vector<SceneBox> t;
      const std::vector<float> x = scene_input(first_seed + first + i, w, h, &t);
      std::copy(x.begin(), x.end(), host.begin() + i * in_elems);
      if (truth) truth->push_back(std::move(t));
    }
    CUDA_CHECK(cudaMemcpyAsync(images.data(), host.data(), n * in_elems * sizeof(float),
                               cudaMemcpyHostToDevice, stream));
    context.set_input_shape(std::max(n, p.min_batch));
    context.enqueue(stream);
    for (int i = 0; i < n; ++i) {
      out.push_back(post.run(output.data() + i * out_elems, out_elems, stream).detections);
    }
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return out;
}

}  // namespace lesson12
