// Lesson 11: data parallelism for inference. One replica of lesson 09's pipeline per GPU, each
// with its own producer (camera), workers, streams, buffers and engines; nothing is shared but
// the process. Frames/s adds up across GPUs as long as no shared resource (CPU cores for the
// producers, host memory bandwidth for the pinned uploads, PCIe switches) saturates; the scaling
// efficiency says how close to linear it came.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipeline.cuh"  // lesson 09

namespace lesson11 {

struct ReplicaRun {
  std::vector<int> devices;                  // replica r ran on devices[r]
  std::vector<lesson09::RunReport> reports;  // one per replica, in the same order
  // All replicas start serving together, at a common start line after every replica's setup
  // and warm-up; wall_s runs from there to the last replica's last result.
  double wall_s = 0;
  std::int64_t frames() const;  // results over all replicas
  double fps() const { return wall_s > 0 ? static_cast<double>(frames()) / wall_s : 0.0; }
};

// Runs lesson09::run_pipeline once per device, concurrently, each on a host thread of its own
// that binds its device first (lesson09::bind_worker_device) and whose config is `per_gpu` with
// devices = {that device} (so its workers bind it too). Engine: lesson 09's ColorEngine with
// `gflop_per_frame`. The replicas set up and warm up at the same time (lesson 09 serialises that
// per device only) and wait for each other at a start line (PipelineConfig::before_serving;
// per_gpu's own before_serving is replaced). Throws std::invalid_argument for a bad device list
// (check_device_list) or config (lesson09::validate) before any thread starts; rethrows the first
// replica's failure (lesson09::PipelineError) after joining every thread.
ReplicaRun run_replicas(const std::vector<int>& devices, const lesson09::PipelineConfig& per_gpu,
                        double gflop_per_frame);

// One replica's frames against the synthetic video's truth, with lesson 09's check
// (lesson09::check_frame: every true box matched with IoU >= 0.9, right class, nothing extra):
// frames served more than once, frames neither served nor dropped, frames with wrong boxes.
struct ReplicaCheck {
  int wrong = 0, missing = 0, repeated = 0;
  std::string first_problem;  // "" when everything is right
  bool ok() const { return wrong == 0 && missing == 0 && repeated == 0; }
};
ReplicaCheck check_replica(const lesson09::RunReport& report,
                           const lesson09::PipelineConfig& config);

}  // namespace lesson11
